// The gate's report page. Plain JavaScript, no framework, no build step.
// Every piece of data from the API is written with textContent or as an
// SVG attribute, never parsed as markup: scenes, recipients and payloads
// come from producers.
'use strict';

(function () {
  const TOKEN_KEY = 'gate.apiToken';
  const SVG = 'http://www.w3.org/2000/svg';
  const HOUR = 3600e3;
  const nf = new Intl.NumberFormat();
  const $ = (id) => document.getElementById(id);

  let token = sessionStorage.getItem(TOKEN_KEY) || '';
  let range = { since: null, until: null };
  let lookupState = { recipient: '', cursor: '' };
  let refundsCursor = '';

  // --- API -----------------------------------------------------------------

  class AuthError extends Error {}

  // APIError is an answer other than 2xx: status is the HTTP status,
  // detail the API's own words ({"error": …}), kept verbatim.
  class APIError extends Error {
    constructor(path, status, detail) {
      super(path + ': ' + detail);
      this.status = status;
      this.detail = detail;
    }
  }

  // api calls path with the bearer token (GET, unless opts.method) and
  // returns the decoded JSON, or the Response itself when opts.raw is set.
  // opts.body is sent as is. A 401 shows the token form.
  async function api(path, params, opts) {
    opts = opts || {};
    const url = new URL(path, window.location.origin);
    for (const [k, v] of Object.entries(params || {})) {
      if (v !== undefined && v !== null && v !== '') url.searchParams.set(k, v);
    }
    const headers = { Accept: opts.raw ? 'text/csv' : 'application/json' };
    if (token) headers.Authorization = 'Bearer ' + token;
    const init = { method: opts.method || 'GET', headers, cache: 'no-store' };
    if (opts.body !== undefined) {
      init.body = opts.body;
      headers['Content-Type'] = opts.contentType || 'text/plain; charset=utf-8';
    }
    const resp = await fetch(url, init);
    if (resp.status === 401) {
      askToken(token ? 'The gate refused this token. Enter the current GATE_API_READ_TOKEN (or GATE_API_TOKEN).' : null);
      throw new AuthError('the API needs a token');
    }
    if (!resp.ok) {
      let msg = resp.status + ' ' + resp.statusText;
      try { msg = (await resp.json()).error || msg; } catch (_) { /* not JSON */ }
      throw new APIError(path, resp.status, msg);
    }
    return opts.raw ? resp : resp.json();
  }

  function askToken(message) {
    if (message) $('auth-message').textContent = message;
    $('auth').hidden = false;
    $('token').focus();
  }

  // --- formatting ----------------------------------------------------------

  const num = (n) => nf.format(n || 0);
  function rate(held, received) {
    if (!received) return '—';
    return (100 * held / received).toFixed(1) + '%';
  }
  function when(iso) {
    if (!iso) return '';
    return new Date(iso).toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'medium' });
  }
  function relative(iso) {
    const ms = new Date(iso).getTime() - Date.now();
    const abs = Math.abs(ms);
    let text;
    if (abs < 60e3) text = Math.round(abs / 1e3) + ' s';
    else if (abs < HOUR) text = Math.round(abs / 60e3) + ' min';
    else if (abs < 48 * HOUR) text = (abs / HOUR).toFixed(1) + ' h';
    else text = Math.round(abs / (24 * HOUR)) + ' days';
    return ms > 0 ? 'in ' + text : text + ' ago';
  }
  function limitText(s) {
    if (s.reason === 'unknown_scene') return 'scene has no rule (unknown_scene)';
    if (s.reason === 'quiet_hours') return 'quiet hours of the scene';
    if (s.reason === 'queued') return 'queued behind held messages';
    if (s.reason === 'preference') return 'muted by the recipient (preferences)';
    const scope = s.limit_scope === 'recipient' ? 'across all scenes' : 'in this scene';
    // A rate limit: a burst, then one per emission interval.
    if (s.limit_rate && s.limit_rate !== '0s') return s.limit_max + ' at once, then 1 per ' + s.limit_rate + ' ' + scope;
    // A calendar limit has no window; its row names the period (rows
    // written before limit_calendar existed do not).
    const per = s.limit_window && s.limit_window !== '0s' ? s.limit_window : 'calendar ' + (s.limit_calendar || 'period');
    return s.limit_max + ' per ' + per + ' ' + scope;
  }
  function limitsText(limits) {
    return (limits || []).map((l) => l.rate
      ? 'rate ' + l.rate + ', burst ' + l.burst
      : l.max + ' per ' + (l.calendar ? 'calendar ' + l.calendar : l.window)).join(', ') || 'none';
  }
  // overLimitText says what a scene's rule does to a message over its limit.
  function overLimitText(r) {
    let what = r.on_exceed;
    if (r.on_exceed === 'defer') what += ' (up to ' + (r.max_defer || '24h') + ', then ' + (r.defer_fallback || 'suppress') + ')';
    if (r.on_exceed === 'digest') what += r.digest_group ? ' (group ' + r.digest_group + ')' : '';
    if (r.shadow) what += ' (shadow: forwarded anyway)';
    if (r.bypass_priorities && r.bypass_priorities.length) what += '; ' + r.bypass_priorities.join(', ') + ' bypass';
    const q = r.quiet_hours;
    if (q) what += '; quiet ' + (q.from || '?') + '–' + (q.to || '?') + ' ' + (r.tz || 'UTC') + ': ' + q.action;
    return what;
  }
  // outcome says what became of the message of an audit row: suppressed,
  // or held and then released, given its fallback, or sent in a digest.
  function outcome(s) {
    const at = s.settled_at ? ' at ' + when(s.settled_at) : '';
    if (!s.held_as) return s.shadow ? 'forwarded (shadow)' : 'suppressed';
    const held = s.held_as === 'digest' ? 'held for a digest' : 'deferred';
    switch (s.settled) {
      case undefined: case '':
        // Past max_defer with defer_fallback digest: it waits in a digest.
        return s.fallback === 'digest' ? 'deferred → moved to a digest, still held' : held + ', still held';
      case 'released': return 'deferred → released' + at;
      case 'fell_back': return 'deferred → fell back to ' + s.fallback + at;
      case 'digested': return 'in digest ' + s.digest_id + ' sent' + at;
      default: return held + ' → ' + s.settled + at;
    }
  }

  // el builds an element with text content and attributes.
  function el(tag, text, attrs) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    return e;
  }
  function timeCell(iso, extra) {
    const td = el('td', when(iso) + (extra ? ' (' + extra + ')' : ''), { class: 'text', title: iso || '' });
    if (iso) td.dataset.time = iso;
    return td;
  }

  // --- time range ----------------------------------------------------------

  function pickRange() {
    const choice = $('range').value;
    $('custom-range').hidden = choice !== 'custom';
    let since, until;
    if (choice === 'custom') {
      since = $('since').value ? new Date($('since').value) : null;
      until = $('until').value ? new Date($('until').value) : null;
    } else {
      // The end is the next whole minute, so the numbers hold still for a
      // minute and the current hour is included.
      until = new Date(Math.ceil(Date.now() / 60e3) * 60e3);
      since = new Date(until.getTime() - parseInt(choice, 10) * HOUR);
    }
    range = { since: since && since.toISOString(), until: until && until.toISOString() };
    const label = $('range-label');
    label.textContent = 'From ' + (range.since ? when(range.since) : 'the beginning') + ' to ' +
      (range.until ? when(range.until) : 'now') + '. Counts are per hour: the first hour counts whole.';
    label.dataset.since = range.since || '';
    label.dataset.until = range.until || '';
  }

  // --- sections ------------------------------------------------------------

  const FIELDS = ['received', 'forwarded', 'suppressed', 'dropped', 'invalid'];
  // HELD count held messages: deferred and digested when decided (in
  // received), released and fell_back when settled later (not in received).
  const HELD = ['deferred', 'digested', 'released', 'fell_back'];
  // The chart stacks what received adds up to (parked aside: it is rare).
  const STACKED = ['forwarded', 'suppressed', 'dropped', 'invalid', 'deferred', 'digested'];
  const CHART = ['received', ...STACKED];

  // summaryRow is a scene's row (or the total's, scene "*"); muted counts
  // the scene's messages its recipients muted, more marks it a lower bound.
  function summaryRow(s, tag, muted, more) {
    const tr = el('tr', null, { 'data-scene': s.scene });
    const name = s.scene === '*' ? 'all scenes' : (s.scene || '(no scene: invalid messages)');
    tr.appendChild(el(tag, name, { class: s.scene ? 'text' : 'text muted', scope: 'row' }));
    for (const f of FIELDS) {
      tr.appendChild(el('td', num(s[f]), { 'data-field': f, 'data-value': s[f] || 0 }));
      if (f === 'suppressed') {
        tr.appendChild(el('td', num(muted) + (more && muted ? '+' : ''), { 'data-field': 'muted', 'data-value': muted || 0 }));
      }
    }
    const shadow = (s.shadow_suppressed || 0) + (s.shadow_dropped || 0);
    tr.appendChild(el('td', num(shadow), { 'data-field': 'shadow', 'data-value': shadow }));
    const unchecked = s.forwarded_unchecked || 0;
    for (const [field, v] of [['unchecked', unchecked], ['parked', s.parked || 0]]) {
      const attrs = { 'data-field': field, 'data-value': v };
      if (v) attrs.class = 'hot';
      tr.appendChild(el('td', num(v), attrs));
    }
    for (const f of HELD) tr.appendChild(el('td', num(s[f]), { 'data-field': f, 'data-value': s[f] || 0 }));
    tr.appendChild(el('td', num(s.refunded), { 'data-field': 'refunded', 'data-value': s.refunded || 0 }));
    const held = (s.suppressed || 0) + (s.dropped || 0);
    tr.appendChild(el('td', rate(held, s.received), { 'data-field': 'rate', class: held ? 'rate hot' : 'rate' }));
    return tr;
  }

  // MUTED_PAGES bounds the suppression rows read to count muted messages:
  // beyond MUTED_PAGES pages of 1,000 the counts are shown as lower bounds.
  const MUTED_PAGES = 5;

  // mutedCounts counts, per scene, the suppressions of the range whose
  // recipient muted the scene (reason "preference").
  async function mutedCounts() {
    const counts = {};
    let cursor = '', total = 0;
    for (let i = 0; i < MUTED_PAGES; i++) {
      const page = await api('/v1/suppressions', { since: range.since, until: range.until, reason: 'preference', limit: 1000, cursor });
      for (const s of page.items) counts[s.scene] = (counts[s.scene] || 0) + 1;
      total += page.items.length;
      cursor = page.next_cursor;
      if (!cursor) break;
    }
    return { counts, total, more: !!cursor };
  }

  async function loadSummary() {
    const [data, muted] = await Promise.all([api('/v1/reports/summary', range), mutedCounts()]);
    const body = $('summary-body');
    const foot = $('summary-total');
    body.replaceChildren(...data.scenes.map((s) => summaryRow(s, 'th', muted.counts[s.scene] || 0, muted.more)));
    foot.replaceChildren(summaryRow(data.total, 'th', muted.total, muted.more));
    $('summary-empty').hidden = data.scenes.length > 0;
    hideZeroColumns();
    // The chart's scene list follows the scenes that have counts.
    const pick = $('chart-scene');
    const chosen = pick.value;
    pick.replaceChildren(el('option', 'all scenes', { value: '' }),
      ...data.scenes.filter((s) => s.scene).map((s) => el('option', s.scene, { value: s.scene })));
    pick.value = data.scenes.some((s) => s.scene === chosen) ? chosen : '';
  }

  // OPTIONAL are the columns of counters that stay zero on most gates;
  // each is shown only when a scene in the range has one, so the table
  // fits the page.
  const OPTIONAL = ['muted', 'shadow', 'unchecked', 'parked', ...HELD, 'refunded'];

  function hideZeroColumns() {
    const table = $('summary-table');
    const left = [];
    for (const f of OPTIONAL) {
      const cells = [...table.querySelectorAll('[data-field="' + f + '"]')];
      const show = cells.some((c) => c.dataset.value && c.dataset.value !== '0');
      for (const c of cells) c.hidden = !show;
      if (!show) left.push(table.querySelector('thead [data-field="' + f + '"]').textContent);
    }
    const note = $('summary-hidden');
    note.hidden = left.length === 0;
    note.textContent = left.length ? 'Not shown, zero for every scene in this range: ' + left.join(', ') + '.' : '';
  }

  async function loadChart() {
    const scene = $('chart-scene').value;
    const data = await api('/v1/reports/timeseries', { since: range.since, until: range.until, scene });
    drawChart(data.hours, scene);
  }

  // drawChart draws stacked bars per hour (per day beyond two weeks) from
  // the sparse hourly rows of the API, filling the hours without counts.
  function drawChart(rows, scene) {
    const box = $('chart-box');
    const end = range.until ? new Date(range.until).getTime() : Date.now();
    let start = range.since ? new Date(range.since).getTime()
      : (rows.length ? new Date(rows[0].hour).getTime() : end - 24 * HOUR);
    start = Math.floor(start / HOUR) * HOUR;
    const step = end - start > 14 * 24 * HOUR ? 24 * HOUR : HOUR;
    const buckets = [];
    for (let t = start; t < end; t += step) buckets.push(Object.fromEntries([['t', t], ...CHART.map((f) => [f, 0])]));
    for (const r of rows) {
      const i = Math.floor((new Date(r.hour).getTime() - start) / step);
      if (i < 0 || i >= buckets.length) continue;
      for (const f of CHART) buckets[i][f] += r[f] || 0;
    }
    const W = 960, H = 260, left = 52, right = 12, top = 12, bottom = 36;
    const svg = document.createElementNS(SVG, 'svg');
    svg.setAttribute('id', 'chart');
    svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
    svg.setAttribute('role', 'img');
    svg.dataset.scene = scene || '*';
    svg.dataset.step = step === HOUR ? 'hour' : 'day';
    const title = document.createElementNS(SVG, 'title');
    title.textContent = 'Messages per ' + svg.dataset.step + (scene ? ' of ' + scene : ', all scenes');
    svg.appendChild(title);
    const peak = Math.max(1, ...buckets.map((b) => b.received));
    const nice = niceCeil(peak);
    const plotH = H - top - bottom, plotW = W - left - right;
    const y = (v) => top + plotH - (v / nice) * plotH;
    for (let i = 0; i <= 4; i++) {
      const v = (nice / 4) * i;
      svg.appendChild(svgEl('line', { x1: left, x2: W - right, y1: y(v), y2: y(v), class: 'grid' }));
      const lbl = svgEl('text', { x: left - 6, y: y(v) + 4, class: 'axis', 'text-anchor': 'end' });
      lbl.textContent = num(Math.round(v));
      svg.appendChild(lbl);
    }
    const bw = plotW / Math.max(1, buckets.length);
    const labelEvery = Math.max(1, Math.ceil(buckets.length / 8));
    buckets.forEach((b, i) => {
      const g = svgEl('g', { class: 'bar' });
      g.dataset.hour = new Date(b.t).toISOString();
      for (const f of CHART) g.dataset[f] = b[f];
      const tip = document.createElementNS(SVG, 'title');
      tip.textContent = when(g.dataset.hour) + ': ' + CHART.filter((f) => f === 'received' || b[f])
        .map((f) => f + ' ' + num(b[f])).join(', ');
      g.appendChild(tip);
      let base = 0;
      for (const f of STACKED) {
        if (!b[f]) continue;
        g.appendChild(svgEl('rect', {
          x: left + i * bw + bw * 0.1, width: Math.max(0.5, bw * 0.8),
          y: y(base + b[f]), height: y(base) - y(base + b[f]), class: f,
        }));
        base += b[f];
      }
      svg.appendChild(g);
      if (i % labelEvery === 0) {
        const d = new Date(b.t);
        const lbl = svgEl('text', { x: left + i * bw + bw / 2, y: H - bottom + 16, class: 'axis', 'text-anchor': 'middle' });
        lbl.textContent = step === HOUR
          ? d.toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit' })
          : d.toLocaleDateString(undefined, { month: 'short', day: 'numeric' });
        svg.appendChild(lbl);
        if (step === HOUR && (i === 0 || d.getHours() < labelEvery)) {
          const day = svgEl('text', { x: left + i * bw + bw / 2, y: H - bottom + 30, class: 'axis day', 'text-anchor': 'middle' });
          day.textContent = d.toLocaleDateString(undefined, { month: 'short', day: 'numeric' });
          svg.appendChild(day);
        }
      }
    });
    svg.appendChild(svgEl('line', { x1: left, x2: W - right, y1: y(0), y2: y(0), class: 'baseline' }));
    box.replaceChildren(svg);
  }

  function svgEl(tag, attrs) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    return e;
  }

  // niceCeil rounds a chart's peak up to 1, 2 or 5 times a power of ten.
  function niceCeil(v) {
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 5, 10]) if (v <= m * p) return Math.max(4, m * p);
    return 10 * p;
  }

  async function loadTop() {
    const data = await api('/v1/reports/top-recipients', { since: range.since, until: range.until, limit: 10 });
    const rows = data.recipients.map((r) => {
      const tr = el('tr', null, { 'data-recipient': r.recipient });
      const cell = el('td', null, { class: 'text' });
      const b = el('button', r.recipient, { type: 'button', class: 'link', title: 'Why did they not get it?' });
      b.addEventListener('click', () => { $('lookup-recipient').value = r.recipient; guard(lookup)(r.recipient, ''); });
      cell.appendChild(b);
      tr.appendChild(cell);
      tr.appendChild(el('td', num(r.suppressed), { 'data-field': 'suppressed', 'data-value': r.suppressed }));
      tr.appendChild(el('td', num(r.shadow), { 'data-field': 'shadow', 'data-value': r.shadow }));
      tr.appendChild(timeCell(r.last_suppressed_at, relative(r.last_suppressed_at)));
      return tr;
    });
    $('top-body').replaceChildren(...rows);
    $('top-empty').hidden = rows.length > 0;
  }

  async function loadRules() {
    const st = await api('/v1/rules');
    $('rules-version').textContent = st.version;
    $('rules-version-badge').textContent = st.version;
    $('rules-loaded').textContent = when(st.loaded_at) + ' (' + relative(st.loaded_at) + ')';
    $('rules-loaded').dataset.time = st.loaded_at;
    $('rules-source').textContent = st.source;
    const rules = st.rules || { scenes: {} };
    $('rules-unknown').textContent = rules.unknown_scene || '';
    $('rules-caps').textContent = limitsText(rules.recipient_caps);
    const err = $('rules-error');
    err.hidden = !st.last_error;
    err.textContent = st.last_error ? 'Last rejected document (' + when(st.last_error_at) + '): ' + st.last_error : '';
    const names = Object.keys(rules.scenes || {}).sort();
    $('rules-body').replaceChildren(...names.map((name) => {
      const r = rules.scenes[name];
      const tr = el('tr', null, { 'data-scene': name });
      tr.appendChild(el('th', name, { class: 'text', scope: 'row' }));
      tr.appendChild(el('td', limitsText(r.limits), { class: 'text' }));
      tr.appendChild(el('td', overLimitText(r), { class: 'text', 'data-field': 'on_exceed' }));
      return tr;
    }));
  }

  // lookup lists one recipient's suppressions in the range, newest first;
  // a cursor appends the next page.
  async function lookup(recipient, cursor) {
    recipient = recipient.trim();
    if (!recipient) return;
    if (!cursor) await loadPreferences(recipient);
    const page = await api('/v1/suppressions', { recipient, since: range.since, until: range.until, limit: 50, cursor });
    const body = $('lookup-body');
    if (!cursor) body.replaceChildren();
    for (const s of page.items) {
      const tr = el('tr', null, { 'data-message-id': s.message_id });
      tr.appendChild(timeCell(s.decided_at));
      tr.appendChild(el('td', s.scene, { class: 'text', 'data-field': 'scene' }));
      tr.appendChild(el('td', limitText(s) + (s.shadow ? ' (shadow: forwarded anyway)' : ''),
        { class: s.reason === 'preference' ? 'text limit preference' : 'text limit', 'data-field': 'limit', 'data-reason': s.reason || '' }));
      tr.appendChild(el('td', num(s.count_seen), { 'data-field': 'count_seen', 'data-value': s.count_seen }));
      const reopens = s.next_allowed_at ? timeCell(s.next_allowed_at, relative(s.next_allowed_at)) : el('td', '—', { class: 'text' });
      reopens.dataset.field = 'next_allowed_at';
      tr.appendChild(reopens);
      tr.appendChild(el('td', s.rules_version, { class: 'text mono', 'data-field': 'rules_version' }));
      tr.appendChild(el('td', s.message_id, { class: 'text mono', 'data-field': 'message_id' }));
      const fate = el('td', outcome(s), { class: 'text', 'data-field': 'outcome' });
      if (s.held_as) {
        fate.className = s.settled ? 'text held settled' : 'text held';
        fate.dataset.heldAs = s.held_as;
        fate.dataset.settled = s.settled || '';
        if (s.settled_at) fate.dataset.time = s.settled_at;
        if (s.digest_id) fate.dataset.digestId = s.digest_id;
        if (s.fallback) fate.dataset.fallback = s.fallback;
      }
      tr.appendChild(fate);
      body.appendChild(tr);
    }
    lookupState = { recipient, cursor: page.next_cursor };
    const n = body.children.length;
    $('lookup-table').hidden = n === 0;
    $('lookup-more').hidden = !page.next_cursor;
    $('lookup-csv').disabled = n === 0;
    const summary = $('lookup-summary');
    summary.dataset.recipient = recipient;
    summary.dataset.count = n;
    if (n === 0) {
      summary.textContent = 'Nothing was held back for ' + recipient + ' in this range. ' +
        'If a message still did not arrive, it was forwarded (or never reached the gate).';
      return;
    }
    const newest = body.firstElementChild;
    const reopen = newest.querySelector('[data-field="next_allowed_at"]').dataset.time;
    summary.textContent = n + (page.next_cursor ? '+' : '') + ' message' + (n === 1 ? ' was' : 's were') +
      ' held back for ' + recipient + '.' + heldText(body) +
      (reopen ? ' The latest limit reopens ' + when(reopen) + ' (' + relative(reopen) + ').' : '');
  }

  // heldText counts, of the rows listed, the held messages by what became
  // of them: " Of them, 2 were released later, 3 sent in a digest, 1 is
  // still held." Empty when none was held.
  function heldText(body) {
    const held = [...body.querySelectorAll('[data-field="outcome"][data-held-as]')];
    if (!held.length) return '';
    const count = (settled) => held.filter((td) => td.dataset.settled === settled).length;
    const parts = [];
    const add = (n, one, many) => { if (n) parts.push(n + ' ' + (n === 1 ? one : many)); };
    add(count('released'), 'was released later', 'were released later');
    add(count('digested'), 'was sent in a digest', 'were sent in a digest');
    add(count('fell_back'), 'fell back (held too long)', 'fell back (held too long)');
    add(count(''), 'is still held', 'are still held');
    const other = held.length - parts.reduce((a, p) => a + parseInt(p, 10), 0);
    add(other, 'was settled otherwise', 'were settled otherwise');
    return ' Of them, ' + parts.join(', ') + '.';
  }

  // loadPreferences shows what the recipient asked of the gate: the scenes
  // they muted (until when), those they want in digests only. A 404 means
  // none; a gate that keeps no preferences answers 404 too.
  async function loadPreferences(recipient) {
    const box = $('lookup-prefs');
    const state = $('prefs-state');
    box.hidden = false;
    box.dataset.recipient = recipient;
    let p = null;
    try {
      p = await api('/v1/recipients/' + encodeURIComponent(recipient) + '/preferences');
    } catch (e) {
      if (!(e instanceof APIError) || e.status !== 404) throw e;
    }
    $('prefs-facts').hidden = !p;
    state.className = '';
    if (!p) {
      box.dataset.state = 'none';
      state.textContent = recipient + ' has set no preferences: every scene reaches them under the rules alone.';
      return;
    }
    const muted = p.muted_scenes || [];
    const until = p.muted_until || '';
    const ended = until && new Date(until).getTime() <= Date.now();
    const scenesText = muted.map((m) => m === '*' ? 'every scene' : m).join(', ');
    box.dataset.state = !muted.length ? 'unmuted' : (ended ? 'expired' : 'muted');
    box.dataset.mutedScenes = muted.join(',');
    if (!muted.length) {
      state.textContent = recipient + ' mutes no scene.';
    } else if (ended) {
      state.textContent = 'The mute of ' + scenesText + ' ended ' + when(until) + ' (' + relative(until) + ').';
    } else {
      state.className = 'muted-now';
      state.textContent = 'Muted now: ' + scenesText + (until ? ', until ' + when(until) + ' (' + relative(until) + ')' : ', until they change it') +
        '. Those messages are suppressed with limit "preference" unless their priority bypasses the scene.';
    }
    $('prefs-muted').textContent = scenesText || 'none';
    $('prefs-until').textContent = until ? when(until) : (muted.length ? 'until changed' : '—');
    $('prefs-until').dataset.time = until;
    $('prefs-digest').textContent = (p.digest_only || []).join(', ') || 'none';
    $('prefs-updated').textContent = p.updated_at ? when(p.updated_at) : '';
  }

  // loadRefunds lists the refunds of the range, newest first; a cursor
  // appends the next page. A gate without refunds answers 404.
  async function loadRefunds(cursor) {
    let page;
    try {
      page = await api('/v1/refunds', { since: range.since, until: range.until, limit: 50, cursor });
    } catch (e) {
      if (!(e instanceof APIError) || e.status !== 404) throw e;
      $('refunds-table').hidden = true;
      $('refunds-more').hidden = true;
      $('refunds-empty').hidden = false;
      $('refunds-empty').textContent = 'This gate keeps no refunds.';
      return;
    }
    const body = $('refunds-body');
    if (!cursor) body.replaceChildren();
    for (const r of page.items) {
      const tr = el('tr', null, { 'data-message-id': r.message_id });
      tr.appendChild(el('td', r.message_id, { class: 'text mono', 'data-field': 'message_id' }));
      tr.appendChild(el('td', r.scene, { class: 'text', 'data-field': 'scene' }));
      tr.appendChild(el('td', r.recipient, { class: 'text', 'data-field': 'recipient' }));
      const fwd = timeCell(r.forwarded_at);
      fwd.dataset.field = 'forwarded_at';
      tr.appendChild(fwd);
      const ref = timeCell(r.refunded_at, relative(r.refunded_at));
      ref.dataset.field = 'refunded_at';
      tr.appendChild(ref);
      tr.appendChild(el('td', r.source === 'nats' ? 'gate.refund' : (r.source === 'api' ? 'POST /v1/refund' : r.source),
        { class: 'text', 'data-field': 'source', 'data-value': r.source }));
      body.appendChild(tr);
    }
    refundsCursor = page.next_cursor;
    const n = body.children.length;
    $('refunds-table').hidden = n === 0;
    $('refunds-more').hidden = !page.next_cursor;
    $('refunds-empty').hidden = n > 0;
    $('refunds-empty').textContent = n ? '' : 'No refunds in this range.';
  }

  // PREVIEWED are the outcomes a preview compares, then and now.
  const PREVIEWED = ['forwarded', 'suppressed', 'dropped', 'deferred', 'digested'];

  // changeText says how a scene's outcomes move from then to now:
  // "forwarded −2, suppressed +2", or "no change".
  function changeText(p) {
    const parts = [];
    for (const f of PREVIEWED) {
      const d = (p.now[f] || 0) - (p.then[f] || 0);
      if (d) parts.push(f + ' ' + (d > 0 ? '+' : '−') + num(Math.abs(d)));
    }
    return parts.join(', ') || 'no change';
  }

  function previewRow(p, tag) {
    const changed = PREVIEWED.some((f) => (p.now[f] || 0) !== (p.then[f] || 0));
    const tr = el('tr', null, { 'data-scene': p.scene, 'data-changed': changed });
    if (changed) tr.className = 'changed';
    tr.appendChild(el(tag, p.scene === '*' || p.scene === undefined ? 'all scenes' : p.scene, { class: 'text', scope: 'row' }));
    for (const f of PREVIEWED) {
      const then = p.then[f] || 0, now = p.now[f] || 0;
      const attrs = { 'data-field': f, 'data-then': then, 'data-now': now };
      if (then !== now) attrs.class = 'changed';
      tr.appendChild(el('td', then === now ? num(then) : num(then) + ' → ' + num(now), attrs));
    }
    tr.appendChild(el('td', changeText(p), { class: 'text', 'data-field': 'change' }));
    return tr;
  }

  // runPreview sends the pasted document to the gate, which replays the
  // period's decisions against it. A document the gate refuses shows the
  // parser's words as they are.
  async function runPreview() {
    const doc = $('preview-doc').value;
    const since = $('preview-since').value;
    const err = $('preview-error');
    const sec = $('preview');
    sec.dataset.state = 'running';
    $('preview-run').disabled = true;
    try {
      const res = await api('/v1/rules/preview', { since }, { method: 'POST', body: doc, contentType: 'application/yaml' });
      err.hidden = true;
      err.textContent = '';
      $('preview-body').replaceChildren(...res.scenes.map((p) => previewRow(p, 'th')));
      $('preview-total').replaceChildren(previewRow({ ...res.total, scene: '*' }, 'th'));
      $('preview-table').hidden = false;
      const summary = $('preview-summary');
      summary.dataset.replayed = res.replayed;
      summary.dataset.decisions = res.decisions;
      summary.dataset.version = res.version;
      let text = 'Replayed ' + num(res.replayed) + ' of ' + num(res.decisions) + ' decisions from ' + when(res.since) +
        ' to ' + when(res.until) + ' against document ' + res.version + '.';
      if (res.not_replayable) text += ' ' + num(res.not_replayable) + ' were recorded before the ledger kept their scene and recipient, and are left out.';
      if (res.truncated) text += ' Stopped at the bound of ' + num(res.limit) + ' decisions: the counts cover up to ' + when(res.reached_at) + ' only.';
      summary.textContent = text;
      $('preview-notes').replaceChildren(...(res.notes || []).map((n) => el('li', n)));
      sec.dataset.state = 'done';
    } catch (e) {
      if (!(e instanceof APIError)) throw e;
      $('preview-table').hidden = true;
      $('preview-summary').textContent = '';
      $('preview-notes').replaceChildren();
      err.hidden = false;
      err.textContent = e.detail;
      sec.dataset.state = 'error';
    } finally {
      $('preview-run').disabled = false;
    }
  }

  async function downloadCSV() {
    const resp = await api('/v1/suppressions.csv', { recipient: lookupState.recipient, since: range.since, until: range.until }, { raw: true });
    const blob = await resp.blob();
    const a = el('a', null, { href: URL.createObjectURL(blob), download: 'suppressions.csv' });
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 10e3);
  }

  // --- wiring ----------------------------------------------------------------

  function status(text, isError) {
    const s = $('status');
    s.textContent = text;
    s.className = isError ? 'error' : 'muted';
  }

  // guard runs an async action and reports its failure on the page.
  function guard(fn) {
    return async (...args) => {
      try {
        await fn(...args);
      } catch (e) {
        if (!(e instanceof AuthError)) status(e.message, true);
      }
    };
  }

  async function refresh() {
    pickRange();
    document.body.dataset.loaded = 'false';
    status('Loading…');
    try {
      await Promise.all([loadRules(), loadSummary().then(loadChart), loadTop(), loadRefunds('')]);
      if (lookupState.recipient) await lookup(lookupState.recipient, '');
      status('Updated ' + new Date().toLocaleTimeString() + '.');
      document.body.dataset.loaded = 'true';
    } catch (e) {
      if (!(e instanceof AuthError)) status(e.message, true);
      else status('Waiting for the API token.');
    }
  }

  document.addEventListener('DOMContentLoaded', () => {
    $('range-form').addEventListener('submit', (ev) => { ev.preventDefault(); refresh(); });
    $('range').addEventListener('change', () => { if ($('range').value !== 'custom') refresh(); else pickRange(); });
    $('chart-scene').addEventListener('change', guard(loadChart));
    $('auth-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      token = $('token').value.trim();
      sessionStorage.setItem(TOKEN_KEY, token);
      $('token').value = '';
      $('auth').hidden = true;
      refresh();
    });
    $('lookup-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      guard(lookup)($('lookup-recipient').value, '');
    });
    $('lookup-more').addEventListener('click', guard(() => lookup(lookupState.recipient, lookupState.cursor)));
    $('lookup-csv').addEventListener('click', guard(downloadCSV));
    $('refunds-more').addEventListener('click', guard(() => loadRefunds(refundsCursor)));
    $('preview-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      guard(runPreview)();
    });
    refresh();
  });
})();
