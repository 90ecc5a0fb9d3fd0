// Package rules turns rule documents (YAML, from files or from Nacos) into
// validated gate.RuleSets, and keeps the set in force for the rest of the
// gate to read.
//
// A rule document is edited by hand and reaches every gate process at once,
// so a typo must be caught with its file, line and reason, and must never be
// half-applied. Parse and Merge therefore decode into yaml.Node and walk the
// tree themselves: every problem is reported (up to a bound) as
// "file:line:col: path: reason", and a document with any problem is rejected
// as a whole. Live holds the last good set; a rejected document is logged and
// counted, and the gate keeps deciding with what it had.
//
// Where the contract (CONTRACT.md, section 3) is silent, this package decides:
//
//   - on_exceed defaults to suppress, unknown_scene to forward.
//   - A document must hold rules: an empty, whitespace-only or comment-only
//     document is rejected (ErrNoRules), because Nacos hands out empty content
//     when a config is deleted and that must not wipe the rules in force. For
//     the same reason the merged document must have a "scenes" key; write
//     "scenes: {}" to run with no scene rules on purpose.
//   - A file holds one YAML document. Empty documents (a lone "---") are
//     ignored; a second non-empty one is rejected rather than merged, so one
//     file never quietly carries two rule sets.
//   - Anchors are harmless and allowed; aliases (*name), merge keys (<<) and
//     custom tags are rejected: they hide what a scene really says and, for
//     aliases, let a small document expand into a large one.
//   - Windows run from 1ms to 366d; max is a whole number from 1 to 1000000;
//     two limits of one scene (or of recipient_caps) may not share a window.
//   - A limit counts in a rolling window or a calendar period (day or ISO
//     week), never both; two calendar limits may not share a period.
//     Calendar periods run in the scene's tz (UTC when left out), or the
//     message's own zone; recipient_caps have no tz of their own and use the
//     message's zone or UTC.
//   - A rate limit, {rate: N/duration, burst: B}, is a GCRA: B at once,
//     then one per duration/N, the emission interval, which must be a whole
//     number of milliseconds (3/1s is refused, not rounded) and at most
//     366d, as must burst × interval. burst defaults to 1; a rate limit
//     takes burst, not max, and no window or calendar. A scene and
//     recipient_caps may have one rate limit each (a store keeps one
//     theoretical arrival time per window); rates that name one interval
//     (6/1h, 1/10m) are one rule, written back as 1/10m, and come after the
//     window and calendar limits.
//   - max_defer and defer_fallback are filled in (24h, suppress) on a scene
//     that defers (on_exceed: defer, or quiet_hours action: defer), and
//     rejected on any other, as digest_group is on a scene that sends no
//     digest: a key that nothing reads is a mistake to report, not ignore.
//   - An unknown tz makes the document invalid: counting in UTC instead
//     would be silently wrong all day.
//   - The version is a content hash of the normalized rules, so equal rules
//     have equal versions whatever their formatting, file split or source.
//
// It may import the standard library, gopkg.in/yaml.v3, internal/gate and
// internal/metrics, and nothing else (internal/archtest checks).
package rules
