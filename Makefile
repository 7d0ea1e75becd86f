# cellkit — run `make` or `make help` for the targets.
SHELL := /usr/bin/env bash
.DEFAULT_GOAL := help

BIN        := $(CURDIR)/bin
CONSUL     := $(BIN)/consul
STATICCHECK_VERSION := v0.8.2
CONTROLLER_GEN_VERSION := v0.23.0
ERRCHECK_VERSION    := v1.30.0
MISSPELL_VERSION    := v0.8.0
# A count of executions, not a duration: with a duration Go 1.26's fuzz
# coordinator can fail a target with a bare "context deadline exceeded" at the
# end of the time.
FUZZTIME   ?= 50000x
BENCHTIME  ?= 1s
BENCHCOUNT ?= 1
PKGS       ?= ./...
# The modules of third_party (./... does not reach them): the gnet fork,
# upstream's release plus cellkit's series, with upstream's tests and
# cellkit's, and cellkit's io_uring module. Upstream's server and client
# tests run in their level-triggered mode only, in a second run
# (GNET_LATE): their other modes repeat loops the series does not reach
# (edge-triggered loops do not batch) over other listener set-ups, and
# TestServeGC measures the connection matrix, which it does not touch
# (third_party/gnet/README.cellkit.md, with times). TestClosedWakeUp runs
# late too: it binds :9999 without SO_REUSEADDR, which TestClientReadOnEOF
# leaves in TIME_WAIT for a minute. TestByteSlice runs without -race:
# it expects sync.Pool to hand back the array just put, and under the race
# detector sync.Pool drops a quarter of its Puts on purpose.
GNET_FIRST := -skip '^(TestServer|TestClient|TestServeGC|TestClosedWakeUp|TestByteSlice)$$'
GNET_LATE  := -run '^(TestServer|TestClient|TestClosedWakeUp)$$/^poll-LT$$'
GNET_NORACE := -run '^TestByteSlice$$' ./pkg/pool/byteslice
# Packages whose tests take the machine for themselves, run one at a time
# after the rest: whole local stacks under load, a browser, and a
# Kubernetes node (which sets the host's bridge netfilter sysctls and
# iptables rules the network labs' tests must not share).
STACK_PKGS := internal/rollout internal/console internal/kubenode
DRILL_RATE ?= 100
# The handoff drill's rate: one the 2-core test machine carries with the
# whole stack on it, with headroom (docs/drills.md); more on bigger ones.
HANDOFF_RATE ?= 400
export CELLKIT_CONSUL := $(CONSUL)

.PHONY: help
help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[1m%-8s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## compile every package and command into ./bin (the Terraform provider as bin/terraform-provider-cellkit; nats-server, the version cells embed, for the network lab; bin/faults/cell, a cell with fault hooks, for the poison drill, bin/faults/cell-{failing,slow,crashing,unstable,tailslow}, bad releases for the rollout drill, and bin/next/router, another build of the router for the handoff drill's upgrade)
	go build ./...
	@cmds=$$(go list -f '{{if eq .Name "main"}}{{.ImportPath}}{{end}}' ./... | grep -v '/terraform$$'); \
	if [ -n "$$cmds" ]; then GOBIN=$(BIN) go install $$cmds; fi
	go build -o $(BIN)/terraform-provider-cellkit ./terraform
	go build -tags faults -o $(BIN)/faults/cell ./cell
	@for r in failing slow crashing unstable tailslow; do \
	  go build -tags faults -ldflags "-X github.com/cellkit/cellkit/internal/pipeline.release=$$r" -o $(BIN)/faults/cell-$$r ./cell || exit 1; \
	done
	go build -ldflags "-X github.com/cellkit/cellkit/internal/buildinfo.version=next" -o $(BIN)/next/router ./router
	go build -o $(BIN)/nats-server github.com/nats-io/nats-server/v2

# The cell release before the ledger (docs/decisions/one-write-intake.md):
# the release drill's stack starts on it and is upgraded to this tree's.
PREVIOUS_CELL ?= 272cd3f

.PHONY: build-previous
build-previous: ## bin/previous/cell: the cell of PREVIOUS_CELL, a commit of this repository's history (the release before the ledger), for the release drill's upgrade
	@rm -rf $(BIN)/previous/src && mkdir -p $(BIN)/previous/src
	git archive $(PREVIOUS_CELL) | tar -x -C $(BIN)/previous/src
	cd $(BIN)/previous/src && go build -buildvcs=false -ldflags "-X github.com/cellkit/cellkit/internal/buildinfo.version=$(PREVIOUS_CELL)" -o ../cell ./cell
	@rm -rf $(BIN)/previous/src

.PHONY: run
run: build ## the local stack in the foreground: agency simulator, 4 cells, router on :8080, data in ./var (Ctrl-C stops it)
	$(BIN)/cellctl dev up --foreground

.PHONY: run-tls
run-tls: build ## `make run` on TLS: certificates in ./var/certs (made once), mutual TLS to the cells, https to the router
	$(BIN)/cellctl dev up --foreground --tls

NET_CELLS  ?= 2

.PHONY: net-up
net-up: tools build ## as root: the stack on a network lab, a namespace per process (NET_CELLS cells, default 2), data in ./var/net
	$(BIN)/loadtest net up --dir var/net --cells $(NET_CELLS)

.PHONY: net-down
net-down: ## stop the stack of make net-up and remove its namespaces, veths and bridge (also after a crash)
	$(BIN)/loadtest net down --dir var/net

# A single-node Kubernetes on this machine: its data, and the Debian
# packages its node runs on.
CLUSTER_DIR  ?= /var/lib/cellkit-cluster
CLUSTER_DEBS := containerd runc containernetworking-plugins iptables conntrack

.PHONY: cluster-tools
cluster-tools: tools ## as root: what make cluster runs besides make tools': kube-scheduler, kube-proxy, the kubelet and kubectl built like kube-apiserver, CoreDNS and Kubernetes' pause image built from the module proxy (bin/kube), and Debian's containerd, runc, CNI plugins, iptables and conntrack
	@missing=$$(for p in $(CLUSTER_DEBS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed$$' || echo $$p; done); \
	if [ -n "$$missing" ]; then apt-get install -y --no-install-recommends $$missing; fi
	./scripts/install-kube.sh $(BIN)/kube --node

# The cells' JetStream nodes' image, for a cluster without a registry: the
# nats-server of go.mod, static, as cellkit/nats:VERSION.
NATS_MODULE  := github.com/nats-io/nats-server/v2
NATS_VERSION  = $(shell go list -m -f '{{.Version}}' $(NATS_MODULE))
NATS_TIME     = $(shell go list -m -f '{{.Time.Format "2006-01-02T15:04:05Z07:00"}}' $(NATS_MODULE))

.PHONY: cluster-images
cluster-images: images ## the images a cluster of this machine runs besides make images': cellkit/nats, the nats-server of go.mod built statically (bin/images/nats.tar); cellkit/cell:VERSION-fault-failing, the bad release of make drill-k8s (bin/faults/cell-failing's build, bin/images/cell-failing.tar)
	@mkdir -p $(BIN)/static/failing $(BIN)/images/failing
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) go build -trimpath -ldflags "-s -w" -o $(BIN)/static/nats $(NATS_MODULE)
	cd deploy/release && go run ./cmd/images --foreign --bin ../../bin/static --out ../../bin/images \
	  --version $(NATS_VERSION:v%=%) --revision $(NATS_VERSION) --created $(NATS_TIME) \
	  --source https://github.com/nats-io/nats-server --repo $(IMAGE_REPO) --arch $(IMAGE_ARCH) nats
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) go build -trimpath -buildvcs=true -tags faults \
	  -ldflags "-s -w -X github.com/cellkit/cellkit/internal/buildinfo.version=$(VERSION)-fault-failing -X github.com/cellkit/cellkit/internal/pipeline.release=failing" \
	  -o $(BIN)/static/failing/cell ./cell
	cd deploy/release && go run ./cmd/images --bin ../../bin/static/failing --out ../../bin/images/failing \
	  --faults --version $(VERSION)-fault-failing --repo $(IMAGE_REPO) --arch $(IMAGE_ARCH) cell
	mv $(BIN)/images/failing/cell.tar $(BIN)/images/cell-failing.tar

.PHONY: cluster
cluster: cluster-tools build cluster-images ## as root: a single-node Kubernetes on this machine (docs/kubernetes.md, "Try it on one machine"): etcd, the control plane, containerd, the kubelet, kube-proxy and CoreDNS as processes of this host, the project's images imported; data in CLUSTER_DIR; a second run starts only what is not running
	$(BIN)/loadtest cluster up --dir $(CLUSTER_DIR) --bin $(BIN)/kube --images $(BIN)/images --version $(VERSION)

.PHONY: cluster-stack
cluster-stack: cluster ## as root: cellkit on make cluster's node as the operator installs it: Consul (a process of this host behind Service consul/consul-server), the namespace, its Secrets and the map's agencies, then deploy/kubernetes/overlays/one-node (3 Cells of 3 instances, 3 routers, the agency simulator); waits until every cell serves and the routers answer through their Service
	$(BIN)/loadtest cluster stack --dir $(CLUSTER_DIR) --bin $(BIN) --overlay deploy/kubernetes/overlays/one-node

# The drills on the cluster, in this order: k8s-cell-delete deletes the
# cell k8s-cell-add made.
K8S_DRILLS ?= k8s-pod-delete k8s-nats-kill k8s-router-replace k8s-cell-add k8s-cell-delete k8s-release
K8S_DRILL_RATE ?= 25

.PHONY: drill-k8s
drill-k8s: cluster-stack ## as root: the drills on make cluster-stack's cluster (K8S_DRILLS: a cell's pod deleted, its JetStream node killed, a router pod replaced, a cell added and deleted through its Cell, a good release through every cell and a bad one halted in the canary by the operator) at K8S_DRILL_RATE/s (default 25) through the routers' Service; reports in var/drill/k8s/
	@mkdir -p var/drill/k8s; rc=0; \
	for d in $(K8S_DRILLS); do \
	  echo "== loadtest drill $$d"; \
	  $(BIN)/loadtest drill $$d --cluster-dir $(CLUSTER_DIR) --rate $(K8S_DRILL_RATE) \
	    --json var/drill/k8s/$$d.json --svg var/drill/k8s/$$d.svg || rc=1; \
	done; exit $$rc

.PHONY: cluster-down
cluster-down: ## as root: stop the cluster of make cluster and remove what it made (processes, pods, mounts, the bridge, iptables rules, cgroups; its logs stay in CLUSTER_DIR/logs)
	$(BIN)/loadtest cluster down --dir $(CLUSTER_DIR) --bin $(BIN)/kube

.PHONY: tools
tools: ## install the programs the tests need into ./bin (a real Consul agent, promtool and Prometheus, each built once; Debian's Chromium and playwright-core for the console's browser test; kube-apiserver, kube-controller-manager and etcd in bin/kube, each built once, for the tests against a real Kubernetes control plane)
	./scripts/install-consul.sh $(CONSUL)
	./scripts/install-prometheus.sh $(BIN)/promtool
	./scripts/install-browser.sh $(BIN)/browser
	./scripts/install-kube.sh $(BIN)/kube

# The images: the version the binaries print and the images are tagged with,
# the repository they are named in, the GOARCH they are built for.
# Read once per make run (a := variable): a file changed while make runs
# must not give the images one version and the cluster up another.
ifeq ($(origin VERSION),undefined)
VERSION    := $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
endif
IMAGE_REPO ?= cellkit
IMAGE_ARCH ?= $(shell go env GOARCH)
IMAGES     := router cell cellctl agencysim operator

.PHONY: images
images: ## OCI images of the programs (no Docker): static binaries in ./bin/static, one tar per program in ./bin/images, both an OCI layout and a docker-archive (IMAGE_REPO, VERSION, IMAGE_ARCH)
	@mkdir -p $(BIN)/static $(BIN)/images
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) go build -trimpath -buildvcs=true \
	  -ldflags "-s -w -X github.com/cellkit/cellkit/internal/buildinfo.version=$(VERSION)" \
	  -o $(BIN)/static/ $(addprefix ./,$(IMAGES))
	cd deploy/release && go run ./cmd/images --bin ../../bin/static --out ../../bin/images \
	  --version $(VERSION) --repo $(IMAGE_REPO) --arch $(IMAGE_ARCH) $(IMAGES)

.PHONY: test
test: tools build images ## run the whole test suite with -race (runs `make tools`, `make build` and `make images`: some tests run the programs in ./bin, deploy/release's tests read the images)
	go test -race -timeout 20m -count 1 $$(go list $(PKGS) | grep -v $(foreach p,$(STACK_PKGS),-e '/$(p)$$'))
	@# Whole local stacks under load, a browser, a Kubernetes node: one package
	@# at a time after the rest (beside them their load failed the router's timing tests).
	go test -race -timeout 10m -count 1 -p 1 $(addprefix ./,$(STACK_PKGS))
	cd deploy/release && go test -race -timeout 10m -count 1 ./...
	cd third_party/gnet && go test -race -timeout 10m -count 1 $(GNET_FIRST) ./... && go test -race -timeout 10m -count 1 $(GNET_LATE) . \
	  && go test -timeout 1m -count 1 $(GNET_NORACE)
	cd third_party/uring && go test -race -timeout 10m -count 1 ./...

# controller-gen writes the Cell CRD, its deep copies and the operator's
# RBAC from internal/operator's types and markers; `make lint` fails when
# what is committed is not what it writes.
CONTROLLER_GEN := go run sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
GENERATED      := internal/operator/api deploy/kubernetes/operator/crd deploy/kubernetes/operator/rbac

.PHONY: generate
generate: ## the Cell CRD (deploy/kubernetes/operator/crd), its Go deep copies and the operator's RBAC (deploy/kubernetes/operator/rbac), from internal/operator's types and markers (controller-gen)
	$(CONTROLLER_GEN) object paths=./internal/operator/api/...
	$(CONTROLLER_GEN) crd:maxDescLen=400 rbac:roleName=cellkit-operator paths=./internal/operator/... \
	  output:crd:artifacts:config=deploy/kubernetes/operator/crd output:rbac:artifacts:config=deploy/kubernetes/operator/rbac

.PHONY: linters check lint
linters: ## install staticcheck, errcheck and misspell into bin/ (from the Go module proxy)
	GOBIN=$(BIN) go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	GOBIN=$(BIN) go install github.com/kisielk/errcheck@$(ERRCHECK_VERSION)
	GOBIN=$(BIN) go install github.com/golangci/misspell/cmd/misspell@$(MISSPELL_VERSION)

check: tools linters ## the fast loop while changing a package (under 3 minutes warm): go vet, staticcheck and errcheck, then every package's tests with -short, cached by go test — what needs a local stack, a browser, a Kubernetes API server or the programs in bin/ skips itself; `make test` stays the whole suite
	go vet ./...
	$(BIN)/staticcheck ./...
	$(BIN)/errcheck -ignoretests -exclude .errcheck-exclude ./...
	go test -short -timeout 10m $(PKGS)
	cd third_party/gnet && go vet ./... && go test -short -timeout 10m $(GNET_FIRST) ./... && go test -short -timeout 10m $(GNET_LATE) . \
	  && go test -short -timeout 1m $(GNET_NORACE)
	cd third_party/uring && go vet ./... && go test -short -timeout 10m ./...

lint: linters ## go vet, staticcheck and errcheck (the main module and deploy/release; go vet alone for third_party's modules, upstream's code mostly; errcheck's reasoned exclusions in .errcheck-exclude), misspell over the Go files and the docs, and what `make generate` writes committed
	go vet ./...
	$(BIN)/staticcheck ./...
	$(BIN)/errcheck -ignoretests -exclude .errcheck-exclude ./...
	cd deploy/release && go vet ./... && $(BIN)/staticcheck ./... && $(BIN)/errcheck -ignoretests -exclude ../../.errcheck-exclude ./...
	cd third_party/gnet && go vet ./...
	cd third_party/uring && go vet ./...
	git ls-files '*.go' '*.md' | xargs $(BIN)/misspell -error
	$(MAKE) generate
	@git diff --exit-code -- $(GENERATED) || { echo "make generate changed the files above: commit what it writes" >&2; exit 1; }

NET_DRILLS ?= host-loss freeze-instance cut-router cut-consul-router cut-consul-cell cut-nats cut-agency quota-routers
# The lab runs 25 processes (9 JetStream nodes, 9 cell instances) on the
# machine's cores: on 2 cores it saturates at 100/s (0.1 % idle, baseline
# p99 in seconds), so its drills run at half make drill's rate.
NET_DRILL_RATE ?= 50
# The lab's stack (stores, logs) on a tmpfs where there is one: the shared
# disk's syncs stall every cell at once (docs/drills.md).
NET_STACK ?= $(if $(wildcard /dev/shm),/dev/shm/cellkit-drill-net,var/drill/net/stack)

.PHONY: drill-net
drill-net: tools build ## as root: the partition drills (host-loss of the node leading the cell's streams, freeze-instance, the cuts, one client's quota across the routers through a router's death and a registry cut) on a network lab of 3 cells of 3 instances each, brought up once (NET_DRILLS, NET_DRILL_RATE, default 50/s); reports in var/drill/net/, the lab's stack in NET_STACK (/dev/shm/cellkit-drill-net)
	@mkdir -p var/drill/net; rc=0; \
	$(BIN)/loadtest net down --dir $(NET_STACK) >/dev/null 2>&1 || true; \
	$(BIN)/loadtest net up --dir $(NET_STACK) --cells 3 --instances 3 >var/drill/net/up.txt || { cat var/drill/net/up.txt; exit 1; }; \
	for d in $(NET_DRILLS); do \
	  echo "== loadtest drill $$d"; extra=""; \
	  if [ "$$d" = host-loss ]; then extra="--instance leader"; fi; \
	  $(BIN)/loadtest drill $$d --net-dir $(NET_STACK) --bin $(BIN) --rate $(NET_DRILL_RATE) $$extra \
	    --json var/drill/net/$$d.json --svg var/drill/net/$$d.svg || rc=1; \
	done; \
	$(BIN)/loadtest net down --dir $(NET_STACK) >/dev/null; exit $$rc

.PHONY: bench
bench: ## run the benchmarks with -benchmem (BENCHTIME, BENCHCOUNT, PKGS to narrow)
	go test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -count $(BENCHCOUNT) $(PKGS)

.PHONY: bench-router
bench-router: ## the router side by side with direct calls, NGINX, HAProxy and httputil, and each proxy's system calls per request (installs nginx-light, haproxy, wrk, perf; ROUNDS, DURATION, RATE, PAIR_ROUNDS, SYSCALLS)
	./scripts/bench-router.sh

.PHONY: bench-mapswap
bench-mapswap: ## the router's latency at RATE (2000) req/s with the map changing every EVERY (1s) beside the same load without (a map of CELLS, 1000, cells; ROUNDS, DURATION)
	./scripts/bench-mapswap.sh

.PHONY: bench-ir
bench-ir: ## instructions per op of the map lookup benchmarks (valgrind: stable on a noisy machine)
	./scripts/instr-per-op.sh ./internal/slotmap Hash Lookup LookupOverride
	N1=10 N2=60 ./scripts/instr-per-op.sh ./internal/slotmap PlanDrain

.PHONY: bench-cell
bench-cell: ## the cell's benchmarks on each layout beside one synced JetStream publish per request: intake 202/s, its latency at 1,000/s, the pipeline at 2x the agency bound for 20 s (BENCH_DIR=/dev/shm: store off disk; BENCHCOUNT rounds)
	@# rounds of every variant in turn, not each variant's rounds together: the disk's fsync drifts over minutes, and a ratio is of one round
	for i in $$(seq $(BENCHCOUNT)); do CELLKIT_BENCH_DIR=$(BENCH_DIR) go test -run '^$$' -bench 'Intake$$' -benchtime 5s -count 1 -benchmem ./internal/cell/ || exit 1; done
	CELLKIT_BENCH_DIR=$(BENCH_DIR) go test -run '^$$' -bench 'IntakeLatency' -benchtime 1x -count $(BENCHCOUNT) ./internal/cell/
	CELLKIT_BENCH_DIR=$(BENCH_DIR) go test -run '^$$' -bench 'PipelineAgencyBound' -benchtime 1x -benchmem ./internal/cell/
	go test -run '^$$' -bench . -benchmem ./internal/inquiry/ ./internal/shed/ ./internal/pipeline/

.PHONY: fuzz
fuzz: ## run every fuzz target for FUZZTIME each (default 50000x executions; a duration like 10s also works)
	@set -e; for f in $$(git ls-files '*_test.go'); do \
	  for target in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
	    echo "fuzz ./$$(dirname $$f) $$target ($(FUZZTIME))"; \
	    go test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 5s ./$$(dirname $$f); \
	  done; \
	done

.PHONY: drill
drill: tools build build-previous ## as root: the chaos drills (kill, freeze: a cell SIGSTOPped for 20 s, disk-full: a cell's store on a 640 MiB tmpfs, 2m30s near full with Prometheus checking the alert, then filled for 15 s, drain, moves: users' inquiries moved with them by a weight, a drain, a removal and a drain whose source is killed mid-copy, every accepted inquiry read through the routers throughout, agency-slow at DRILL_RATE/s, default 100; agency-slow again at 250/s with a 5 s age budget, where the cells must shed; kill again with a real Prometheus checking the alerts; priority: high and normal lanes under overload, lane-aware cells beside lane-blind ones; poison: inquiries whose processing panics, contained to themselves, and one with Prometheus, whose alert must fire; release: the upgrade from the release before the ledger (bin/previous/cell) through every cell, then a failing, a slow, a crashing, an unstable and a slow-tail build and a refusing setting halted in the canary wave and rolled back, and last the release before the ledger, refused on the switched canary; handoff, plain and TLS: the router restarted and upgraded under HANDOFF_RATE/s, default 400, with no connection refused, each handoff's p99 held to A/A controls in the same run) on a fresh local stack each; reports in var/drill/
	@mkdir -p var/drill; rc=0; \
	for d in kill freeze drain moves agency-slow; do \
	  echo "== loadtest drill $$d"; \
	  $(BIN)/loadtest drill $$d --bin $(BIN) --rate $(DRILL_RATE) --baseline 10s --after 10s \
	    --json var/drill/$$d.json --svg var/drill/$$d.svg || rc=1; \
	done; \
	echo "== loadtest drill disk-full, with Prometheus: 2m30s at 88.5 % (CellkitStoreNearFull fires), then full for 15 s"; \
	$(BIN)/loadtest drill disk-full --bin $(BIN) --rate $(DRILL_RATE) --baseline 10s --after 10s \
	  --prometheus $(BIN)/prometheus --json var/drill/disk-full.json --svg var/drill/disk-full.svg || rc=1; \
	echo "== loadtest drill agency-slow, overloaded: 250/s, age budget 5s"; \
	$(BIN)/loadtest drill agency-slow --bin $(BIN) --rate 250 --age-budget 5s --baseline 8s --after 8s \
	  --json var/drill/agency-slow-overload.json --svg var/drill/agency-slow-overload.svg || rc=1; \
	echo "== loadtest drill kill, with Prometheus evaluating the alert rules"; \
	$(BIN)/loadtest drill kill --bin $(BIN) --rate $(DRILL_RATE) --baseline 10s --fault 45s --after 20s \
	  --prometheus $(BIN)/prometheus --json var/drill/kill-alerts.json --svg var/drill/kill-alerts.svg || rc=1; \
	echo "== loadtest drill priority: agencies ×10, 120/s, 20 % high; c2 and c4 shed lane-blind for comparison"; \
	$(BIN)/loadtest drill priority --bin $(BIN) --rate 120 --users 1000 --age-budget 10s --baseline 10s --fault 40s \
	  --json var/drill/priority.json --svg var/drill/priority.svg || rc=1; \
	echo "== loadtest drill poison: 20 inquiries that panic the pipeline, for users of c2, under load"; \
	$(BIN)/loadtest drill poison --bin $(BIN) --rate $(DRILL_RATE) --baseline 10s --fault 10s --after 10s \
	  --json var/drill/poison.json --svg var/drill/poison.svg || rc=1; \
	echo "== loadtest drill poison: one inquiry that panics, with Prometheus: CellkitInquiryPanics fires on it"; \
	$(BIN)/loadtest drill poison --bin $(BIN) --rate $(DRILL_RATE) --poison 1 --baseline 5s --fault 5s --after 10s \
	  --prometheus $(BIN)/prometheus --json var/drill/poison-alert.json --svg var/drill/poison-alert.svg || rc=1; \
	echo "== loadtest drill release: eight rollouts (c2 the canary, then the rest; bakes of 20 s), the stack started on bin/previous/cell: the upgrade to this tree's cell through every cell, then a failing, a slow, a crashing, an unstable and a slow-tail build and a refusing setting (depth-limit=1), each halted in the canary and rolled back, and last the release before the ledger, refused"; \
	$(BIN)/loadtest drill release --bin $(BIN) --rate $(DRILL_RATE) --baseline 10s --after 5s \
	  --json var/drill/release.json --svg var/drill/release.svg || rc=1; \
	echo "== loadtest drill handoff: $(HANDOFF_RATE) req/s (90 % status reads, half on kept-alive connections); the router restarted three times, upgraded to bin/next/router, then given a successor that cannot start; each judged against A/A windows with nothing replaced"; \
	$(BIN)/loadtest drill handoff --bin $(BIN) --rate $(HANDOFF_RATE) --baseline 15s --after 5s \
	  --json var/drill/handoff.json --svg var/drill/handoff.svg || rc=1; \
	echo "== loadtest drill handoff on TLS: the same over HTTPS (a tenth of the requests on new connections: TLS twice), session tickets carried over"; \
	$(BIN)/loadtest drill handoff --tls --new-conn-share 0.1 --bin $(BIN) --rate $(HANDOFF_RATE) --baseline 15s --after 5s \
	  --json var/drill/handoff-tls.json --svg var/drill/handoff-tls.svg || rc=1; \
	exit $$rc

.PHONY: fmt
fmt: ## gofmt every Go file
	gofmt -w $$(git ls-files '*.go')

.PHONY: clean
clean: ## remove ./bin and ./var
	rm -rf $(BIN) var
