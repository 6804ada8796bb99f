# siteops — build, test and run the operator and CLI.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
export GOTOOLCHAIN := go1.27.3
# One build configuration for everything: the static, path-free binaries of the images, vet and
# the tests share one build cache, so a cold run compiles the dependencies once, not twice.
export CGO_ENABLED := 0
export GOFLAGS := -trimpath $(GOFLAGS)

CACHE_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/siteops
export KUBEBUILDER_ASSETS ?= $(CACHE_DIR)/bin
TOOLS := go tool -modfile=hack/tools/go.mod
BIN := bin
TEST_PARALLEL ?= 2
TEST_TIMEOUT ?= 30m

.PHONY: all build image image-binaries image-push registry-set install node-tools e2e test test-tools test-deps unit lint vet generate manifests check-manifests docs bench demo soak clean

all: build

## build: the manager and the CLI into ./bin
build: generate
	go build -o $(BIN)/siteops-manager ./cmd/siteops-manager
	go build -o $(BIN)/siteops ./cmd/siteops

# The images are tagged with the chart's appVersion: the chart's default image tag. The binaries
# keep their Go build IDs (reproducible with -trimpath), so go build relinks only what changed.
VERSION ?= $(shell sed -n 's/^appVersion: *"*\([^"]*\)"*/\1/p' charts/siteops/Chart.yaml)
STATIC_BUILD := GOOS=linux GOARCH=amd64 go build -buildvcs=false \
	-ldflags '-s -w -X github.com/siteops/siteops/internal/version.Version=$(VERSION)'

## image: reproducible OCI images of the manager and the site runtime into bin/images (docker-archive tarballs for ctr images import / docker load)
image: image-binaries
	go run ./hack/image --version $(VERSION) --bin-dir $(BIN)/linux-amd64 --out $(BIN)/images

# The static linux/amd64 binaries the images hold.
image-binaries:
	$(STATIC_BUILD) -o $(BIN)/linux-amd64/siteops-manager ./cmd/siteops-manager
	$(STATIC_BUILD) -o $(BIN)/linux-amd64/siteops ./cmd/siteops

## image-push: the images (written to bin/images too), pushed to REGISTRY (host[:port][/prefix]) with the docker config's credentials; INSECURE=1 for plain HTTP
REGISTRY ?=
image-push: registry-set image-binaries
	go run ./hack/image --version $(VERSION) --bin-dir $(BIN)/linux-amd64 --out $(BIN)/images --push $(REGISTRY) $(if $(INSECURE),--insecure)

# Before anything is built.
registry-set:
	@[ -n "$(REGISTRY)" ] || { echo "set REGISTRY: make image-push REGISTRY=HOST[:PORT][/PREFIX]"; exit 2; }

## install: the CLI as siteops and kubectl-siteops (a kubectl plugin) into GOBIN
install: build
	install -m 0755 $(BIN)/siteops $$(go env GOPATH)/bin/siteops
	install -m 0755 $(BIN)/siteops $$(go env GOPATH)/bin/kubectl-siteops

## generate: deepcopy code from the API types
generate:
	$(TOOLS) controller-gen object:headerFile=hack/boilerplate.go.txt paths=./api/...

## manifests: CRDs, RBAC and webhook manifests from the code markers
manifests:
	$(TOOLS) controller-gen crd paths=./api/... output:crd:artifacts:config=config/crd/bases
	@# The Helm chart ships the same CRDs and webhook configurations.
	mkdir -p charts/siteops/crds charts/siteops/files/rbac
	rm -f charts/siteops/crds/*.yaml && cp config/crd/bases/*.yaml charts/siteops/crds/
	cp config/webhook/manifests.yaml charts/siteops/files/webhooks.yaml
	cp config/rbac/tenant_roles.yaml charts/siteops/files/tenant-roles.yaml
	@# RBAC: one rules file per part, from that part's markers only, so a part that is switched
	@# off gets no permissions. The chart renders its roles from these files, and hack/rbacgen
	@# writes config/'s roles from the same files (config/rbac/<part>_role.yaml,
	@# config/selfsigned/webhookcert_role.yaml).
	for part in decofile tenant mirror webhookcert; do \
	  $(TOOLS) controller-gen rbac:roleName=siteops-$$part paths=./internal/$$part/... output:rbac:stdout > charts/siteops/files/rbac/$$part.yaml; \
	done
	go run ./hack/rbacgen

## docs: write the generated references again (API fields, CLI commands, manager flags, metrics, RBAC); the tests fail while they are stale
docs: manifests
	go test ./config/crd -run TestAPIReferenceCurrent -update
	go test ./internal/cli -run TestCLIReferenceCurrent -update
	go test ./charts -run 'TestOperationsDocCurrent|TestRBACDocsCurrent' -update

## check-manifests: fail when generated code or manifests are stale
check-manifests: generate manifests
	@git diff --exit-code -- api config charts || { echo "generated files are stale: run 'make generate manifests' and commit"; exit 1; }
	@untracked=$$(git ls-files --others --exclude-standard -- config/crd/bases config/rbac charts/siteops/crds charts/siteops/files); \
	  [ -z "$$untracked" ] || { echo "generated files are not committed: $$untracked"; exit 1; }

## test-deps: Debian packages the tests use (installed when missing and running as root)
test-deps:
	@hack/install-debian-packages.sh redis-server redis-sentinel git brotli ca-certificates graphviz gpg openssh-client chromium

## test-tools: kube-apiserver, etcd and versitygw built once into $(CACHE_DIR)/bin
test-tools:
	@hack/build-test-tools.sh >/dev/null

## node-tools: also kubelet, kube-scheduler, kube-controller-manager, containerd, runc and the CNI plugins (a real node)
node-tools: test-tools
	@hack/install-debian-packages.sh libseccomp-dev pkg-config iptables conntrack iproute2 procps
	@hack/build-test-tools.sh --node >/dev/null

## test: set up everything the tests need, then run every test
# vet has run every analyzer over the tests already: go test's own vet pass would repeat a part.
# go test starts packages in the order given: the longest go first, so the run does not end
# with one of them running alone.
# Test binaries link without DWARF (-w): a quarter to a third less link CPU for each of some 75
# binaries (three measured); stack traces and profiles do not need it.
SLOW_TEST_PKGS := ./test/soak/ ./test/e2e/ ./internal/mirror/ ./internal/tenant/provision/ ./internal/decofile/controller/ ./test/memory/
test: test-deps test-tools node-tools image check-manifests vet
	go test -vet=off -ldflags=-w -p $(TEST_PARALLEL) -timeout $(TEST_TIMEOUT) $(SLOW_TEST_PKGS) ./...

## e2e: only the real-node end-to-end tests (the chart on a node, `dev up --node`), verbose
e2e: test-deps test-tools node-tools image
	go test -count=1 -timeout 20m -run 'TestChartOnNode|TestDevUpNode' -v ./test/e2e/ ./cmd/siteops/

## soak: the chaos soak on a real node for SOAK_DURATION (default 60m), 20 tenants, a fault every 50 s; the report goes to .siteops/soak/<seed>/report.json
SOAK_DURATION ?= 60m
SOAK_SEED ?= $(shell date +%s)
soak: test-deps test-tools node-tools image
	go test -count=1 -timeout 180m -run TestSoak -v ./test/soak/ -args -soak.duration=$(SOAK_DURATION) -soak.seed=$(SOAK_SEED) \
	  -soak.tenants=20 -soak.fault-gap=50s -soak.outage=30s -soak.report=$(CURDIR)/.siteops/soak/$(SOAK_SEED)

## unit: tests that need no server (short mode)
unit:
	go test -short ./...

vet:
	go vet ./...

## lint: golangci-lint with the committed configuration
lint:
	$(TOOLS) golangci-lint run ./...

## bench: every benchmark, with the figures the issues ask for
bench: test-deps test-tools
	go test -run '^$$' -bench . -benchmem -timeout 30m ./...

## demo: bring up the whole system locally and show each part working
# As root it also builds the node and the images, and the site pods are real pods on a node;
# otherwise (or when the node's programs or images are missing) it says so and runs them as
# local processes.
DEMO_NODE_DEPS := $(if $(filter 0,$(shell id -u)),node-tools image)
demo: test-deps test-tools build $(DEMO_NODE_DEPS)
	$(BIN)/siteops dev demo --node=auto

clean:
	rm -rf $(BIN) .siteops
