# The notification anti-fatigue gate.
#   make run    the gate on its embedded defaults: nothing to install
#   make test   starts the real services the tests need, then runs every test
#   make bench  throughput against the machine's ceilings, and Go benchmarks
#   make bench-check  latency and CPU of the check API, beside envoy ratelimit
#   make soak   the gate for 30 minutes at 1,000 requests/s: does anything grow?
#   make bench-scale  gate CPU per message with 1, 2 and 3 gates on a NATS cluster
#   make lint   go vet + staticcheck

GO        ?= go
BIN       := bin/gate
PKGS      := ./...
# go test -race needs cgo; the gate binary itself is built without it.
TESTFLAGS ?= -race -count=1 -timeout 20m

.PHONY: all build run test test-unit services bench bench-check bench-scale soak bench-nacos lint fuzz clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -o $(BIN) ./cmd/gate

run: build
	./$(BIN) serve

# with_services starts (installing when missing) the services named by the
# scripts in $(1), each of which prints KEY=VALUE lines, and exports what they
# print to the rest of the recipe line. Every target that needs real services
# begins its recipe with @$(call with_services,SCRIPTS) and a ; and backslash.
with_services = set -e; env_file=$$(mktemp); trap 'rm -f $$env_file' EXIT; \
	for script in $(1); do bash scripts/$$script >> $$env_file; done; \
	set -a; . $$env_file; set +a

# fuzz_runs runs each fuzzer for a fixed count of inputs (about 15 s each on a
# quiet machine): a count, not a duration, because a -fuzztime duration races
# Go's fuzz coordinator before Go 1.27 (golang/go#75804) and fails a loaded run
# with "context deadline exceeded". FuzzCommitParsed commits to PostgreSQL too,
# so it runs after with_services. make test calls make fuzz.
fuzz_runs = \
	$(GO) test -run '^$$' -fuzz '^FuzzParseMessage$$' -fuzztime 150000x ./internal/gate; \
	$(GO) test -run '^$$' -fuzz '^FuzzParseDelivery$$' -fuzztime 300000x ./internal/gate; \
	$(GO) test -run '^$$' -fuzz '^FuzzEnvelopeMatchesJSON$$' -fuzztime 300000x ./internal/gate; \
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime 100000x ./internal/rules; \
	$(GO) test -run '^$$' -fuzz '^FuzzCommitParsed$$' -fuzztime 1000x -fuzzminimizetime 1s ./internal/gormstore

# Start (installing when missing) Redis and PostgreSQL on loopback, then run
# every test against them. GATE_TEST_REQUIRE_SERVICES=1 turns any test that
# would skip for a missing service into a failure.
test:
	@$(call with_services,services.sh redis-cluster.sh nacos.sh browser.sh schemathesis.sh promtool.sh); \
	export GATE_TEST_REQUIRE_SERVICES=1; \
	echo "make test: services ready; running go test $(TESTFLAGS) $(PKGS)"; \
	$(GO) vet $(PKGS); \
	$(GO) test $(TESTFLAGS) $(PKGS)
	@$(MAKE) --no-print-directory fuzz
	@$(call with_services,services.sh nacos.sh); \
	export GATE_TEST_REQUIRE_SERVICES=1; \
	echo "make test: Nacos tests without -race (nacos-sdk-go races internally; see cmd/gate/nacos_test.go)"; \
	$(GO) test -count=1 -timeout 10m -run 'Nacos' ./cmd/gate

# Only the fuzzers of make test, on the services FuzzCommitParsed needs.
fuzz:
	@$(call with_services,services.sh); \
	export GATE_TEST_REQUIRE_SERVICES=1; \
	$(fuzz_runs)

# Only the tests that need no service (integration tests skip).
test-unit:
	$(GO) test -count=1 $(PKGS)

services:
	bash scripts/services.sh

# The gate against this machine's ceilings and the seed design, on real
# services, in one run (bench/gatebench; docs/benchmarks.md): 3 runs of 200,000
# messages and their medians, after the Go benchmarks of the hot functions.
# GATE_BENCH_N=20000 GATE_BENCH_RUNS=1 make bench is a quick run. nats-server
# is built from go.mod's version and runs as a process of its own.
BENCH_PKGS := ./internal/gate ./internal/redisstore ./internal/gormstore ./internal/pipeline
bench: build
	@$(call with_services,services.sh); \
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/nats-server github.com/nats-io/nats-server/v2; \
	$(GO) test -run '^$$' -bench . -benchmem -count 3 $(BENCH_PKGS); \
	$(GO) run ./bench/gatebench -gate-bin $(BIN) -nats-bin bin/nats-server

# Latency of the check API (POST /v1/check and gate.check) on Redis and
# PostgreSQL, at 1,000 checks/s and at the highest rate the gate sustains,
# beside envoyproxy/ratelimit on the same Redis, built from its own module
# in bench/envoyrl so that the gate's go.mod does not take its dependencies
# (docs/benchmarks.md, "The check API"). GATE_BENCH_RUNS rounds (3), the
# sides in turn; about three minutes a round.
bench-check: build
	@$(call with_services,services.sh); \
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/nats-server github.com/nats-io/nats-server/v2; \
	(cd bench/envoyrl && CGO_ENABLED=0 $(GO) build -trimpath -o ../../bin/envoy-ratelimit github.com/envoyproxy/ratelimit/src/service_cmd); \
	$(GO) run ./bench/gatebench -check -gate-bin $(BIN) -nats-bin bin/nats-server -envoy-bin bin/envoy-ratelimit

# The soak (docs/benchmarks.md, "The soak"): the gate on nats-server, a
# redis-server of its own and PostgreSQL for GATE_SOAK_DURATION (30m) at
# GATE_SOAK_RATE (1000) requests/s, 30 % deferred, digests, 10 % checks,
# 10-minute partitions dropped during the run; a table per minute, then a
# verdict (exit 1 when it fails). GATE_SOAK_DURATION=6m is a smoke run.
soak: build
	@$(call with_services,services.sh); \
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/nats-server github.com/nats-io/nats-server/v2; \
	$(GO) run ./bench/gatebench -soak -gate-bin $(BIN) -nats-bin bin/nats-server

# Gate CPU per message with 1, 2 and 3 gates on one consumer, against a
# three-node JetStream cluster and the Redis Cluster (docs/scaling.md).
# GATE_MAX_ACK_PENDING is passed to the gates.
bench-scale: build
	@$(call with_services,services.sh redis-cluster.sh); \
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/nats-server github.com/nats-io/nats-server/v2; \
	$(GO) run ./bench/gatebench -scale -n 60000 -gate-bin $(BIN) -nats-bin bin/nats-server

lint:
	$(GO) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 $(PKGS)

clean:
	rm -rf bin data

# Delay from a Nacos publish to the new rules being in force (median, p99).
bench-nacos:
	@$(call with_services,services.sh nacos.sh); \
	$(GO) test -run '^$$' -bench NacosReload -benchtime 100x -count 3 ./cmd/gate
