#!/usr/bin/env bash
# Makes sure a Redis Cluster of three masters answers on loopback for the
# tests: 127.0.0.1:7000-7002 (GATE_TEST_REDIS_CLUSTER_PORT moves the base),
# Debian's redis-server with cluster-enabled yes, joined by
# `redis-cli --cluster create --cluster-replicas 0`. Idempotent: a cluster
# that already answers with cluster_state:ok is left alone. redis-server and
# redis-cli come from scripts/services.sh, which make test runs first.
# Prints GATE_TEST_REDIS_CLUSTER_URL (quoted: it holds & and ?) on stdout, for
# sourcing; logs go to stderr.
set -euo pipefail

BASE=${GATE_TEST_REDIS_CLUSTER_PORT:-7000}
PORTS=("$BASE" "$((BASE + 1))" "$((BASE + 2))")
STATE_DIR=${GATE_TEST_STATE_DIR:-/tmp/gate-test-services}/redis-cluster-$BASE
log() { printf 'redis-cluster: %s\n' "$*" >&2; }
die() { printf 'redis-cluster: FAILED: %s\n' "$*" >&2; exit 1; }

command -v redis-server >/dev/null && command -v redis-cli >/dev/null ||
  die "redis-server and redis-cli are needed (bash scripts/services.sh installs them)"

ping() { redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null | grep -q PONG; }
cluster_ok() { redis-cli -h 127.0.0.1 -p "$BASE" cluster info 2>/dev/null | grep -q '^cluster_state:ok'; }

url="redis://127.0.0.1:${PORTS[0]}?addr=127.0.0.1:${PORTS[1]}&addr=127.0.0.1:${PORTS[2]}"
if cluster_ok; then
  log "a cluster already answers on 127.0.0.1:${PORTS[0]}-${PORTS[2]}"
  echo "GATE_TEST_REDIS_CLUSTER_URL='$url'"
  exit 0
fi

for port in "${PORTS[@]}"; do
  if ping "$port"; then
    # Up but not (yet) a working cluster: a leftover of an interrupted run.
    # Only our own nodes (their pid file is in STATE_DIR) are restarted.
    pidfile="$STATE_DIR/$port/redis.pid"
    [ -f "$pidfile" ] || die "127.0.0.1:$port answers but is not a node this script started; set GATE_TEST_REDIS_CLUSTER_PORT"
    log "stopping our stale node on $port"
    redis-cli -h 127.0.0.1 -p "$port" shutdown nosave >/dev/null 2>&1 || true
    for _ in $(seq 40); do ping "$port" || break; sleep 0.25; done
  fi
done

rm -rf "$STATE_DIR"
for port in "${PORTS[@]}"; do
  dir="$STATE_DIR/$port"
  mkdir -p "$dir"
  log "starting cluster node on 127.0.0.1:$port"
  redis-server --bind 127.0.0.1 --port "$port" --daemonize yes --dir "$dir" \
    --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 5000 \
    --save '' --appendonly no --logfile "$dir/redis.log" --pidfile "$dir/redis.pid" ||
    die "redis-server on $port did not start, see $dir/redis.log"
done
for port in "${PORTS[@]}"; do
  for _ in $(seq 40); do ping "$port" && break; sleep 0.25; done
  ping "$port" || die "cluster node on $port does not answer PING, see $STATE_DIR/$port/redis.log"
done

log "creating the cluster (3 masters, no replicas)"
redis-cli --cluster create "127.0.0.1:${PORTS[0]}" "127.0.0.1:${PORTS[1]}" "127.0.0.1:${PORTS[2]}" \
  --cluster-replicas 0 --cluster-yes >"$STATE_DIR/create.log" 2>&1 ||
  die "redis-cli --cluster create failed, see $STATE_DIR/create.log"
for _ in $(seq 60); do cluster_ok && break; sleep 0.25; done
cluster_ok || die "the cluster did not reach cluster_state:ok, see $STATE_DIR/create.log"
log "cluster ready on 127.0.0.1:${PORTS[0]}-${PORTS[2]}"
echo "GATE_TEST_REDIS_CLUSTER_URL='$url'"
