# Cicada. `make help` lists the targets.

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# Root runs apt-get directly; others use sudo when they have it.
SUDO := $(if $(filter 0,$(shell id -u)),,$(shell command -v sudo 2>/dev/null))
APT_INSTALL := $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q

.PHONY: help build image run test conformance conformance-run test-matrix servers servers-next test-cluster deps bench-deps bench fmt clean
.DEFAULT_GOAL := build

help:
	@echo "make build   build bin/cicada (VERSION=$(VERSION))"
	@echo "make image   docker build the container image cicada:$(VERSION) (needs a Docker engine)"
	@echo "make run     run Cicada before a local Redis (UPSTREAM=host:port, ARGS='--flags')"
	@echo "make test    go vet, go test -race against Redis 7.0, and the e2e, conformance and linearizability suites against Redis 8.0 and Valkey 8.1 (installs redis-server, redis-tools, gcc, python3-redis, Node.js and the npm clients if missing; about 14 min the first time, 9 after)"
	@echo "make conformance  the long differential, linearizability and fault runs, with lanes and without (about 20 min)"
	@echo "make test-matrix  the long runs and the e2e suite against Redis 7.0 (Debian 12), Redis 8.0 and Valkey 8.1 (about 35 min)"
	@echo "make servers-next Valkey 9.1 from Debian unstable into bin/servers, to try by hand (not in the matrix yet)"
	@echo "make servers      fetch Redis 8.0 and Valkey 8.1 from Debian 13's packages into bin/servers (make test does)"
	@echo "make test-cluster the Redis Cluster load test in both addressing modes, long phases, and the transparency tests (about 3 min)"
	@echo "make bench   Redis vs Cicada (with lanes and without) vs twemproxy vs a bare gnet server, medians and ratios (installs nutcracker; about 20 min here; BENCH_ARGS='-rounds 7 -only hot.GET')"
	@echo "make fmt     fail if any file needs gofmt"
	@echo "make clean   remove bin/"

build:
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$(VERSION)" -o bin/cicada ./cmd/cicada

# The image's version comes from here: .git is not in the build context.
image:
	docker build --build-arg VERSION=$(VERSION) -t cicada:$(VERSION) .

# UPSTREAM and ARGS given to make (or set in the environment) reach the script.
run:
	UPSTREAM="$$UPSTREAM" ARGS="$$ARGS" deploy/local/run.sh

# deps installs what the tests need: redis-server and redis-tools, gcc for
# -race, python3-redis and Node.js for the client tests, and the npm
# packages pinned in test/clients/node/package-lock.json. apt-get update
# runs only if the first install fails (stale or missing lists).
deps:
	@pkgs=""; \
	command -v redis-server >/dev/null || pkgs="$$pkgs redis-server"; \
	command -v redis-benchmark >/dev/null || pkgs="$$pkgs redis-tools"; \
	command -v gcc >/dev/null || pkgs="$$pkgs gcc libc6-dev"; \
	/usr/bin/python3 -c 'import redis' 2>/dev/null || pkgs="$$pkgs python3-redis"; \
	command -v npm >/dev/null || pkgs="$$pkgs nodejs npm"; \
	if [ -n "$$pkgs" ]; then \
		echo "installing$$pkgs"; \
		$(APT_INSTALL) $$pkgs || { $(SUDO) apt-get update -q && $(APT_INSTALL) $$pkgs; }; \
	fi
	@cd test/clients/node && { npm ls --silent >/dev/null 2>&1 || npm ci --no-audit --no-fund --silent; }

# The version matrix (issue 16): Debian 12's redis-server (7.0) is the
# default; MATRIX names the other servers, each a directory of bin/servers
# (test/servers/fetch.sh) put first in PATH. MATRIX_PKGS are the suites
# whose tests ask the live server what it has.
SERVERS := bin/servers
MATRIX := redis-8.0 valkey-8.1
MATRIX_PKGS := ./command ./test/e2e ./test/conformance ./test/linearizability

servers:
	test/servers/fetch.sh $(SERVERS)

# Valkey 9.1 from Debian unstable, for trying it by hand: unstable's version
# moves, and the suites do not pass on it yet (see docs/testing.md, Servers tested).
servers-next:
	test/servers/fetch.sh $(SERVERS) next

# The matrix part of `make test` runs each suite's seeded short form,
# without -race (the Redis 7.0 run has it).
test: deps servers
	go vet ./...
	go test -race -count=1 -timeout 20m ./...
	@for v in $(MATRIX); do \
		echo "== $$v: $$($(SERVERS)/$$v/redis-server --version)"; \
		PATH="$(CURDIR)/$(SERVERS)/$$v:$$PATH" go test -count=1 -timeout 20m $(MATRIX_PKGS) || exit 1; \
	done

# The long runs of issue 3's harnesses; `make test` runs short, seeded ones.
# -v prints the figures (conversations, histories, stale windows). They run
# twice: with lanes (clients sharing upstream connections, the default) and
# with MULTIPLEX=false (an upstream connection per client, --multiplex=false).
conformance: deps conformance-run

conformance-run:
	@for m in true false; do \
		echo "== MULTIPLEX=$$m"; \
		MULTIPLEX=$$m go test -count=1 -timeout 60m -v -run TestGenerated ./test/conformance \
			-conformance.n=10000 -conformance.workers=2 || exit 1; \
		MULTIPLEX=$$m go test -count=1 -timeout 60m -v -run 'TestLinearizable|TestFaults|TestBypassStaleness' ./test/linearizability \
			-lin.runs=20 -lin.duration=10s || exit 1; \
	done

# `make conformance` and the e2e suite on every server of the matrix, 7.0
# included.
test-matrix: deps servers
	@for v in system $(MATRIX); do \
		p="$(CURDIR)/$(SERVERS)/$$v:$$PATH"; [ "$$v" = system ] && p="$$PATH"; \
		echo "== $$v: $$(PATH="$$p" redis-server --version)"; \
		PATH="$$p" go test -count=1 -timeout 20m ./command ./test/e2e || exit 1; \
		PATH="$$p" $(MAKE) --no-print-directory conformance-run || exit 1; \
	done

# The Redis Cluster tests with the load test's long version (both
# addressing modes, longer phases); `make test` runs the announce mode
# with short phases. -v prints the load test's table of phases.
test-cluster: deps
	go test -race -count=1 -timeout 30m -v ./test/cluster -cluster.long

# bench-deps installs what `make bench` runs: redis-server, redis-tools
# (redis-benchmark) and nutcracker (twemproxy, the peer proxy), as deps does.
bench-deps:
	@pkgs=""; \
	command -v redis-server >/dev/null || pkgs="$$pkgs redis-server"; \
	command -v redis-benchmark >/dev/null || pkgs="$$pkgs redis-tools"; \
	command -v nutcracker >/dev/null || [ -x /usr/sbin/nutcracker ] || pkgs="$$pkgs nutcracker"; \
	if [ -n "$$pkgs" ]; then \
		echo "installing$$pkgs"; \
		$(APT_INSTALL) $$pkgs || { $(SUDO) apt-get update -q && $(APT_INSTALL) $$pkgs; }; \
	fi

# The benchmark harness of test/bench (issue 7): the table goes to stdout,
# progress to stderr, every raw sample to bin/bench.json. BENCH_ARGS passes
# harness flags, split on spaces (-rounds, -n-p1, -n-p16, -loops, -only REGEXP,
# -micro= to skip the Go micro-benchmarks; -h lists them).
bench: bench-deps build
	go build -o bin/bareserver ./test/bench/bareserver
	go build -o bin/loadgen ./test/bench/loadgen
	go build -o bin/bench-harness ./test/bench/harness
	PATH="$$PATH:/usr/sbin" bin/bench-harness -cicada bin/cicada -bare bin/bareserver -loadgen bin/loadgen -json bin/bench.json $$BENCH_ARGS

fmt:
	@files=$$(gofmt -l .); if [ -n "$$files" ]; then echo "gofmt needed:"; echo "$$files"; exit 1; fi

clean:
	rm -rf bin
