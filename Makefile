# poolgate: build, run, test, lint, bench.
SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
FUZZTIME ?= 5s
TESTFLAGS ?= -race -timeout 15m
STATICCHECK_VERSION := v0.8.2
STATICCHECK := $(shell $(GO) env GOPATH)/bin/staticcheck
# The pinned coding agents (internal/agents/npm) live in a cache, not the repo.
AGENTS_DIR ?= $(or $(POOLGATE_AGENTS_DIR),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/poolgate/agents)

.PHONY: build run test deps agents agents-capture lint go-test fuzz bench bench-full docs clean

build: ## build bin/poolgate (the daemon; also the bundled simworker)
	$(GO) build -o $(BIN)/poolgate ./cmd/poolgate
	$(GO) build -o $(BIN)/simworker ./cmd/simworker

run: ## run the daemon with the bundled simulated workers
	$(GO) run ./cmd/poolgate

# test installs what the tests need, builds the binaries they spawn, then runs
# lint, every Go test with the race detector, and short fuzz runs.
test: deps agents build lint go-test fuzz

deps: ## install redis-server, chromium and nginx when missing (apt-get, as root)
	@bash scripts/deps.sh

agents: ## install the pinned Claude Code, Codex CLI and qwen-code into AGENTS_DIR (needs Node.js 20+)
	@POOLGATE_AGENTS_DIR=$(AGENTS_DIR) bash scripts/agents.sh

agents-capture: agents build ## re-record the agents' requests into internal/agents/testdata
	POOLGATE_AGENTS_DIR=$(AGENTS_DIR) POOLGATE_TEST_BIN=$(BIN)/poolgate $(GO) test ./cmd/poolgate/internal/daemon \
	  -run 'TestAgentsEndToEnd' -count=1 -v -args -capture-agents

lint: ## gofmt, go vet, staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@$(STATICCHECK) -version 2>/dev/null | grep -q '($(STATICCHECK_VERSION:v%=%))' || \
	  $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	$(STATICCHECK) ./...

go-test:
	@POOLGATE_AGENTS_DIR=$(AGENTS_DIR) POOLGATE_TEST_BIN=$(BIN)/poolgate GO=$(GO) bash scripts/gotest.sh $(TESTFLAGS) ./...

fuzz: ## run every Fuzz target for FUZZTIME
	@bash scripts/fuzz.sh $(FUZZTIME)

bench: build ## short benchmark (< 2 min): writes docs/benchmarks.md
	$(GO) run ./bench -short -bin $(BIN)/poolgate

bench-full: build ## every benchmark scenario
	$(GO) run ./bench -bin $(BIN)/poolgate

docs: ## regenerate docs/configuration.md from the config struct, then run the docs' tests (examples, settings, links)
	$(GO) test ./internal/config -run TestConfigDoc -count=1 -update
	$(GO) test ./docs ./internal/config -count=1

clean:
	rm -rf $(BIN)
