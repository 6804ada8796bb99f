#!/usr/bin/env bash
# Builds the real servers the tests need (kube-apiserver, etcd, versitygw) from the Go module
# proxy into a per-machine cache, once. A warm run only checks version stamps.
set -euo pipefail

export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"
KUBERNETES_VERSION="${KUBERNETES_VERSION:-v1.37.2}"
STAGING_VERSION="${STAGING_VERSION:-v0.37.2}"
ETCD_VERSION="${ETCD_VERSION:-v3.7.3}"
VERSITYGW_VERSION="${VERSITYGW_VERSION:-v1.8.0}"
CACHE_DIR="${SITEOPS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/siteops}"
BIN_DIR="$CACHE_DIR/bin"
mkdir -p "$BIN_DIR"

log() { printf 'test-tools: %s\n' "$*" >&2; }

# built NAME VERSION: true when BIN_DIR holds NAME built at VERSION.
built() { [[ -x "$BIN_DIR/$1" && "$(cat "$BIN_DIR/.$1.version" 2>/dev/null)" == "$2" ]]; }

# build_in_wrapper NAME VERSION MODULE PACKAGE [LDFLAGS] [REPLACES]: builds PACKAGE of MODULE@VERSION
# inside a throw-away module, so replace directives can pin modules the upstream go.mod leaves at v0.0.0.
build_in_wrapper() {
  local name=$1 version=$2 module=$3 package=$4 ldflags=${5:-} replaces=${6:-}
  built "$name" "$version" && return 0
  log "building $name $version (first run on this machine; cached afterwards)"
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  cat >"$work/go.mod" <<MOD
module siteops.local/build/$name

go 1.26.0

require $module $version
$replaces
MOD
  printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$package" >"$work/tools.go"
  (cd "$work" && go mod tidy >/dev/null 2>&1 || go mod tidy)
  (cd "$work" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w $ldflags" -o "$BIN_DIR/$name.tmp" "$package")
  mv "$BIN_DIR/$name.tmp" "$BIN_DIR/$name"
  echo "$version" >"$BIN_DIR/.$name.version"
}

kube_replaces() {
  local gomod
  gomod=$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
  echo "replace ("
  sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\t\1 => \1 '"$STAGING_VERSION"'#p' "$gomod"
  echo ")"
}

if ! built kube-apiserver "$KUBERNETES_VERSION"; then
  minor=${KUBERNETES_VERSION#v1.}; minor=${minor%%.*}
  build_in_wrapper kube-apiserver "$KUBERNETES_VERSION" k8s.io/kubernetes k8s.io/kubernetes/cmd/kube-apiserver \
    "-X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean" \
    "$(kube_replaces)"
fi
build_in_wrapper etcd "$ETCD_VERSION" go.etcd.io/etcd/server/v3 go.etcd.io/etcd/server/v3
build_in_wrapper versitygw "$VERSITYGW_VERSION" github.com/versity/versitygw github.com/versity/versitygw/cmd/versitygw

echo "$BIN_DIR"
