# chatd: `make run` serves the demo on 127.0.0.1:8080, `make test` runs every test.
# Both start the project's private PostgreSQL (scripts/devdb.sh) unless DATABASE_URL is set.
# test-go also installs Debian's bubblewrap when missing (scripts/bwrap.sh), for the shell tool's sandbox,
# and Debian's haproxy (scripts/haproxy.sh), for the tests of several chatd nodes behind HAProxy.

SQLC_VERSION := v1.31.1
DEVDB := scripts/devdb.sh

.PHONY: cluster cluster-stop run test vet generate check-generated db-url db-stop db-status build bench web check-web test-go test-js fuzz

# Built, then run directly (not with go run, which exits 1 when interrupted).
run: build
	$(DEVDB) exec bin/chatd

build:
	go build -o bin/chatd ./cmd/chatd

# Three chatd nodes behind HAProxy on this machine (docs/cluster.md): the app at
# http://127.0.0.1:8080/. scripts/cluster.sh kill N, start N, status, stop.
cluster:
	scripts/cluster.sh start

cluster-stop:
	scripts/cluster.sh stop

# The benchmark harness: chatd as its own process on the project's PostgreSQL, real
# WebSocket clients, a raw baseline server and a Centrifuge peer (bench/centrifuge, its
# own Go module, built to bin/chatd-peer). Quick mode by default (about 5 minutes on 2
# cores, 3 of them the scale curve; BENCH_FLAGS='-scenarios fanout,storm,snapstorm,idle,storage'
# leaves it out); BENCH_FLAGS=-full for longer windows. Results go to docs/benchmarks.md,
# the scale curve's plot beside it (docs/benchmarks-scale-quick.png).
bench: build
	go build -o bin/chatd-bench ./cmd/chatd-bench
	cd bench/centrifuge && go build -o ../../bin/chatd-peer .
	$(DEVDB) exec bin/chatd-bench -chatd bin/chatd -peer bin/chatd-peer $(BENCH_FLAGS)

test: vet check-generated check-web test-go test-js

# The shell tool's sandbox tests run real bubblewrap (scripts/bwrap.sh installs it), the
# tests behind a load balancer real HAProxy (scripts/haproxy.sh installs it), the MCP
# tests the npm package @modelcontextprotocol/server-everything, and the AG-UI agent's tests
# (agent/agui) a test server made of @ag-ui/core and @ag-ui/encoder (all pinned in web/).
MCP_EVERYTHING = $(CURDIR)/web/node_modules/@modelcontextprotocol/server-everything/dist/index.js
test-go: web/node_modules/.installed
	CHATD_BWRAP=$$(scripts/bwrap.sh) CHATD_HAPROXY=$$(scripts/haproxy.sh) CHATD_MCP_EVERYTHING=$(MCP_EVERYTHING) $(DEVDB) exec go test -race -count=1 ./...

# Every fuzz target (the client-frame decoder, a whole connection fed arbitrary frames,
# the event encoder), one after another, each for FUZZTIME. Their seed corpora in
# testdata/fuzz/ already run as ordinary tests in make test; this looks for new inputs.
# FUZZFLAGS adds go test flags, e.g. FUZZFLAGS=-parallel=1 on a shared machine;
# FUZZMINIMIZE bounds the minimization of new inputs (see scripts/fuzz.sh).
FUZZTIME ?= 30s
FUZZMINIMIZE ?= 100x
fuzz:
	FUZZTIME=$(FUZZTIME) FUZZMINIMIZE=$(FUZZMINIMIZE) FUZZFLAGS='$(FUZZFLAGS)' $(DEVDB) exec scripts/fuzz.sh

# The client library's tests and the browser tests, against bin/chatd on the private
# PostgreSQL, in Debian's Chromium (scripts/chromium.sh installs it when missing).
test-js: build web/node_modules/.installed
	CHATD_CHROMIUM=$$(scripts/chromium.sh) $(DEVDB) exec sh -c 'cd web && npm test'

# Rebuilds the committed web assets (web/dist, web/client/dist, web/ai-sdk/dist) from their sources.
web: web/node_modules/.installed
	cd web && node build.mjs

# Fails when web/dist, web/client/dist or web/ai-sdk/dist no longer match their sources.
check-web: web/node_modules/.installed
	cd web && node build.mjs --check

web/node_modules/.installed: web/package.json web/package-lock.json
	cd web && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# Fails when queries/*.gen.go no longer match queries/*.sql and the migrations.
check-generated:
	@go run github.com/sqlc-dev/sqlc/cmd/sqlc@$(SQLC_VERSION) diff || { echo "queries/*.gen.go are stale: run make generate and commit"; exit 1; }

vet:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	go vet ./...
	cd bench/centrifuge && go vet ./...

# Regenerates queries/*.gen.go from queries/*.sql and the migrations. sqlc needs cgo (gcc).
generate:
	go run github.com/sqlc-dev/sqlc/cmd/sqlc@$(SQLC_VERSION) generate

db-url:
	@$(DEVDB) url

db-stop:
	@$(DEVDB) stop

db-status:
	@$(DEVDB) status
