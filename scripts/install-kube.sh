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
kube=k8s.io/kubernetes
kube_version=v1.37.2
staging=v0.37.2 # the release of Kubernetes' staging modules that goes with it
etcd=go.etcd.io/etcd/server/v3
etcd_version=v3.7.3
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

# Read the whole output before matching: with pipefail, `grep -q` closing the
# pipe early can kill the program with SIGPIPE and fail the script.
have() { [ -x "$1" ] && "$1" --version 2>&1 || true; }
want_kube="Kubernetes ${kube_version}"
want_etcd="etcd Version: ${etcd_version#v}"
report() {
  echo "install-kube: kube-apiserver $(have "$dir/kube-apiserver"), kube-controller-manager $(have "$dir/kube-controller-manager"), $(have "$dir/etcd" | sed -n 1p) in $dir"
}
# The Kubernetes programs missing or of another version.
kube_programs=()
for prog in kube-apiserver kube-controller-manager; do
  [ "$(have "$dir/$prog")" = "$want_kube" ] || kube_programs+=("$prog")
done
if [ ${#kube_programs[@]} -eq 0 ]; then
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
report
