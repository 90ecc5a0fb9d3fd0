#!/usr/bin/env bash
# Makes sure promtool is installed for the alert rules' test (Debian's
# prometheus package ships it; installed with apt when promtool is missing).
# Idempotent. Prints GATE_TEST_PROMTOOL=path on stdout; logs go to stderr.
# Fails with a message naming what is missing and why.
set -euo pipefail

STATE_DIR=${GATE_TEST_STATE_DIR:-/tmp/gate-test-services}
mkdir -p "$STATE_DIR"
log() { printf 'promtool: %s\n' "$*" >&2; }
die() { printf 'promtool: FAILED: %s\n' "$*" >&2; exit 1; }

find_promtool() {
  for b in "${GATE_TEST_PROMTOOL:-}" "$(command -v promtool 2>/dev/null || true)" /usr/bin/promtool; do
    [ -n "$b" ] && [ -x "$b" ] && { echo "$b"; return 0; }
  done
  return 1
}

if ! bin=$(find_promtool); then
  command -v apt-get >/dev/null || die "promtool is missing and apt-get is not available to install it"
  [ "$(id -u)" = 0 ] || die "promtool is missing; installing it needs root (run: sudo apt-get install prometheus)"
  log "apt-get update"
  DEBIAN_FRONTEND=noninteractive apt-get update -q >"$STATE_DIR/apt-update-prometheus.log" 2>&1 ||
    die "apt-get update failed, see $STATE_DIR/apt-update-prometheus.log"
  log "apt-get install prometheus (once, for promtool)"
  # policy-rc.d 101: the package's own Prometheus server is not started; the
  # tests need only its promtool.
  policy=/usr/sbin/policy-rc.d
  made_policy=
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made_policy=1
  fi
  rc=0
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus \
    >"$STATE_DIR/apt-install-prometheus.log" 2>&1 || rc=$?
  [ -n "$made_policy" ] && rm -f "$policy"
  [ "$rc" = 0 ] || die "apt-get install prometheus failed, see $STATE_DIR/apt-install-prometheus.log"
  bin=$(find_promtool) || die "prometheus installed but promtool is not on PATH nor at /usr/bin/promtool"
fi
log "promtool ready: $bin ($("$bin" --version 2>&1 | head -n1 || echo 'version unknown'))"
echo "GATE_TEST_PROMTOOL=$bin"
