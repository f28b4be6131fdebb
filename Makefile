# Ferry's single entry point. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

GO            ?= go
BIN           := bin
TOOLS         := $(BIN)/tools
# Pinned tool versions: bump deliberately, never @latest.
WORKFLOWCHECK_VERSION := v0.6.0

# Packages that link the embedded Temporal server run without -race: each
# such test binary is ~200 MB, and -race makes it several times slower. The
# CLI's few tests of its own run with them; the others that link it (the
# binary, the dev server, tools) have none: e2e runs them, and go vet
# compiles them.
SERVER_PKGS := ./e2e/... ./internal/cli/...
UNIT_PKGS    = $(shell $(GO) list ./... | grep -v -e /e2e -e /devserver -e /cmd/ferry -e /internal/cli -e /internal/tools)

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: run
run: build ## Run Ferry on the embedded Temporal server with the UI and a demo producer
	@echo "Temporal UI will be at http://127.0.0.1:8233 — Ctrl-C stops everything."
	./$(BIN)/ferry dev

.PHONY: build
build: ## Build bin/ferry (the first build compiles the Temporal server: 5-20 minutes)
	@mkdir -p $(BIN)
	@test -x $(BIN)/ferry || echo "building bin/ferry; the first build compiles the Temporal server and takes several minutes…"
	$(GO) build -o $(BIN)/ferry ./cmd/ferry

.PHONY: test
test: browser ## Run all tests against local PostgreSQL, RabbitMQ and an embedded Temporal server
	$(GO) vet ./...
	$(GO) vet -tags failpoints ./internal/failpoint/ ./poller/ ./activities/
	$(GO) vet -tags faults,failpoints ./e2e/
	$(GO) test -race -count=1 $(UNIT_PKGS)
	$(GO) test -race -count=1 -tags failpoints ./internal/failpoint/
	@mkdir -p test-output
	$(GO) test -tags failpoints -count=1 -timeout 30m -artifacts -outputdir=$(CURDIR)/test-output $(SERVER_PKGS)
	@echo "screenshots and other test artifacts: test-output/_artifacts/"

# The long fault runs are built only with the faults tag: without it they are
# not in the test binary. Figures go to the -v output. Failpoints
# (internal/failpoint) work only in builds with the failpoints tag, which
# every e2e run here sets.
.PHONY: test-faults
test-faults: ## Long fault runs with figures: kill loop (at least FERRY_FAULTS_DURATION 5m and FERRY_FAULTS_KILLS 100 kills), 5 PostgreSQL and 3 RabbitMQ restarts, backlog (FERRY_FAULTS_BACKLOG, 100000): ~40 min
	$(GO) test -tags faults,failpoints -count=1 -timeout 120m -v -run '^TestLong' ./e2e/

# The benchmark measures bin/ferry as built from this tree, so both targets
# build it first. BENCH_FLAGS adds flags (ferry-bench -h lists them), e.g.
# make bench BENCH_FLAGS='-workloads burst,steady-100 -reps 5', or
# BENCH_FLAGS='-sources poll,wal' for Ferry with both relay sources side by
# side (on a PostgreSQL cluster the bench starts itself, wal_level=logical).
.PHONY: bench
bench: build bench-bin ## Ferry vs. a plain relay, full size, 3 reps: table + bench-output/ (about 1 hour)
	./$(BIN)/ferry-bench $(BENCH_FLAGS)

.PHONY: bench-quick
bench-quick: build bench-bin ## The benchmark at 1/10 size, 1 rep (about 3 min with the builds)
	./$(BIN)/ferry-bench -scale 0.1 -reps 1 -duration 10s -commit-duration 3s $(BENCH_FLAGS)

.PHONY: bench-bin
bench-bin:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ferry-bench ./cmd/ferry-bench
	$(GO) build -o $(BIN)/ferry-bench-temporal ./cmd/ferry-bench-temporal

.PHONY: browser
browser: ## Install headless Chromium (Debian package) for the UI test, if missing
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  echo "installing chromium for the UI test (apt-get)…"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

.PHONY: check
check: lint test ## lint + test (what CI runs)

.PHONY: lint
lint: $(TOOLS)/workflowcheck ## gofmt, go vet, workflowcheck
	@bad=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$bad" ]; then echo "gofmt would change:"; echo "$$bad"; exit 1; fi
	$(GO) vet ./...
	$(TOOLS)/workflowcheck ./workflows/... ./effects/...

$(TOOLS)/workflowcheck:
	@mkdir -p $(TOOLS)
	GOBIN=$(abspath $(TOOLS)) $(GO) install go.temporal.io/sdk/contrib/tools/workflowcheck@$(WORKFLOWCHECK_VERSION)

.PHONY: migrate
migrate: build ## Apply Ferry's migrations to FERRY_POSTGRES_URL (default: local postgres)
	./$(BIN)/ferry migrate

.PHONY: clean
clean: ## Remove build outputs and the dev server's state (.ferry)
	rm -rf $(BIN) .ferry
