#!/usr/bin/env bash
# Makes sure a headless Chromium is installed for the report page's browser
# test (Debian's chromium package, with apt, when /usr/bin/chromium is
# missing). Idempotent. Prints GATE_TEST_CHROMIUM=path and
# GATE_TEST_ARTIFACTS=folder on stdout; logs go to stderr. Fails with a
# message naming what is missing and why.
set -euo pipefail

STATE_DIR=${GATE_TEST_STATE_DIR:-/tmp/gate-test-services}
ARTIFACTS=${GATE_TEST_ARTIFACTS:-$(cd "$(dirname "$0")/.." && pwd)/testdata/artifacts}
mkdir -p "$STATE_DIR" "$ARTIFACTS"
log() { printf 'browser: %s\n' "$*" >&2; }
die() { printf 'browser: FAILED: %s\n' "$*" >&2; exit 1; }

find_chromium() {
  for b in "${GATE_TEST_CHROMIUM:-}" /usr/bin/chromium /usr/bin/chromium-browser; do
    [ -n "$b" ] && [ -x "$b" ] && { echo "$b"; return 0; }
  done
  return 1
}

if ! bin=$(find_chromium); then
  command -v apt-get >/dev/null || die "chromium is missing and apt-get is not available to install it"
  [ "$(id -u)" = 0 ] || die "chromium is missing; installing it needs root (run: sudo apt-get install chromium)"
  log "apt-get update"
  DEBIAN_FRONTEND=noninteractive apt-get update -q >"$STATE_DIR/apt-update-chromium.log" 2>&1 ||
    die "apt-get update failed, see $STATE_DIR/apt-update-chromium.log"
  log "apt-get install chromium (once; a few minutes)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core \
    >"$STATE_DIR/apt-install-chromium.log" 2>&1 ||
    die "apt-get install chromium failed, see $STATE_DIR/apt-install-chromium.log"
  bin=$(find_chromium) || die "chromium installed but /usr/bin/chromium is not there"
fi
log "chromium ready: $bin ($("$bin" --version 2>/dev/null || echo 'version unknown'))"
echo "GATE_TEST_CHROMIUM=$bin"
echo "GATE_TEST_ARTIFACTS=$ARTIFACTS"
