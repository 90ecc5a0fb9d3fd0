#!/usr/bin/env bash
# Makes sure the real services the tests need are reachable on loopback:
# Redis and PostgreSQL (installed with apt when missing, then started), and
# faketime for the tests that run a redis-server of their own at a fake instant.
# Idempotent: a service that already answers is left alone.
# Prints the environment for the tests on stdout as KEY=VALUE lines; logs go
# to stderr. Fails with a message naming the service and the reason.
set -euo pipefail

REDIS_PORT=${GATE_TEST_REDIS_PORT:-6379}
PG_PORT=${GATE_TEST_PG_PORT:-5432}
PG_DB=gate_test
PG_USER=gate_test
# A throwaway credential for a loopback-only test database; never used in production.
PG_PASSWORD=${GATE_TEST_PG_PASSWORD:-gate_test}
STATE_DIR=${GATE_TEST_STATE_DIR:-/tmp/gate-test-services}
mkdir -p "$STATE_DIR"

log() { printf 'services: %s\n' "$*" >&2; }
die() { printf 'services: FAILED: %s\n' "$*" >&2; exit 1; }

apt_updated=0
apt_install() {
  command -v apt-get >/dev/null || die "$1 is missing and apt-get is not available to install it"
  [ "$(id -u)" = 0 ] || die "$1 is missing; installing it needs root (run: sudo apt-get install $*)"
  if [ $apt_updated = 0 ]; then
    log "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -q >"$STATE_DIR/apt-update.log" 2>&1 ||
      die "apt-get update failed, see $STATE_DIR/apt-update.log"
    apt_updated=1
  fi
  log "apt-get install $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >"$STATE_DIR/apt-install.log" 2>&1 ||
    die "apt-get install $* failed, see $STATE_DIR/apt-install.log"
}

wait_for() { # name, tries, command...
  local name=$1 tries=$2; shift 2
  for _ in $(seq "$tries"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.5; done
  return 1
}

# --- Redis -------------------------------------------------------------------
redis_up() { redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG; }
if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
  apt_install redis-server redis-tools
fi
# faketime (libfaketime) starts a test's own redis-server at a chosen instant:
# the DST tests (cmd/gate/dst_e2e_test.go) need Redis's TIME on a DST day.
if ! command -v faketime >/dev/null; then
  apt_install faketime
fi
if ! redis_up; then
  log "starting redis-server on 127.0.0.1:$REDIS_PORT"
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --daemonize yes \
    --dir "$STATE_DIR" --dbfilename "redis-$REDIS_PORT.rdb" --save '' --appendonly no \
    --logfile "$STATE_DIR/redis-$REDIS_PORT.log" --pidfile "$STATE_DIR/redis-$REDIS_PORT.pid" ||
    die "redis-server did not start, see $STATE_DIR/redis-$REDIS_PORT.log"
  wait_for redis 40 redis_up || die "redis-server started but does not answer PING on 127.0.0.1:$REDIS_PORT, see $STATE_DIR/redis-$REDIS_PORT.log"
fi
log "redis ready on 127.0.0.1:$REDIS_PORT ($(redis-server --version | awk '{print $3}'))"

# --- PostgreSQL ----------------------------------------------------------------
pg_up() { pg_isready -q -h 127.0.0.1 -p "$PG_PORT"; }
if ! command -v pg_isready >/dev/null || ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
  if ! pg_up 2>/dev/null; then apt_install postgresql postgresql-client; fi
fi
if ! pg_up; then
  command -v pg_lsclusters >/dev/null || die "postgresql: pg_lsclusters missing (install postgresql-common)"
  cluster=$(pg_lsclusters -h | awk -v p="$PG_PORT" '$3==p {print $1" "$2; exit}')
  if [ -z "$cluster" ]; then
    ver=$(ls /usr/lib/postgresql | sort -V | tail -1)
    log "creating PostgreSQL $ver cluster 'gate' on port $PG_PORT"
    pg_createcluster "$ver" gate -p "$PG_PORT" >"$STATE_DIR/pg-create.log" 2>&1 ||
      die "postgresql: pg_createcluster failed, see $STATE_DIR/pg-create.log"
    cluster="$ver gate"
  fi
  log "starting PostgreSQL cluster $cluster"
  # shellcheck disable=SC2086
  pg_ctlcluster $cluster start >"$STATE_DIR/pg-start.log" 2>&1 ||
    die "postgresql: cluster $cluster did not start, see $STATE_DIR/pg-start.log and /var/log/postgresql/"
  wait_for postgres 60 pg_up || die "postgresql started but does not accept connections on 127.0.0.1:$PG_PORT"
fi
psql_admin() { su postgres -c "psql -p $PG_PORT -v ON_ERROR_STOP=1 -qAt $*"; }
if [ "$(id -u)" = 0 ] && id postgres >/dev/null 2>&1; then
  if [ "$(psql_admin "-c \"SELECT 1 FROM pg_roles WHERE rolname='$PG_USER'\"")" != 1 ]; then
    log "creating role $PG_USER"
    psql_admin "-c \"CREATE ROLE $PG_USER LOGIN CREATEDB PASSWORD '$PG_PASSWORD'\"" >/dev/null ||
      die "postgresql: could not create role $PG_USER"
  fi
  if [ "$(psql_admin "-c \"SELECT 1 FROM pg_database WHERE datname='$PG_DB'\"")" != 1 ]; then
    log "creating database $PG_DB"
    psql_admin "-c \"CREATE DATABASE $PG_DB OWNER $PG_USER\"" >/dev/null ||
      die "postgresql: could not create database $PG_DB"
  fi
fi
PG_URL="postgres://$PG_USER:$PG_PASSWORD@127.0.0.1:$PG_PORT/$PG_DB?sslmode=disable"
PGPASSWORD=$PG_PASSWORD psql "$PG_URL" -qAt -c 'select 1' >/dev/null 2>&1 ||
  die "postgresql: cannot log in as $PG_USER to $PG_DB on 127.0.0.1:$PG_PORT (check pg_hba.conf allows md5/scram on loopback)"
log "postgres ready on 127.0.0.1:$PG_PORT"

echo "GATE_TEST_REDIS_URL=redis://127.0.0.1:$REDIS_PORT/0"
echo "GATE_TEST_DATABASE_URL=$PG_URL"
