#!/usr/bin/env bash
# Makes sure schemathesis (PyPI) is installed, in a virtual environment under
# the tools cache, for the OpenAPI conformance test. Idempotent: an install of
# the pinned version is reused. Prints GATE_TEST_SCHEMATHESIS=path on stdout;
# logs go to stderr. Fails with a message naming what is missing and why.
set -euo pipefail

SCHEMATHESIS_VERSION=${SCHEMATHESIS_VERSION:-4.32.5}
TOOLS_DIR=${GATE_TOOLS_DIR:-$HOME/.cache/gate-tools}
VENV=$TOOLS_DIR/schemathesis-$SCHEMATHESIS_VERSION
STATE_DIR=${GATE_TEST_STATE_DIR:-/tmp/gate-test-services}
mkdir -p "$STATE_DIR" "$TOOLS_DIR"
log() { printf 'schemathesis: %s\n' "$*" >&2; }
die() { printf 'schemathesis: FAILED: %s\n' "$*" >&2; exit 1; }

bin=$VENV/bin/schemathesis
if ! [ -x "$bin" ] || ! "$bin" --version 2>/dev/null | grep -q "$SCHEMATHESIS_VERSION"; then
  py=$(command -v python3 2>/dev/null) || die "python3 is missing (apt-get install python3 python3-venv)"
  "$py" -c 'import sys; sys.exit(sys.version_info < (3, 9))' || die "schemathesis $SCHEMATHESIS_VERSION needs Python 3.9 or later, $py is older"
  rm -rf "$VENV"
  log "creating $VENV and installing schemathesis==$SCHEMATHESIS_VERSION (once), log: $STATE_DIR/schemathesis-install.log"
  "$py" -m venv "$VENV" >"$STATE_DIR/schemathesis-install.log" 2>&1 ||
    die "python3 -m venv failed (apt-get install python3-venv), see $STATE_DIR/schemathesis-install.log"
  "$VENV/bin/pip" install -q "schemathesis==$SCHEMATHESIS_VERSION" >>"$STATE_DIR/schemathesis-install.log" 2>&1 ||
    die "pip install schemathesis==$SCHEMATHESIS_VERSION failed, see $STATE_DIR/schemathesis-install.log"
  [ -x "$bin" ] || die "pip installed schemathesis but $bin is missing"
fi
log "ready: $bin ($("$bin" --version))"
echo "GATE_TEST_SCHEMATHESIS=$bin"
