# poolgate: build, run, test, lint, bench.
SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
FUZZTIME ?= 5s
TESTFLAGS ?= -race -timeout 15m
STATICCHECK := $(shell $(GO) env GOPATH)/bin/staticcheck

.PHONY: build run test deps lint go-test fuzz bench bench-full clean

build: ## build bin/poolgate (the daemon; also the bundled simworker)
	$(GO) build -o $(BIN)/poolgate ./cmd/poolgate
	$(GO) build -o $(BIN)/simworker ./cmd/simworker

run: ## run the daemon with the bundled simulated workers
	$(GO) run ./cmd/poolgate

# test installs what the tests need, builds the binaries they spawn, then runs
# lint, every Go test with the race detector, and short fuzz runs.
test: deps build lint go-test fuzz

deps: ## install redis-server, chromium and nginx when missing (apt-get, as root)
	@bash scripts/deps.sh

lint: ## gofmt, go vet, staticcheck
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@test -x $(STATICCHECK) || $(GO) install honnef.co/go/tools/cmd/staticcheck@latest
	$(STATICCHECK) ./...

go-test:
	POOLGATE_TEST_BIN=$(BIN)/poolgate $(GO) test $(TESTFLAGS) ./...

fuzz: ## run every Fuzz target for FUZZTIME
	@bash scripts/fuzz.sh $(FUZZTIME)

bench: build ## short benchmark (< 2 min): writes docs/benchmarks.md
	$(GO) run ./bench -short -bin $(BIN)/poolgate

bench-full: build ## every benchmark scenario
	$(GO) run ./bench -bin $(BIN)/poolgate

clean:
	rm -rf $(BIN)
