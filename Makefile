# seqlease: run `make` or `make help` for the list of targets.

GO                  ?= go
STATICCHECK_VERSION := v0.8.2
BIN                 := $(CURDIR)/bin
STATICCHECK         := $(BIN)/staticcheck
STATICCHECK_STAMP   := $(BIN)/.staticcheck-$(STATICCHECK_VERSION)
COVERPROFILE        := coverage.out

.DEFAULT_GOAL := help

.PHONY: help test browser failover soak demo outbox inbox bench bench-smoke lint cover tidy

help: ## Show this list of targets.
	@echo 'Usage: make <target>'
	@echo
	@grep -E '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | \
		awk 'BEGIN { FS = ":.*## " } { printf "  %-11s %s\n", $$1, $$2 }'

# The library, and the examples in a module of their own (so the Prometheus
# exporter the demo serves metrics with stays out of the library's go.mod).
MODULES := . examples

# Modules of tests and tools only, each with a make target of its own
# (bench: make bench; browsertest: make browser): linted and tidied with
# the others, not run by make test.
TOOL_MODULES := bench browsertest

test: ## Run every test with -race against PostgreSQL (starts a throwaway cluster if none answers) and a throwaway PgBouncer in transaction mode (installs pgbouncer if missing).
	scripts/with-postgres scripts/with-pgbouncer sh -c '$(GO) test -race -count=1 -timeout 15m ./... && cd examples && $(GO) test -race -count=1 -timeout 15m ./...'

browser: ## Run the web interface in a real browser (Debian's chromium, headless; installs it if missing) against PostgreSQL; SEQLEASE_SCREENSHOTS=1 rewrites docs/ui/*.png.
	scripts/with-postgres scripts/ensure-chromium sh -c 'cd browsertest && $(GO) test -race -count=1 -timeout 5m ./...'

failover: ## Run the HA tests, each on a throwaway two-node Patroni cluster (installs patroni and etcd-server if missing): failover under load (synchronous and asynchronous replication), readers on the standby.
	scripts/with-patroni $(GO) test -race -tags failover -count=1 -v -timeout 10m -run '^TestFailover$$' ./internal/failover/
	SEQLEASE_PATRONI_ASYNC=1 scripts/with-patroni $(GO) test -race -tags failover -count=1 -v -timeout 10m -run '^TestFailoverAsync$$' ./internal/failover/
	scripts/with-patroni $(GO) test -race -tags failover -count=1 -v -timeout 10m -run '^TestStandby' ./internal/failover/

soak: ## Run the soak (SOAK=10m): multi-process load with faults on PostgreSQL, then the audit and the load held; then the model-based test long (MODEL_SOAK=5m per backend). SOAKFLAGS=-race adds the race detector.
	scripts/with-postgres env SEQLEASE_SOAK=$(or $(SOAK),10m) $(GO) test $(SOAKFLAGS) -count=1 -v -timeout 0 -run '^TestSoak$$' ./internal/chaos/
	scripts/with-postgres env SEQLEASE_MODEL_DURATION=$(or $(MODEL_SOAK),5m) $(GO) test $(SOAKFLAGS) -count=1 -v -timeout 0 -run '^TestModel$$' ./internal/model/

demo: ## Run the projection pipeline (faults on) on the in-memory backend; flags in ARGS="-dsn ... -procs 3 -kill".
	cd examples && $(GO) run ./projection $(ARGS)

outbox: ## Run the transactional outbox relaying to NATS JetStream (embedded), in memory; flags in ARGS="-dsn ... -procs 3 -kill".
	cd examples && $(GO) run ./outbox $(ARGS)

inbox: ## Run the inbox consumer (payments from NATS JetStream, embedded by default, each credited once); flags in ARGS="-dsn ... -procs 3 -kill", "-nats URL".
	cd examples && $(GO) run ./inbox $(ARGS)

bench: ## Run seqlease side by side with the limits and peers (bench/, ~10 min); writes docs/benchmarks.md.
	scripts/with-postgres sh -c 'cd bench && $(GO) run ./cmd/seqbench -out ../docs/benchmarks.md -cmd "make bench"'

bench-smoke: ## Run every benchmark once, briefly (CI, < 2 min): fails on errors, never on timing.
	scripts/with-postgres sh -c 'cd bench && $(GO) run ./cmd/seqbench -smoke'

lint: $(STATICCHECK_STAMP) ## Run go vet and staticcheck (version pinned in STATICCHECK_VERSION, installed in bin/) on every module.
	for m in $(MODULES) $(TOOL_MODULES); do (cd $$m && $(GO) vet ./... && $(STATICCHECK) ./...) || exit 1; done

cover: ## Run the tests with coverage (coverage.out) and print per-function coverage.
	scripts/with-postgres scripts/with-pgbouncer $(GO) test -race -count=1 -timeout 15m -covermode=atomic -coverprofile=$(COVERPROFILE) ./...
	$(GO) tool cover -func=$(COVERPROFILE)

tidy: ## Tidy every module's go.mod and go.sum.
	for m in $(MODULES) $(TOOL_MODULES); do (cd $$m && $(GO) mod tidy) || exit 1; done

$(STATICCHECK_STAMP):
	GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	@rm -f $(BIN)/.staticcheck-*
	@touch $@
