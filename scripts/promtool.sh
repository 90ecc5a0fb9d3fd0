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
. "$(dirname "$0")/apt-install.sh"

# The first executable of GATE_TEST_PROMTOOL, PATH and Debian's location.
promtool_path() {
  local b
  for b in "${GATE_TEST_PROMTOOL:-}" "$(command -v promtool 2>/dev/null || true)" /usr/bin/promtool; do
    if [ -n "$b" ] && [ -x "$b" ]; then echo "$b"; return 0; fi
  done
  return 1
}

if ! bin=$(promtool_path); then
  # The package would start its own Prometheus server; the tests need only
  # promtool, so a policy-rc.d answering 101 keeps the service down.
  policy=/usr/sbin/policy-rc.d
  made_policy=
  if [ ! -e "$policy" ] && [ "$(id -u)" = 0 ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made_policy=1
    trap '[ -n "$made_policy" ] && rm -f "$policy"' EXIT
  fi
  apt_install promtool prometheus
  bin=$(promtool_path) || die "prometheus installed but promtool is not on PATH nor at /usr/bin/promtool"
fi
log "promtool ready: $bin ($("$bin" --version 2>&1 | head -n1 || echo 'version unknown'))"
echo "GATE_TEST_PROMTOOL=$bin"
