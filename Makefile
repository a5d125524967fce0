# Splitlet: the entry point. `make help` lists the targets.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
GO ?= go
BIN := $(CURDIR)/bin
export SPLITLET_BIN_DIR := $(BIN)

# Workspace modules (go.work); `make test` runs the tests of every one.
MODULES := libs services/nodehb services/podconfig services/podworkers services/prober services/statussync cmd/splitlet tools
PKGS := $(foreach m,$(MODULES),./$(m)/...)
SERVICES := nodehb podconfig podworkers prober statussync
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo v0.1.0-dev)
LDFLAGS := -s -w -X github.com/splitlet/splitlet/libs/app.Version=$(VERSION)
FUZZTIME ?= 10s
TESTFLAGS ?=

.PHONY: help build test run bench images testenv vet fuzz clean

help:
	@echo "make build    static binaries of splitlet and each service into bin/"
	@echo "make test     every module's tests (builds the test control plane first if missing)"
	@echo "make run      local control plane + splitlet (all services) + a demo pod; Ctrl-C stops all"
	@echo "make bench    benchmarks"
	@echo "make images   FROM scratch images of the binaries (needs a Docker engine)"
	@echo "make testenv  build etcd and kube-apiserver into bin/ (skipped when the pinned versions are there)"
	@echo "make vet      go vet and gofmt"

build:
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/splitlet ./cmd/splitlet
	@for s in $(SERVICES); do \
		echo "CGO_ENABLED=0 $(GO) build -o $(BIN)/$$s ./services/$$s/cmd/$$s"; \
		CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/$$s ./services/$$s/cmd/$$s; \
	done

testenv:
	@hack/testenv/build.sh $(BIN)

test: testenv
	$(GO) test -count=1 $(TESTFLAGS) $(PKGS)
	$(MAKE) fuzz

fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./libs/bus

run: testenv build
	$(GO) run ./tools/localup

bench: testenv
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

images: build
	@hack/images.sh $(BIN)

vet:
	$(GO) vet $(PKGS)
	@unformatted=$$(gofmt -l $(MODULES) hack); if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi

clean:
	rm -rf $(BIN)
