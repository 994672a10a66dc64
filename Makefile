# Tidemark. `make run` starts the broker on the embedded default engine
# (Pebble in ./data, MQTT on 127.0.0.1:1883); `make test` runs every test.

GO        ?= go
BIN       ?= bin/tidemark
# Packages run under the race detector in `make test` (those whose suites fit
# the time budget with it on); the rest run without it.
RACE_PKGS ?= ./engine/... ./table/... ./mqtt/...
FUZZTIME  ?= 30s
# The tests build with tag faults: the conformance cases that crash, hold
# or fail the broker at named points need its fault hooks, which other
# builds leave out.
TEST_TAGS ?= faults

.PHONY: build build-pebble run test test-engines bench fuzz lint conformance clean deps torture

# The MQTT.js interop test runs the npm packages locked in mqtt/interop;
# they are installed again only when the lock file changes.
INTEROP_STAMP := mqtt/interop/node_modules/.installed
$(INTEROP_STAMP): mqtt/interop/package-lock.json mqtt/interop/package.json
	@command -v npm >/dev/null || { echo 'npm not found: install Node.js 18+ and npm (Debian: apt-get install nodejs npm)'; exit 1; }
	cd mqtt/interop && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# deps installs what the tests need beyond Go modules.
deps: $(INTEROP_STAMP)

# Engine tags: each leaves one engine (and the bench peer that embeds the
# same library) out of the build.
ENGINE_TAGS  := nobadger nojetstream nolmdb nopebble
PEBBLE_ONLY  := nobadger,nojetstream,nolmdb

build:
	$(GO) build -o $(BIN) ./cmd/tidemark

# build-pebble builds a binary with the Pebble engine alone.
build-pebble:
	$(GO) build -tags $(PEBBLE_ONLY) -o $(BIN)-pebble ./cmd/tidemark

run:
	$(GO) run ./cmd/tidemark serve

# The table package's own tests run on Pebble under the race detector, then
# once on each other engine: their log keys differ (one per transaction on
# Pebble and Badger, one per record on LMDB and JetStream).
# Every engine package runs the whole conformance suite for its engine, so
# the conformance package's own all-engine run (`go test ./conformance/`)
# is skipped here rather than run twice. The JetStream engine's suite
# with two brokers on one stream (TestConformanceShared) was the longest
# single run under the race detector, three times its time without it;
# it runs without, beside the last packages, while the same suite with one
# broker keeps the race detector on.
test: deps
	$(GO) vet ./...
	$(GO) test -tags $(TEST_TAGS) -race -count=1 -timeout 14m -skip '^TestConformanceShared$$/^jetstream$$' $(RACE_PKGS)
	for e in badger lmdb jetstream; do TIDEMARK_TABLE_ENGINE=$$e $(GO) test -tags $(TEST_TAGS) -count=1 ./table/ || exit 1; done
	$(GO) test -tags $(TEST_TAGS) -count=1 -timeout 14m -skip '^TestConformance$$' $$($(GO) list ./... | grep -v -e tidemark/engine -e tidemark/table -e tidemark/mqtt) ./engine/jetstream/

# torture is the long crash loop: `tidemark serve` killed with SIGKILL
# TORTURE_KILLS times per engine under QoS 1 and 2 load, checked for every
# acknowledged message delivered and no QoS 2 duplicate. `make test` runs
# a short one (3 kills). TORTURE_WINDOW is each publisher's PUBLISHes in
# flight, TORTURE_ONLINE the subscribers online through the kills,
# TORTURE_QOS=1 or 2 puts every publisher at that QoS, TORTURE_SYNC the
# broker's --sync (always by default).
TORTURE_KILLS    ?= 200
TORTURE_MESSAGES ?= 100000
TORTURE_ENGINES  ?= pebble,badger,lmdb,jetstream
TORTURE_WINDOW   ?= 64
TORTURE_ONLINE   ?= 2
TORTURE_QOS      ?= 0
TORTURE_SYNC     ?= always
torture:
	TIDEMARK_TORTURE_KILLS=$(TORTURE_KILLS) TIDEMARK_TORTURE_MESSAGES=$(TORTURE_MESSAGES) TIDEMARK_TORTURE_ENGINES=$(TORTURE_ENGINES) \
	  TIDEMARK_TORTURE_WINDOW=$(TORTURE_WINDOW) TIDEMARK_TORTURE_ONLINE=$(TORTURE_ONLINE) TIDEMARK_TORTURE_QOS=$(TORTURE_QOS) TIDEMARK_TORTURE_SYNC=$(TORTURE_SYNC) \
	  $(GO) test -tags $(TEST_TAGS) -count=1 -timeout 4h -run '^TestTorture$$' -v ./cmd/tidemark/

bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s ./conformance/

# The product binary skips the cases that inject broker faults; this one
# is built with them.
conformance:
	$(GO) build -tags $(TEST_TAGS) -o $(BIN)-faults ./cmd/tidemark
	$(BIN)-faults conformance

# test-engines runs the broker's whole test suite (and the table layer's)
# on each engine besides Pebble, which `make test` runs it on (about two
# minutes per engine).
test-engines: deps
	for e in badger lmdb jetstream; do \
	  TIDEMARK_MQTT_ENGINE=$$e TIDEMARK_TABLE_ENGINE=$$e $(GO) test -tags $(TEST_TAGS) -count=1 -timeout 14m ./mqtt/ ./table/ || exit 1; \
	done

fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$f"; $(GO) test $$pkg -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) || exit 1; \
	  done; \
	done

# lint runs golangci-lint (pinned in tools/go.mod; settings in
# .golangci.yml) beside gofmt, vet in every engine build and a build
# without cgo. golangci-lint's govet covers the build with tag faults and
# the engine tags' builds cover every file of the default one between
# them, so neither is vetted again here (`make test` vets the default).
lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo 'gofmt needed'; exit 1)
	$(GO) tool -modfile=tools/go.mod golangci-lint run ./...
	CGO_ENABLED=0 $(GO) build ./...
	@for tag in $(ENGINE_TAGS) $(PEBBLE_ONLY); do \
	  echo "$(GO) vet -tags $$tag ./..."; $(GO) vet -tags $$tag ./... || exit 1; \
	done

clean:
	rm -rf bin
