#!/usr/bin/env bash
# install-prometheus.sh [OUT] — build promtool and the Prometheus server from the
# Go module proxy into OUT's directory (default bin/promtool, and bin/prometheus
# next to it).
#
# Prometheus 3.16.0 is the Go module github.com/prometheus/prometheus v0.316.0;
# `go install PKG@VERSION` builds its commands outside any module, so the
# project's go.mod and go.sum are never touched. The module zip carries no
# compiled web UI (the release build embeds it with the builtinassets tag), so
# this server answers the HTTP API (queries, rules, alerts) but not the UI
# pages: enough for the rule tests and the drills. Every service discovery is
# compiled in, as in a release. The version the release build stamps with
# ldflags is stamped here too, so that `promtool --version` names it.
#
# Takes ~11 minutes on 2 cores with empty Go caches (measured: 10m45s for both
# binaries, download and compile), seconds once the Go build cache is warm.
# Idempotent: does nothing when both binaries of this version are already there.
set -euo pipefail
out=${1:-bin/promtool}
module=github.com/prometheus/prometheus
version=v0.316.0
release=3.16.0
dir=$(dirname "$out")
# Read the whole output before matching: with pipefail, `grep -q` closing the
# pipe early can kill the program with SIGPIPE and fail the script.
have() { [ -x "$1" ] && "$1" --version 2>&1 || true; }
case "$(have "$out")" in
  *"version ${release} "*)
    case "$(have "$dir/prometheus")" in
      *"version ${release} "*) exit 0 ;;
    esac ;;
esac
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
v=github.com/prometheus/common/version
ldflags="-s -w -X $v.Version=${release} -X $v.BuildUser=cellkit"
# GOBIN names the directory; go install keeps each command's name.
(cd "$work" && GOBIN="$work" go install -trimpath -ldflags="$ldflags" \
  "$module/cmd/promtool@${version}" "$module/cmd/prometheus@${version}")
mv -f "$work/prometheus" "$dir/prometheus"
mv -f "$work/promtool" "$dir/$(basename "$out")"
"$dir/$(basename "$out")" --version | sed -n 1p
