# Splitlet: the entry point. `make help` lists the targets.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
GO ?= go
BIN := $(CURDIR)/bin
export SPLITLET_BIN_DIR := $(BIN)

# Workspace modules (go.work); `make test` runs the tests of every one.
MODULES := libs services/nodehb services/podconfig services/podworkers services/prober services/statussync cmd/splitlet tools bench e2e examples
PKGS := $(foreach m,$(MODULES),./$(m)/...)
# The end-to-end tests (e2e/, the compose stack on a real Docker engine) run
# after the others, on their own: they use fixed ports and much of the machine.
E2E_PKGS := ./e2e/...
SERVICES := nodehb podconfig podworkers prober statussync
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo v0.1.0-dev)
LDFLAGS := -s -w -X github.com/splitlet/splitlet/libs/app.Version=$(VERSION)
# Fuzz budgets are counts, not durations: Go 1.26's fuzz coordinator can
# report a duration-bounded run that ends while a worker is busy as failed
# ("context deadline exceeded", no failing input; golang/go#75804, fixed in
# Go 1.27); a count has no deadline to race.
FUZZTIME ?= 30000x
FUZZMINIMIZETIME ?= 500x
TESTFLAGS ?=

.PHONY: help build test test-unit e2e up down run conformance node-conformance conformance-table bench bench-go bench-tools faults nats-server images testenv vet fuzz clean jsprober-deps jaeger images-tracing image-jaeger

# Peers and parts of the benchmark, installed with `go install` into bin/.
NATS_SERVER_VERSION := v2.15.2
# kwok: the newest (bin/kwok) and the one before it (bin/kwok-<version>),
# two rows of the benchmark; bench/agents.go names the same versions.
KWOK_VERSION := v0.8.0
KWOK_OLD_VERSION := v0.7.0
# Jaeger v2 (the module's v1.x tags carry the v2 binary, cmd/jaeger): make jaeger.
JAEGER_VERSION := v1.76.0
BENCHFLAGS ?=

help:
	@echo "make build    static binaries of splitlet and each service into bin/"
	@echo "make test     the unit tier, then every module's tests (builds the test control plane first if missing)"
	@echo "make test-unit  the unit tier: go test -short over every module; needs Go alone (no control plane, containerd, Docker or root)"
	@echo "make run      local control plane + splitlet (all services) + a demo pod; Ctrl-C stops all (RUNTIME=process|sim|cri)"
	@echo "make node-conformance  Kubernetes' Node Conformance Test (e2e_node.test v1.36.3, NodeConformance && !Serial && !Disruptive; SERIAL=1: the Serial ones too) against the same harness; report in conformance/node-out (NODE=kubelet: conformance/node-out-kubelet; CONFORMANCEFLAGS as for make conformance)"
	@echo "make conformance  Kubernetes' node conformance tests (e2e.test v1.36.3) against a control plane and a Splitlet node on containerd; report in conformance/out (CONFORMANCEFLAGS=\"--ginkgo.focus=...\"; NODE=kubelet: the real kubelet as the node, report in conformance/out-kubelet)"
	@echo "make conformance-table  rewrite docs/conformance.md's figures block from the runs' summary.json (CONFORMANCE_REPORTS: by default every conformance/*/ with one)"
	@echo "make bench    benchmarks"
	@echo "make faults   the fault suite: SIGKILL of each stage, NATS down, pod workers lost, on sim, process and CRI (FAULTSFLAGS=\"-pods 500 -cases ...\")"
	@echo "make images   FROM scratch images of the binaries (needs a Docker engine and busybox-static)"
	@echo "make e2e      the images, then the end-to-end tests on the compose stack (deploy/compose)"
	@echo "make up       the compose stack (STACKFLAGS=\"--podworkers=3 --tcpprober|--jsprober|--allinone --shadow=prober:jsprober --cri --nats-cluster --tracing\"); make down"
	@echo "make images-tracing  make images and splitlet/jaeger:dev (Jaeger, for --tracing; make image-jaeger alone)"
	@echo "make testenv  build etcd, kube-apiserver, kube-controller-manager, kube-proxy, CoreDNS, the test registry and metrics-server into bin/ (skipped when the pinned versions are there)"
	@echo "make vet      go vet and gofmt"
	@echo "make jsprober-deps  npm ci of examples/jsprober (the JavaScript prober's nats client; make test and make images run it)"

build:
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/splitlet ./cmd/splitlet
	@for s in $(SERVICES); do \
		echo "CGO_ENABLED=0 $(GO) build -o $(BIN)/$$s ./services/$$s/cmd/$$s"; \
		CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/$$s ./services/$$s/cmd/$$s; \
	done

testenv:
	@hack/testenv/build.sh $(BIN)

# make test: the unit tier first (a logic failure shows in minutes), then
# everything against the real dependencies (the stage binaries and
# nats-server: the fault suite's short version runs them).
test: test-unit
	$(MAKE) testenv build nats-server jsprober-deps
	$(GO) test -count=1 -timeout 20m $(TESTFLAGS) $(filter-out $(E2E_PKGS),$(PKGS))
	$(MAKE) fuzz
	$(MAKE) e2e

# make test-unit: the unit tier, every module's tests under -short, which
# needs Go alone: a test that needs the control plane (etcd,
# kube-apiserver), a nats-server or stage binary, containerd, a Docker
# engine, Node.js or root skips under -short (libs/testenv.SkipShort) and
# fails without it when what it needs is missing. NATS runs embedded.
test-unit:
	$(GO) test -short -count=1 -timeout 3m $(TESTFLAGS) $(PKGS)

# make up / make down: the compose stack (deploy/compose) without the docker
# compose CLI; STACKFLAGS="--podworkers=3", "--tcpprober", "--jsprober" or "--allinone",
# "--shadow=prober:jsprober" (or prober:tcpprober: the candidate as a shadow of the
# prober, docs/experiments.md), "--cri" (pods in the host's containerd) and "--nats-cluster" (three NATS
# servers, streams at three replicas), "--tracing" (Jaeger on :16686, every
# stage and kube-apiserver sending it spans; builds splitlet/jaeger if missing).
STACKFLAGS ?=
up: images
	$(GO) run ./e2e/cmd/stack up $(STACKFLAGS)

down:
	$(GO) run ./e2e/cmd/stack down

# make e2e: the images, then the end-to-end tests (needs a Docker engine).
# SPLITLET_E2E=skip skips them (and the images).
ifeq ($(SPLITLET_E2E),skip)
e2e:
	@echo "e2e: skipped (SPLITLET_E2E=skip)"
else
e2e: images
	$(GO) test -count=1 -timeout 20m $(TESTFLAGS) $(E2E_PKGS)
endif

# make fuzz: every decoder of outside input, FUZZTIME executions each
# (part of make test): bus messages, static pod files and manifest URLs,
# the --config YAML, the kubelet API's logs and exec queries, CRI log
# lines (a container writes its log file); and
# statussync's status patch, built directly, against the reflective
# two-way merge.
FUZZ_TARGETS := FuzzDecode:./libs/bus FuzzDecode:./services/podconfig/internal/manifest \
	FuzzLoad:./libs/config FuzzQueries:./services/nodehb/internal/kubeletapi FuzzRead:./libs/recording \
	FuzzStatusPatch:./services/statussync/internal/apistatus FuzzParse:./libs/runtime/crilog
fuzz:
	@for t in $(FUZZ_TARGETS); do \
		echo "$(GO) test -run '^$$' -fuzz '^$${t%%:*}$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) $${t#*:}"; \
		$(GO) test -run '^$$' -fuzz "^$${t%%:*}\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) "$${t#*:}" || exit 1; \
	done

# make run: RUNTIME=process (default: pods are local processes), sim
# (simulated containers) or cri (real containers of containerd: the one on
# /run/containerd/containerd.sock, or one started under .splitlet/containerd
# when none answers, as root; busybox and pause images built locally).
# localup is built and run as a binary of its own (not `go run`, which turns
# a Ctrl-C into exit status 1): Ctrl-C stops everything with 0.
RUNTIME ?= process
run: build
	@TESTENV_RUN_ONLY=1 hack/testenv/build.sh $(BIN)
	@CGO_ENABLED=0 $(GO) build -o $(BIN)/localup ./tools/localup
	$(BIN)/localup --runtime=$(RUNTIME)

# make conformance: Kubernetes' node conformance tests (docs/conformance.md).
# Builds kube-scheduler, kube-controller-manager, e2e.test, agnhost and nnp
# into bin/ when missing (e2e.test: about 6 minutes on 2 cores, once), then
# localup --conformance starts a control plane with both, a containerd with
# the e2e test images (built FROM scratch and imported; a loopback registry
# holding them mirrors registry.k8s.io for the specs that pull) and splitlet
# on the cri runtime, and runs the [NodeConformance] and [Conformance] specs of
# test/e2e/common/{node,storage,network}, test/e2e/node and test/e2e/storage.
# CONFORMANCEFLAGS go to e2e.test
# (e.g. --ginkgo.focus='\[sig-node\] Pods' for a subset). Needs root.
# NODE=kubelet: the peer run, the real kubelet v1.36.3 (bin/kubelet) as the
# node instead of splitlet, same control plane, containerd and suite; state
# under .splitlet/conformance-kubelet, report in conformance/out-kubelet, its
# own CNI bridge, so it may run beside a Splitlet run.
CONFORMANCEFLAGS ?=
NODE ?= splitlet
CONFORMANCE_OUT := conformance/out$(if $(filter kubelet,$(NODE)),-kubelet)
conformance: build
	@TESTENV_EXTRA="kube-scheduler kube-controller-manager$(if $(filter kubelet,$(NODE)), kubelet)" hack/testenv/build.sh $(BIN)
	@hack/conformance/build.sh $(BIN)
	@CGO_ENABLED=0 $(GO) build -o $(BIN)/localup ./tools/localup
	$(BIN)/localup --conformance --node-agent=$(NODE) --report-dir=$(CONFORMANCE_OUT) -- $(CONFORMANCEFLAGS)

# make node-conformance: Kubernetes' Node Conformance Test, e2e_node.test
# v1.36.3 (built by hack/conformance/build.sh, once), against the harness of
# make conformance (localup --conformance --suite=node: control plane,
# containerd with the test images and the test-handler runtime, the node
# agent of NODE) with --start-services=false; by default the specs labelled
# NodeConformance && !Serial && !Disruptive (SERIAL=1: the Serial ones too,
# but those the skip list names), 4 Ginkgo processes. State under
# .splitlet/node-conformance(-kubelet), report in conformance/node-out(-kubelet).
NODE_CONFORMANCE_OUT := conformance/node-out$(if $(filter kubelet,$(NODE)),-kubelet)
node-conformance: build
	@TESTENV_EXTRA="kube-scheduler kube-controller-manager$(if $(filter kubelet,$(NODE)), kubelet)" hack/testenv/build.sh $(BIN)
	@hack/conformance/build.sh $(BIN)
	@CGO_ENABLED=0 $(GO) build -o $(BIN)/localup ./tools/localup
	$(BIN)/localup --conformance --suite=node --node-agent=$(NODE)$(if $(SERIAL), --serial) --report-dir=$(NODE_CONFORMANCE_OUT) -- $(CONFORMANCEFLAGS)

# make conformance-table: rewrites the block of docs/conformance.md between
# <!-- conformance-table:begin --> and <!-- conformance-table:end --> from
# the runs' reports: CONFORMANCE_REPORTS, by default every directory of
# conformance/ that holds a summary.json (out, out-kubelet, node-out,
# node-out-kubelet). Splitlet's and the kubelet's runs of a suite are paired.
CONFORMANCE_REPORTS ?= $(patsubst %/summary.json,%,$(wildcard conformance/*/summary.json))
conformance-table:
	@CGO_ENABLED=0 $(GO) build -o $(BIN)/localup ./tools/localup
	$(BIN)/localup --conformance-table --out docs/conformance.md $(CONFORMANCE_REPORTS)

# make bench: the side-by-side run (Splitlet split and all-in-one, kwok, an
# ideal agent), the scaling case and the stage cases, in one run (bench/).
# make bench-go: every Go benchmark of every module.
bench: testenv build bench-tools
	$(GO) run ./bench $(BENCHFLAGS)

# make faults: the fault suite (bench/faults, docs/faults.md); its short
# version runs in make test.
FAULTSFLAGS ?=
faults: testenv build nats-server
	$(GO) run ./bench/faults $(FAULTSFLAGS)

bench-go:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

bench-tools: nats-server
	@[ -x $(BIN)/kwok ] && $(BIN)/kwok --version 2>/dev/null | grep -q '$(KWOK_VERSION)' || \
		{ echo "installing kwok $(KWOK_VERSION)"; GOWORK=off GOBIN=$(BIN) CGO_ENABLED=0 $(GO) install sigs.k8s.io/kwok/cmd/kwok@$(KWOK_VERSION); }
	@[ -x $(BIN)/kwok-$(KWOK_OLD_VERSION) ] && $(BIN)/kwok-$(KWOK_OLD_VERSION) --version 2>/dev/null | grep -q '$(KWOK_OLD_VERSION)' || \
		{ echo "installing kwok $(KWOK_OLD_VERSION)"; tmp=$$(mktemp -d); GOWORK=off GOBIN=$$tmp CGO_ENABLED=0 $(GO) install sigs.k8s.io/kwok/cmd/kwok@$(KWOK_OLD_VERSION) && \
		mv $$tmp/kwok $(BIN)/kwok-$(KWOK_OLD_VERSION); rm -rf $$tmp; }

nats-server:
	@[ -x $(BIN)/nats-server ] && $(BIN)/nats-server --version | grep -q '$(NATS_SERVER_VERSION)' || \
		{ echo "installing nats-server $(NATS_SERVER_VERSION)"; GOWORK=off GOBIN=$(BIN) CGO_ENABLED=0 $(GO) install github.com/nats-io/nats-server/v2@$(NATS_SERVER_VERSION); }

# make images: FROM scratch images of the binaries (hack/images.sh says which);
# needs a running Docker engine and Debian's busybox-static.
images: build testenv nats-server jsprober-deps
	@hack/images.sh $(BIN)

# make jaeger: Jaeger v2 into bin/, an OpenTelemetry Collector distribution
# (deploy/compose/jaeger.yaml). Its go.mod has a replace directive, which go
# install refuses, so it is built in its module's directory (go mod download
# fetches it from the module proxy when the cache lacks it), with the version
# stamped where `jaeger version` reads it.
JAEGER_MOD := github.com/jaegertracing/jaeger
jaeger:
	@[ -x $(BIN)/jaeger ] && $(BIN)/jaeger version 2>/dev/null | grep -q '"gitVersion":"$(JAEGER_VERSION)"' || { \
		echo "building jaeger $(JAEGER_VERSION) (a few minutes)"; mkdir -p $(BIN); \
		dir=$$(GOWORK=off GOFLAGS=-mod=mod $(GO) mod download -json $(JAEGER_MOD)@$(JAEGER_VERSION) | sed -n 's/^\t"Dir": "\(.*\)",$$/\1/p'); \
		cd "$$dir" && GOWORK=off CGO_ENABLED=0 $(GO) build -trimpath \
			-ldflags '-s -w -X $(JAEGER_MOD)/internal/version.latestVersion=$(JAEGER_VERSION)' -o $(BIN)/jaeger ./cmd/jaeger; }

# make images-tracing: make images, and splitlet/jaeger:dev (make
# image-jaeger alone), which make images and make e2e leave out: building
# Jaeger takes minutes. JAEGER_UI_ASSETS=<built jaeger-ui> puts the real UI
# in the image (docs/experiments.md).
images-tracing: images image-jaeger

image-jaeger: jaeger
	@hack/images.sh $(BIN) jaeger

# make jsprober-deps: examples/jsprober's node_modules, exactly as its
# package-lock.json pins them (needs node and npm, and the npm registry).
jsprober-deps:
	npm ci --prefix examples/jsprober --no-audit --no-fund

vet:
	$(GO) vet $(PKGS)
	@unformatted=$$(gofmt -l $(MODULES) hack); if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi

clean:
	rm -rf $(BIN)
