#!/usr/bin/env bash
# Makes sure a real Nacos server answers on loopback for the tests. When none
# is reachable it starts r-nacos (nacos-group's Rust Nacos server, which
# speaks the 2.x gRPC config protocol nacos-sdk-go uses and the v1 HTTP
# config API), building it once with cargo from crates.io and reusing the
# binary afterwards. The official server is not on Maven Central and no
# Docker engine runs here; users run the official image (docker-compose.yml).
# Prints GATE_TEST_NACOS_ADDR=host:port on stdout; logs go to stderr.
set -euo pipefail

PORT=${GATE_TEST_NACOS_PORT:-8848}
RNACOS_VERSION=${RNACOS_VERSION:-0.8.8}
STATE_DIR=${GATE_TEST_STATE_DIR:-/tmp/gate-test-services}
# Built tools are kept out of /tmp so they survive for the next run.
TOOLS_DIR=${GATE_TOOLS_DIR:-$HOME/.cache/gate-tools}
mkdir -p "$STATE_DIR"
log() { printf 'nacos: %s\n' "$*" >&2; }
die() { printf 'nacos: FAILED: %s\n' "$*" >&2; exit 1; }

ready() { curl -fs -o /dev/null -m 2 "http://127.0.0.1:$PORT/nacos/v1/console/health/readiness"; }

command -v curl >/dev/null || die "curl is needed to probe Nacos (apt-get install curl)"

find_bin() {
  for b in "${RNACOS_BIN:-}" "$(command -v rnacos 2>/dev/null || true)" "$HOME/.cargo/bin/rnacos" "$TOOLS_DIR/bin/rnacos"; do
    [ -n "$b" ] && [ -x "$b" ] && { echo "$b"; return 0; }
  done
  return 1
}

# Concurrent runs (several test suites on one machine) build once: the
# others wait for the lock, then find the binary.
mkdir -p "$TOOLS_DIR"
exec 9>"$TOOLS_DIR/.rnacos-build.lock"
flock 9
if ! bin=$(find_bin); then
  cargo=$(command -v cargo 2>/dev/null || echo "$HOME/.cargo/bin/cargo")
  [ -x "$cargo" ] || die "no rnacos binary and no cargo to build it (install Rust with rustup, or set RNACOS_BIN)"
  log "building r-nacos $RNACOS_VERSION with cargo (once; takes several minutes on 2 cores), log: $STATE_DIR/rnacos-build.log"
  "$cargo" install rnacos --version "$RNACOS_VERSION" --locked --root "$TOOLS_DIR" >"$STATE_DIR/rnacos-build.log" 2>&1 ||
    die "cargo install rnacos failed, see $STATE_DIR/rnacos-build.log"
  bin="$TOOLS_DIR/bin/rnacos"
fi
flock -u 9

# The tests also start r-nacos servers of their own (to stop and restart
# them), so the binary is needed even when a server already answers.
echo "GATE_TEST_RNACOS_BIN=$bin"
run_dir="$STATE_DIR/rnacos-run-$PORT"

launch() {
  rm -rf "$run_dir"
  mkdir -p "$run_dir/data" # an empty working directory: r-nacos reads .env from it
  (
    cd "$run_dir"
    RNACOS_HTTP_PORT=$PORT RNACOS_GRPC_PORT=$((PORT + 1000)) RNACOS_HTTP_CONSOLE_PORT=0 \
    RNACOS_SDK_HOST=127.0.0.1 RNACOS_CONSOLE_HOST=127.0.0.1 \
    RNACOS_RAFT_NODE_ADDR=127.0.0.1:$((PORT + 1000)) RNACOS_DATA_DIR="$run_dir/data" \
    RNACOS_ENABLE_OPEN_API_AUTH=false RUST_LOG=warn \
      nohup "$bin" >"$run_dir/rnacos.log" 2>&1 &
    echo $! >"$run_dir/rnacos.pid"
  )
}

# r-nacos 0.8.8 at times panics in its raft apply thread at start; it then
# answers but never stores a config. A canary config tells, and it is
# started again with a fresh data folder.
canary() {
  local want
  want="canary-$(date +%s%N)"
  curl -fs -o /dev/null -m 2 -X POST "http://127.0.0.1:$PORT/nacos/v1/cs/configs" \
    --data-urlencode dataId=gate-canary --data-urlencode group=GATE --data-urlencode content="$want" || return 1
  for _ in $(seq 60); do
    [ "$(curl -fs -m 2 "http://127.0.0.1:$PORT/nacos/v1/cs/configs?dataId=gate-canary&group=GATE")" = "$want" ] && return 0
    grep -qs panicked "$run_dir/rnacos.log" && return 1
    sleep 0.05
  done
  return 1
}

if ready; then
  if canary; then
    log "a Nacos server already answers on 127.0.0.1:$PORT"
    echo "GATE_TEST_NACOS_ADDR=127.0.0.1:$PORT"
    exit 0
  fi
  [ -f "$run_dir/rnacos.pid" ] || die "the Nacos server on 127.0.0.1:$PORT answers but does not store configs; stop it or set GATE_TEST_NACOS_PORT"
  log "our r-nacos on 127.0.0.1:$PORT does not store configs; starting it again"
  kill "$(cat "$run_dir/rnacos.pid")" 2>/dev/null || true
  sleep 1
fi

for attempt in $(seq 8); do
  log "starting $bin on 127.0.0.1:$PORT (gRPC $((PORT + 1000))), attempt $attempt"
  launch
  for _ in $(seq 120); do
    ready && break
    sleep 0.5
  done
  if ready && canary; then
    log "nacos ready on 127.0.0.1:$PORT"
    echo "GATE_TEST_NACOS_ADDR=127.0.0.1:$PORT"
    exit 0
  fi
  kill "$(cat "$run_dir/rnacos.pid")" 2>/dev/null || true
  sleep 0.5
done
die "r-nacos did not start and store configs on 127.0.0.1:$PORT after 8 attempts, see $run_dir/rnacos.log"
