# seqlease: run `make` or `make help` for the list of targets.

GO                  ?= go
STATICCHECK_VERSION := v0.8.2
BIN                 := $(CURDIR)/bin
STATICCHECK         := $(BIN)/staticcheck
STATICCHECK_STAMP   := $(BIN)/.staticcheck-$(STATICCHECK_VERSION)
COVERPROFILE        := coverage.out

.DEFAULT_GOAL := help

.PHONY: help test demo bench bench-smoke lint cover tidy

help: ## Show this list of targets.
	@echo 'Usage: make <target>'
	@echo
	@grep -E '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | \
		awk 'BEGIN { FS = ":.*## " } { printf "  %-11s %s\n", $$1, $$2 }'

test: ## Run every test with -race against PostgreSQL (starts a throwaway cluster if none answers).
	scripts/with-postgres $(GO) test -race -count=1 -timeout 15m ./...

demo: ## Run the projection pipeline (faults on) on the in-memory backend.
	$(GO) run ./examples/projection

bench: ## Run seqlease side by side with the limits and peers (bench/, ~10 min); writes docs/benchmarks.md.
	scripts/with-postgres sh -c 'cd bench && $(GO) run ./cmd/seqbench -out ../docs/benchmarks.md -cmd "make bench"'

bench-smoke: ## Run every benchmark once, briefly (CI, < 2 min): fails on errors, never on timing.
	scripts/with-postgres sh -c 'cd bench && $(GO) run ./cmd/seqbench -smoke'

lint: $(STATICCHECK_STAMP) ## Run go vet and staticcheck (version pinned in STATICCHECK_VERSION, installed in bin/).
	$(GO) vet ./...
	$(STATICCHECK) ./...

cover: ## Run the tests with coverage (coverage.out) and print per-function coverage.
	scripts/with-postgres $(GO) test -race -count=1 -timeout 15m -covermode=atomic -coverprofile=$(COVERPROFILE) ./...
	$(GO) tool cover -func=$(COVERPROFILE)

tidy: ## Tidy go.mod and go.sum.
	$(GO) mod tidy

$(STATICCHECK_STAMP):
	GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	@rm -f $(BIN)/.staticcheck-*
	@touch $@
