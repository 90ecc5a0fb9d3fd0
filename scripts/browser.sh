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
. "$(dirname "$0")/apt-install.sh"

find_chromium() {
  for b in "${GATE_TEST_CHROMIUM:-}" /usr/bin/chromium /usr/bin/chromium-browser; do
    [ -n "$b" ] && [ -x "$b" ] && { echo "$b"; return 0; }
  done
  return 1
}

if ! bin=$(find_chromium); then
  apt_install chromium chromium fonts-dejavu-core
  bin=$(find_chromium) || die "chromium installed but /usr/bin/chromium is not there"
fi
log "chromium ready: $bin ($("$bin" --version 2>/dev/null || echo 'version unknown'))"
echo "GATE_TEST_CHROMIUM=$bin"
echo "GATE_TEST_ARTIFACTS=$ARTIFACTS"
