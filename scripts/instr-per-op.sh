#!/usr/bin/env bash
# Instructions per operation of Go benchmarks, counted by valgrind's callgrind:
# unlike ns/op they do not move with the load on a shared, noisy machine.
# Each benchmark runs twice (N1 and N2 iterations) and the difference is
# divided by N2-N1, which cancels the benchmark's setup.
#
#   scripts/instr-per-op.sh ./internal/slotmap Hash Lookup LookupOverride
#   N1=10 N2=60 scripts/instr-per-op.sh ./internal/slotmap PlanDrain
set -euo pipefail
pkg=$1; shift
n1=${N1:-200000}; n2=${N2:-1200000}
command -v valgrind >/dev/null || { echo "installing valgrind" >&2; apt-get install -y valgrind >/dev/null; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/bench.test" "$pkg"
count() { # bench iterations -> instructions
  GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind --callgrind-out-file="$tmp/cg" \
    "$tmp/bench.test" -test.run '^$' -test.bench "^Benchmark$1\$" -test.benchtime "$2x" -test.cpu 1 2>&1 |
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
for b in "$@"; do
  a=$(count "$b" "$n1"); z=$(count "$b" "$n2")
  echo "Benchmark$b $(( (z - a) / (n2 - n1) )) instructions/op"
done
