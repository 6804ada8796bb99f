#!/usr/bin/env bash
# Builds the real servers the tests need (kube-apiserver, etcd, versitygw, Flux's
# source-controller and notification-controller) from the Go module proxy into a per-machine
# cache, once. A warm run only checks version stamps. With --node it
# also builds what a real node runs: kubelet, kube-scheduler, kube-controller-manager, kube-proxy,
# containerd (with ctr and the runc shim), runc, the CNI plugins, CoreDNS and the pause program,
# and the kubectl and helm that the Get started page's test runs.
set -euo pipefail

export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"
KUBERNETES_VERSION="${KUBERNETES_VERSION:-v1.37.2}"
STAGING_VERSION="${STAGING_VERSION:-v0.37.2}"
ETCD_VERSION="${ETCD_VERSION:-v3.7.3}"
VERSITYGW_VERSION="${VERSITYGW_VERSION:-v1.8.0}"
CONTAINERD_VERSION="${CONTAINERD_VERSION:-v2.4.2}"
RUNC_VERSION="${RUNC_VERSION:-v1.5.3}"
CNI_PLUGINS_VERSION="${CNI_PLUGINS_VERSION:-v1.10.0}"
COREDNS_VERSION="${COREDNS_VERSION:-v1.15.0}"
HELM_VERSION="${HELM_VERSION:-v3.22.0}"
FLUX_SOURCE_VERSION="${FLUX_SOURCE_VERSION:-v1.9.6}"
FLUX_NOTIFICATION_VERSION="${FLUX_NOTIFICATION_VERSION:-v1.9.3}"
NODE=false
[[ "${1:-}" == "--node" ]] && NODE=true
CACHE_DIR="${SITEOPS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/siteops}"
BIN_DIR="$CACHE_DIR/bin"
mkdir -p "$BIN_DIR"

log() { printf 'test-tools: %s\n' "$*" >&2; }

# built NAME VERSION: true when BIN_DIR holds NAME built at VERSION.
built() { [[ -x "$BIN_DIR/$1" && "$(cat "$(stamp "$1")" 2>/dev/null)" == "$2" ]]; }
# stamp NAME: the file recording the version NAME was built at.
stamp() { echo "$BIN_DIR/.${1//\//_}.version"; }

# build_in_wrapper NAME VERSION MODULE PACKAGE [LDFLAGS] [REPLACES]: builds PACKAGE of MODULE@VERSION
# inside a throw-away module, so replace directives can pin modules the upstream go.mod leaves at v0.0.0.
# BUILD_TAGS and BUILD_CGO (default 0) adjust the build.
build_in_wrapper() {
  local name=$1 version=$2 module=$3 package=$4 ldflags=${5:-} replaces=${6:-}
  built "$name" "$version" && return 0
  log "building $name $version (first run on this machine; cached afterwards)"
  local work
  work=$(mktemp -d)
  # Removed here, not by a RETURN trap: such a trap stays set and fires again, without $work,
  # when a later function returns.
  # shellcheck disable=SC2064
  trap "rm -rf '$work'" EXIT
  cat >"$work/go.mod" <<MOD
module siteops.local/build/$name

go 1.26.0

require $module $version
$replaces
MOD
  printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$package" >"$work/tools.go"
  # BUILD_SKIP_TIDY: the module proxy lacks modules only the upstream's tests use; the build
  # then resolves just what it compiles (-mod=mod).
  (cd "$work" && { go mod tidy >/dev/null 2>&1 || [[ -n "${BUILD_SKIP_TIDY:-}" ]] || go mod tidy; })
  (cd "$work" && CGO_ENABLED="${BUILD_CGO:-0}" go build -mod=mod -trimpath -tags "${BUILD_TAGS:-}" -ldflags "-s -w $ldflags" -o "$BIN_DIR/$name.tmp" "$package")
  mv "$BIN_DIR/$name.tmp" "$BIN_DIR/$name"
  echo "$version" >"$(stamp "$name")"
  rm -rf "$work"
  trap - EXIT
}

kube_replaces() {
  local gomod
  gomod=$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
  echo "replace ("
  sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\t\1 => \1 '"$STAGING_VERSION"'#p' "$gomod"
  echo ")"
}

# build_kube NAME: a Kubernetes component from the k8s.io/kubernetes wrapper module.
build_kube() {
  built "$1" "$KUBERNETES_VERSION" && return 0
  local minor=${KUBERNETES_VERSION#v1.}; minor=${minor%%.*}
  build_in_wrapper "$1" "$KUBERNETES_VERSION" k8s.io/kubernetes "k8s.io/kubernetes/cmd/$1" \
    "-X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean" \
    "$(kube_replaces)"
}

build_kube kube-apiserver
build_in_wrapper etcd "$ETCD_VERSION" go.etcd.io/etcd/server/v3 go.etcd.io/etcd/server/v3
build_in_wrapper versitygw "$VERSITYGW_VERSION" github.com/versity/versitygw github.com/versity/versitygw/cmd/versitygw
# flux_crds NAME MODULE VERSION: copies MODULE@VERSION's CRDs into BIN_DIR/NAME, once.
flux_crds() {
  local name=$1 module=$2 version=$3 dir
  [[ "$(cat "$(stamp "$name")" 2>/dev/null)" == "$version" ]] && return 0
  dir=$(go mod download -json "$module@$version" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
  rm -rf "${BIN_DIR:?}/$name" && mkdir -p "$BIN_DIR/$name"
  cp "$dir"/config/crd/bases/*.yaml "$BIN_DIR/$name/"
  chmod u+w "$BIN_DIR/$name"/*.yaml
  echo "$version" >"$(stamp "$name")"
}
# Flux's source-controller, for Decofiles that deliver a GitRepository's, OCIRepository's or
# Bucket's artifact. The go-digest replace is upstream's; fluxcd/pkg/artifact is pinned to the
# nearest release the module proxy serves.
flux_source_replaces="replace github.com/opencontainers/go-digest => github.com/opencontainers/go-digest v1.0.1-0.20220411205349-bde1400a84be
replace github.com/fluxcd/pkg/artifact => github.com/fluxcd/pkg/artifact v0.18.0"
BUILD_SKIP_TIDY=1 build_in_wrapper source-controller "$FLUX_SOURCE_VERSION" github.com/fluxcd/source-controller github.com/fluxcd/source-controller "" \
  "$flux_source_replaces"
flux_crds flux-source-crds github.com/fluxcd/source-controller "$FLUX_SOURCE_VERSION"
# Flux's notification-controller, for the --events-addr tests: v1.9.3 is the newest v1.9.x the
# module proxy serves. Its build module requires source-controller too, so the dependencies the
# two share (Kubernetes, controller-runtime, Flux's runtime) resolve to the same versions and
# are compiled once for both.
BUILD_SKIP_TIDY=1 build_in_wrapper notification-controller "$FLUX_NOTIFICATION_VERSION" github.com/fluxcd/notification-controller github.com/fluxcd/notification-controller "" \
  "require github.com/fluxcd/source-controller $FLUX_SOURCE_VERSION
$flux_source_replaces"
flux_crds flux-notification-crds github.com/fluxcd/notification-controller "$FLUX_NOTIFICATION_VERSION"

if $NODE; then
  # What a node needs to run a pod comes first; the scheduler and controller manager last.
  build_kube kubelet
  BUILD_TAGS=no_btrfs build_in_wrapper containerd "$CONTAINERD_VERSION" github.com/containerd/containerd/v2 github.com/containerd/containerd/v2/cmd/containerd
  BUILD_TAGS=no_btrfs build_in_wrapper ctr "$CONTAINERD_VERSION" github.com/containerd/containerd/v2 github.com/containerd/containerd/v2/cmd/ctr
  build_in_wrapper containerd-shim-runc-v2 "$CONTAINERD_VERSION" github.com/containerd/containerd/v2 github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
  # runc's namespace setup is C (cgo); seccomp filters come from Debian's libseccomp-dev.
  BUILD_CGO=1 BUILD_TAGS=seccomp build_in_wrapper runc "$RUNC_VERSION" github.com/opencontainers/runc github.com/opencontainers/runc
  mkdir -p "$BIN_DIR/cni"
  for p in main/bridge main/loopback ipam/host-local meta/portmap; do
    build_in_wrapper "cni/${p##*/}" "$CNI_PLUGINS_VERSION" github.com/containernetworking/plugins "github.com/containernetworking/plugins/plugins/$p"
  done
  # The pod sandbox's process (hack/pause): tiny and local, so rebuilt whenever its source changes.
  pause_src="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/pause"
  pause_sum=$(sha256sum "$pause_src/main.go" | cut -d' ' -f1)
  if ! built pause "$pause_sum"; then
    (cd "$pause_src" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$BIN_DIR/pause" .)
    echo "$pause_sum" >"$(stamp pause)"
  fi
  for c in kube-scheduler kube-controller-manager kube-proxy; do build_kube "$c"; done
  # Cluster DNS for the node's pods.
  build_in_wrapper coredns "$COREDNS_VERSION" github.com/coredns/coredns github.com/coredns/coredns
  # The commands docs/get-started.md runs against the node, as a reader would.
  build_kube kubectl
  build_in_wrapper helm "$HELM_VERSION" helm.sh/helm/v3 helm.sh/helm/v3/cmd/helm "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
fi

echo "$BIN_DIR"
