# Ferry's single entry point. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

GO            ?= go
BIN           := bin
TOOLS         := $(BIN)/tools
# Pinned tool versions: bump deliberately, never @latest.
WORKFLOWCHECK_VERSION := v0.6.0
# Temporal's CLI, for the test that runs the docs' `temporal` commands (the
# test checks the binary's version against the same pin).
TEMPORAL_CLI_VERSION  := v1.5.1
TEMPORAL_CLI          := $(TOOLS)/temporal-$(TEMPORAL_CLI_VERSION)/temporal

# Prometheus 2.42 and promtool from Debian's package prometheus, for the alert
# rule tests (promtool test rules) and the e2e test that runs the rules in a
# real Prometheus. On the PATH if installed; otherwise `make prometheus`
# unpacks the package under bin/tools (apt-get download: installing it would
# also start a Prometheus service on :9090).
PROMETHEUS_DEB := $(TOOLS)/prometheus-deb
PROMTOOL       := $(or $(shell command -v promtool 2>/dev/null),$(abspath $(PROMETHEUS_DEB))/usr/bin/promtool)
PROMETHEUS     := $(or $(shell command -v prometheus 2>/dev/null),$(abspath $(PROMETHEUS_DEB))/usr/bin/prometheus)

# Four modules, each built on its own go.mod; replace directives point them at
# this tree (no go.work: each module's tests then run on exactly the versions
# its go.mod selects, the library's on what an embedder gets):
#   .                 the library an embedder imports (no Temporal server, UI, SQLite, cobra, plotting)
#   cmd/ferry         the production `ferry` command (cobra tree in cmd/ferry/cli)
#   examples/orders   a service embedding Ferry, built as its own module
#   dev               what links the embedded Temporal server: ferry-dev (`ferry dev`),
#                     devserver, demo, e2e, bench, tools
MODULES := . cmd/ferry examples/orders dev

# Packages of the dev module that link the embedded Temporal server run
# without -race: each such test binary is ~200 MB, and -race makes it several
# times slower. The benchmark's unit tests do not link it.
DEV_RACE_PKGS   := ./bench/... ./tools/release/
DEV_SERVER_PKGS := ./e2e/...

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: run
run: build-dev ## Run Ferry on the embedded Temporal server with the UI and a demo producer (bin/ferry-dev dev)
	@echo "Temporal UI will be at http://127.0.0.1:8233 — Ctrl-C stops everything."
	./$(BIN)/ferry-dev dev

.PHONY: build
build: build-ferry build-dev ## Build bin/ferry (production, no embedded server) and bin/ferry-dev (with `ferry dev`)

# The commit `ferry version` prints, for builds without a VCS stamp (this
# tree's GOFLAGS may carry -buildvcs=false); "-modified" when the work tree
# differs from it.
FERRY_COMMIT  := $(shell git rev-parse HEAD 2>/dev/null)$(shell git diff --quiet HEAD -- 2>/dev/null || echo -modified)
FERRY_LDFLAGS := -X github.com/ferry-outbox/ferry/cmd/ferry/cli.commit=$(FERRY_COMMIT)

.PHONY: build-ferry
build-ferry:
	@mkdir -p $(BIN)
	cd cmd/ferry && $(GO) build -ldflags='$(FERRY_LDFLAGS)' -o $(CURDIR)/$(BIN)/ferry .

.PHONY: build-dev
build-dev:
	@mkdir -p $(BIN)
	@test -x $(BIN)/ferry-dev || echo "building bin/ferry-dev; the first build compiles the Temporal server and takes several minutes…"
	cd dev && $(GO) build -ldflags='$(FERRY_LDFLAGS)' -o $(CURDIR)/$(BIN)/ferry-dev ./cmd/ferry-dev

.PHONY: test
test: browser buildah temporal-cli prometheus vet ## Run all tests, every module, against local PostgreSQL, RabbitMQ and an embedded Temporal server
	$(PROMTOOL) check rules deploy/prometheus/ferry-alerts.yml
	cd deploy/prometheus && $(PROMTOOL) test rules ferry-alerts.test.yml
	$(GO) test -race -count=1 ./...
	$(GO) test -race -count=1 -tags failpoints ./internal/failpoint/ ./internal/publishjournal/
	cd cmd/ferry && $(GO) test -race -count=1 ./...
	cd examples/orders && $(GO) test -race -count=1 ./...
	cd dev && $(GO) test -race -count=1 $(DEV_RACE_PKGS)
	@mkdir -p test-output
	cd dev && FERRY_TEMPORAL_CLI=$(abspath $(TEMPORAL_CLI)) FERRY_PROMETHEUS=$(PROMETHEUS) $(GO) test -tags failpoints -count=1 -timeout 30m -artifacts -outputdir=$(CURDIR)/test-output $(DEV_SERVER_PKGS)
	@echo "screenshots and other test artifacts: test-output/_artifacts/"

# The long fault runs are built only with the faults tag: without it they are
# not in the test binary. Figures go to the -v output. Failpoints
# (internal/failpoint) work only in builds with the failpoints tag, which
# every e2e run here sets.
.PHONY: test-faults
test-faults: ## Long fault runs with figures: kill loop (at least FERRY_FAULTS_DURATION 5m and FERRY_FAULTS_KILLS 100 kills), 5 PostgreSQL and 3 RabbitMQ restarts, backlog (FERRY_FAULTS_BACKLOG, 100000), faults against a Temporal cluster of processes (FERRY_FAULTS_DURATION); all but the cluster's in both lanes: ~65 min
	cd dev && $(GO) test -tags faults,failpoints -count=1 -timeout 120m -v -run '^TestLong' ./e2e/

# The benchmark measures bin/ferry (the production binary) as built from this
# tree, so both targets build it first. BENCH_FLAGS adds flags (ferry-bench -h lists them), e.g.
# make bench BENCH_FLAGS='-workloads burst,steady-100 -reps 5', or
# BENCH_FLAGS='-sources poll,wal' for Ferry with both relay sources side by
# side (on a PostgreSQL cluster the bench starts itself, wal_level=logical),
# or BENCH_FLAGS='-temporal-postgres-url postgres://postgres@127.0.0.1:5432/postgres'
# for the bench's Temporal server on PostgreSQL instead of SQLite, with
# -temporal-cluster 2 added as a cluster of processes (bin/ferry-dev dev temporal:
# a frontend process and 2 history processes).
.PHONY: bench
bench: build-ferry bench-bin ## Ferry in both lanes vs. a plain relay, full size, 3 reps: table + bench-output/ (about 2 hours, estimate)
	./$(BIN)/ferry-bench $(BENCH_FLAGS)

.PHONY: bench-quick
bench-quick: build-ferry bench-bin ## The benchmark at 1/10 size, 1 rep (about 12 min, plus the builds)
	./$(BIN)/ferry-bench -scale 0.1 -reps 1 -duration 10s -commit-duration 3s $(BENCH_FLAGS)

.PHONY: bench-bin
bench-bin: build-dev
	@mkdir -p $(BIN)
	cd dev && $(GO) build -o $(CURDIR)/$(BIN)/ferry-bench ./cmd/ferry-bench
	cd dev && $(GO) build -o $(CURDIR)/$(BIN)/ferry-bench-temporal ./cmd/ferry-bench-temporal

.PHONY: browser
browser: ## Install headless Chromium (Debian package) for the UI test, if missing
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  echo "installing chromium for the UI test (apt-get)…"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

.PHONY: buildah
buildah: ## Install buildah (Debian package) for the image test, if missing
	@command -v buildah >/dev/null 2>&1 || { \
	  echo "installing buildah for the image test (apt-get)…"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah >/dev/null; }

.PHONY: prometheus
prometheus: ## Get Prometheus and promtool (Debian package prometheus) for the alert rule tests, if missing
	@test -x "$(PROMTOOL)" && test -x "$(PROMETHEUS)" || { \
	  echo "unpacking Debian's prometheus package under $(PROMETHEUS_DEB) for the alert rule tests (apt-get download)…"; \
	  mkdir -p $(PROMETHEUS_DEB) && cd $(PROMETHEUS_DEB) && \
	  { apt-get download -qq prometheus 2>/dev/null || { apt-get update -qq && apt-get download -qq prometheus; }; } && \
	  dpkg-deb -x prometheus_*.deb . && rm -f prometheus_*.deb; }

.PHONY: temporal-cli
temporal-cli: $(TEMPORAL_CLI) ## Build Temporal's CLI (pinned) for the CLI test, if missing (the first build compiles a Temporal server: minutes)

$(TEMPORAL_CLI):
	@mkdir -p $(dir $@)
	GOBIN=$(abspath $(dir $@)) $(GO) install github.com/temporalio/cli/cmd/temporal@$(TEMPORAL_CLI_VERSION)

.PHONY: check
check: lint test ## lint + test (what CI runs)

.PHONY: lint
lint: $(TOOLS)/workflowcheck vet ## gofmt, go mod tidy and go vet (every module), workflowcheck
	@bad=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$bad" ]; then echo "gofmt would change:"; echo "$$bad"; exit 1; fi
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) mod tidy -diff >/dev/null) || { echo "go.mod/go.sum of $$m are not tidy: cd $$m && go mod tidy"; exit 1; }; done
	$(TOOLS)/workflowcheck ./workflows/... ./effects/...
	cd examples/orders && $(abspath $(TOOLS))/workflowcheck ./fulfilment/...

# go vet in every module, the failpoints build of the packages that have
# crash points or publish-journal hooks, and the dev module with the faults and failpoints tags (the
# long fault runs are built only with the first, crash points only with the
# second).
.PHONY: vet
vet:
	@set -e; for m in $(MODULES); do echo "go vet ($$m)"; (cd $$m && $(GO) vet ./...); done
	$(GO) vet -tags failpoints ./internal/failpoint/ ./internal/publishjournal/ ./poller/ ./activities/
	cd dev && $(GO) vet -tags faults,failpoints ./...

# go mod download in every module (CI, on a clean clone).
.PHONY: download
download:
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) mod download); done

$(TOOLS)/workflowcheck:
	@mkdir -p $(TOOLS)
	GOBIN=$(abspath $(TOOLS)) $(GO) install go.temporal.io/sdk/contrib/tools/workflowcheck@$(WORKFLOWCHECK_VERSION)

# A release gives all MODULES one version (dev/tools/release says how).
# VERSION defaults to the newest section of CHANGELOG.md, which must have
# one for it. RELEASE_CHECK_FLAGS adds flags, e.g. -plant-replace=cmd/ferry
# (keeps a replace directive in that go.mod: the check must fail) or -keep.
VERSION ?= $(shell sed -n 's/^## \(v[^ ]*\).*/\1/p' CHANGELOG.md | head -n1)

# The tool is built once from the tree with its replace directives: in a
# tree that release-prepare rewrote, module dev requires the library at a
# version no proxy has yet, and could not build it (dev/go.mod is
# therefore no prerequisite).
RELEASE_TOOL := $(TOOLS)/release

$(RELEASE_TOOL): $(wildcard dev/tools/release/*.go dev/tools/release/testdata/embedder/*.go)
	@mkdir -p $(TOOLS)
	cd dev && $(GO) build -o $(abspath $@) ./tools/release

.PHONY: release-check
release-check: $(RELEASE_TOOL) ## Dry-run release VERSION (default: CHANGELOG.md's newest): rewritten go.mod files, a file module proxy, go install …/cmd/ferry@VERSION, an embedder that go-gets the library (1-6 min, mostly downloads into an empty module cache)
	$(RELEASE_TOOL) check -root $(CURDIR) -version "$(VERSION)" -modules "$(MODULES)" $(RELEASE_CHECK_FLAGS)

.PHONY: release-prepare
release-prepare: $(RELEASE_TOOL) ## Rewrite this (clean) work tree into release VERSION, on a release branch: requires at VERSION, no replace directives; prints what to commit and tag
	$(RELEASE_TOOL) prepare -root $(CURDIR) -version "$(VERSION)" -modules "$(MODULES)"

.PHONY: migrate
migrate: build-ferry ## Apply Ferry's migrations to FERRY_POSTGRES_URL (default: local postgres)
	./$(BIN)/ferry migrate

.PHONY: clean
clean: ## Remove build outputs and the dev server's state (.ferry)
	rm -rf $(BIN) .ferry
