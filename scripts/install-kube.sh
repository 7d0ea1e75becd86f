#!/usr/bin/env bash
# install-kube.sh [DIR] — a real Kubernetes control plane for the tests
# (internal/kubetest, controller-runtime's envtest): kube-apiserver and
# kube-controller-manager v1.37.2 (its StatefulSet controller and garbage
# collector, for kubetest.WithControllers) and etcd v3.7.3, all built from
# the Go module proxy into DIR (default bin/kube).
#
# None can be `go install`ed: each main module's go.mod replaces the
# modules of its own repository with ./staging/... or ../... directories that
# the module zip does not contain. Each of those modules is published on its
# own, so a go.work that `use`s the downloaded module and replaces every one
# of them (the list is read from that go.mod, not written here) with its
# release of the same version builds the same program: Kubernetes' 33 staging
# modules (k8s.io/api, apimachinery, apiserver, client-go, component-base,
# ...) at v0.37.2, etcd's api, client and pkg modules at v3.7.3. The version
# a Kubernetes release build stamps is stamped here too, so that
# `kube-apiserver --version` and `kube-controller-manager --version` print
# `Kubernetes v1.37.2` (envtest and clients read it from /version). Both
# Kubernetes programs come from the same module and workspace, in one go
# build when both are missing. The project's go.mod and go.sum are never touched.
#
# Why not Debian's etcd (etcd-server, 3.4.23 in bookworm): kube-apiserver
# v1.37.2 starts against it and serves create, list, CRDs and watches from a
# known resource version, but it holds that etcd to lack a sound
# RequestWatchProgress (3.4.31 and 3.5.13 fixed it), so its watch cache can
# never learn it is current while a resource is quiet: a watch without a
# resource version ("from now", as `kubectl get -w` asks) ends after 3 s with
# 504 "Too large resource version", and a streaming list (sendInitialEvents,
# which client-go's informers try first) is refused with 500. TestCluster in
# internal/kubetest fails on both against 3.4.23 and passes against this
# build. etcd v3.7 is what Kubernetes 1.37 runs (its build/dependencies.yaml;
# kubeadm takes 3.5.24 at least).
#
# Takes ~19 minutes on the 2-core machine with empty Go caches while other
# builds share it (measured with empty GOCACHE and GOMODCACHE: kube-apiserver
# 16m35s and 18m20s at load averages 5-8, 17 CPU minutes each, so about half
# that on two idle cores; etcd 1m54s), seconds once the Go build cache is
# warm. kube-controller-manager adds 10m10s (13 CPU minutes) after a
# kube-apiserver build with the Go caches that build left: most of its
# packages (the controllers, volume plugins, cloud-provider, kubelet's
# client side) are its own. Idempotent: does nothing but check when the
# three binaries of these versions are there, and builds only those missing.
set -euo pipefail
dir=${1:-bin/kube}
mode=${2:-} # --node: also what a cluster of this machine runs (make cluster-tools)
kube=k8s.io/kubernetes
kube_version=v1.37.2
staging=v0.37.2 # the release of Kubernetes' staging modules that goes with it
etcd=go.etcd.io/etcd/server/v3
etcd_version=v3.7.3
coredns=github.com/coredns/coredns
coredns_version=v1.15.0
pause_version=3.10.2 # build/pause/Makefile's TAG in that Kubernetes release
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

# Read the whole output before matching: with pipefail, `grep -q` closing the
# pipe early can kill the program with SIGPIPE and fail the script.
have() {
  [ -x "$1" ] || return 0
  case "$1" in
    */kubectl) "$1" version --client 2>&1 | sed -n 's/^Client Version: /Kubernetes /p' || true ;;
    *) "$1" --version 2>&1 || true ;;
  esac
}
want_kube="Kubernetes ${kube_version}"
want_etcd="etcd Version: ${etcd_version#v}"
programs=(kube-apiserver kube-controller-manager)
[ "$mode" = --node ] && programs+=(kube-scheduler kube-proxy kubelet kubectl)
report() {
  local p line=""
  for p in "${programs[@]}"; do line+="$p $(have "$dir/$p"), "; done
  echo "install-kube: ${line}$(have "$dir/etcd" | sed -n 1p) in $dir"
  if [ "$mode" = --node ]; then
    echo "install-kube: $(have "$dir/coredns" | sed -n 1p), pause ${pause_version} image $( [ -f "$dir/pause.tar" ] && echo "$dir/pause.tar" || echo missing)"
  fi
}
# The Kubernetes programs missing or of another version.
kube_programs=()
for prog in "${programs[@]}"; do
  [ "$(have "$dir/$prog")" = "$want_kube" ] || kube_programs+=("$prog")
done
node_done() {
  [ "$mode" != --node ] && return 0
  [ -f "$dir/pause.tar" ] && [ -f "$dir/pause.version" ] && [ "$(cat "$dir/pause.version")" = "$pause_version" ] || return 1
  case "$(have "$dir/coredns")" in "CoreDNS-${coredns_version#v}"*) return 0 ;; esac
  return 1
}
if [ ${#kube_programs[@]} -eq 0 ] && node_done; then
  case "$(have "$dir/etcd")" in
    "$want_etcd"*) report; exit 0 ;;
  esac
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# workspace NAME MODULE VERSION PATTERN RELEASE: downloads MODULE@VERSION
# outside any module (the project's go.mod and go.sum are never touched)
# and writes $work/NAME/go.work, which uses it and replaces each module its
# go.mod replaces by a directory matching PATTERN with that module at
# RELEASE. Prints the module's .info file (its release time).
workspace() {
  local name=$1 module=$2 version=$3 pattern=$4 release=$5 info src replaces
  mkdir -p "$work/$name"
  info=$(cd "$work/$name" && GOFLAGS=-mod=mod go mod download -json "${module}@${version}")
  src=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' <<<"$info")
  [ -n "$src" ] || { echo "install-kube: could not download ${module} ${version}" >&2; exit 1; }
  replaces=$(sed -n 's|^[[:space:]]*\([^[:space:]]*\) => '"$pattern"'.*|\t\1 => \1 '"$release"'|p' "$src/go.mod")
  [ -n "$replaces" ] || { echo "install-kube: no replaces to $pattern in ${module} ${version}'s go.mod" >&2; exit 1; }
  {
    sed -n '/^go [0-9.]*$/p' "$src/go.mod"
    sed -n '/^godebug /p' "$src/go.mod" # a workspace takes its module's godebug only from go.work
    echo
    echo "use $src"
    echo
    echo "replace ("
    echo "$replaces"
    echo ")"
  } > "$work/$name/go.work"
  sed -n 's/^[[:space:]]*"Info": "\(.*\)",$/\1/p' <<<"$info"
}

# build NAME OUT LDFLAGS PKG...: builds the PKGs in the workspace NAME into
# OUT, a file for one package, a directory ending in / for several (each
# binary named for its package; one go build shares their common packages).
build() {
  local name=$1 out=$2 ldflags=$3
  shift 3
  (cd "$work/$name" && GOWORK="$work/$name/go.work" GOFLAGS= CGO_ENABLED=0 \
    go build -trimpath -ldflags="$ldflags" -o "$out" "$@")
}

if [ ${#kube_programs[@]} -gt 0 ]; then
  info=$(workspace kube "$kube" "$kube_version" '\./staging/' "$staging")
  # What hack/lib/version.sh stamps in a release build; the build date is
  # the release's own time from the module proxy, so the binary is
  # reproducible.
  built=$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "$info")
  minor=${kube_version#v*.}
  minor=${minor%%.*}
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=${kube_version} -X $pkg.gitMajor=${kube_version:1:1} -X $pkg.gitMinor=${minor}"
    ldflags+=" -X $pkg.gitCommit= -X $pkg.gitTreeState=clean -X $pkg.buildDate=${built:-1970-01-01T00:00:00Z}"
  done
  build kube "$dir/" "$ldflags" "${kube_programs[@]/#/${kube}/cmd/}"
fi

case "$(have "$dir/etcd")" in
  "$want_etcd"*) ;;
  *)
    # A link from an earlier install (Debian's etcd) is replaced, not
    # written through.
    rm -f "$dir/etcd"
    workspace etcd "$etcd" "$etcd_version" '\.\./' "$etcd_version" >/dev/null
    build etcd "$dir/etcd" "-s -w" "$etcd"
    ;;
esac

if [ "$mode" = --node ] && ! node_done; then
  # CoreDNS with the plugins a cluster's DNS needs (the kubernetes plugin,
  # forward, cache, health, ready, prometheus, errors, loop, log), built as
  # CoreDNS documents for a build with chosen plugins: a main package that
  # imports them and sets the directives' order, in a module of its own.
  mkdir -p "$work/coredns"
  cat > "$work/coredns/main.go" <<'GO'
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
)

// The order CoreDNS's plugin.cfg gives these plugins.
func init() {
	dnsserver.Directives = []string{"bind", "ready", "health", "prometheus", "errors", "log", "cache", "loop", "kubernetes", "forward"}
}

func main() { coremain.Run() }
GO
  (cd "$work/coredns" && GOFLAGS=-mod=mod go mod init cellkit.local/coredns >/dev/null 2>&1 &&
    GOFLAGS=-mod=mod go get "${coredns}@${coredns_version}" >/dev/null 2>&1 &&
    GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 &&
    CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=${coredns_version}" -o "$dir/coredns" .)

  # Kubernetes' pause, the pod sandbox containerd runs first in every pod,
  # compiled from its source in the Kubernetes module as its Makefile does
  # (gcc -Os -static), made an image by the project's images command (no
  # registry serves one here).
  info=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "${kube}@${kube_version}")
  src=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' <<<"$info")
  built=$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "$(sed -n 's/^[[:space:]]*"Info": "\(.*\)",$/\1/p' <<<"$info")")
  mkdir -p "$work/pause"
  gcc -Os -Wall -Werror -static -DVERSION="v${pause_version}-0" -o "$work/pause/pause" "$src/build/pause/linux/pause.c"
  here=$(pwd)
  (cd "$(dirname "$0")/../deploy/release" && go run ./cmd/images --foreign --bin "$work/pause" --out "$dir" \
    --version "$pause_version" --revision "$kube_version" --created "${built:-1970-01-01T00:00:00Z}" \
    --source https://github.com/kubernetes/kubernetes --repo cellkit pause >/dev/null)
  cd "$here"
  echo "$pause_version" > "$dir/pause.version"
fi
report
