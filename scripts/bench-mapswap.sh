#!/usr/bin/env bash
# bench-mapswap.sh — the router's latency across map changes, side by side
# with the same load and no change, in one run on this machine:
#
#   quiet   open-loop load at RATE req/s through the router, the map left alone
#   churn   the same load while the map changes every EVERY (one cell's weight
#           1 ↔ 2: a new version, some slots move, the router decodes the map
#           and builds its routing table of CELLS cells again)
#
# The writer of the changes runs in both modes (in quiet mode on a copy of
# the map the router does not follow), so that only the router's side of a
# change differs.
#
# The map has CELLS cells (1000) over 4 trivial backends ("cells" answering
# at once), so the router's own cost of a swap is what shows. The modes
# alternate for ROUNDS rounds of DURATION s (after a 2 s warm-up each); the
# report gives each round's p50, p99, p99.9 and max, and the median of each
# over the rounds per mode. Latency is measured from each request's intended
# send time (no coordinated omission).
#
# Environment: CELLS (1000), RATE (2000), DURATION (20), EVERY (1s),
# ROUNDS (3). The machine should be otherwise idle.
set -euo pipefail

CELLS=${CELLS:-1000}
RATE=${RATE:-2000}
DURATION=${DURATION:-20}
EVERY=${EVERY:-1s}
ROUNDS=${ROUNDS:-3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d /tmp/bench-mapswap.XXXXXX)
PORTS=(19401 19402 19403 19404)
ROUTER_PORT=19480
ROUTER_ADMIN=19481
PIDS=()

log() { echo "bench-mapswap: $*" >&2; }
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

# shellcheck source=scripts/ports.sh
. "$ROOT/scripts/ports.sh"
ports_free "${PORTS[@]}" $ROUTER_PORT $ROUTER_ADMIN

log "building the router and the bench helper"
(cd "$ROOT" && go build -o "$WORK/router" ./router && go build -o "$WORK/bench-router" ./scripts/bench-router)

"$WORK/bench-router" backends -ports "$(IFS=,; echo "${PORTS[*]}")" &
PIDS+=($!)
URLS=()
for p in "${PORTS[@]}"; do wait_port "127.0.0.1:$p"; URLS+=("http://127.0.0.1:$p"); done
log "a map of $CELLS cells"
"$WORK/bench-router" mkmap -out "$WORK/registry/map.json" -backends "$(IFS=,; echo "${URLS[*]}")" -cells "$CELLS"
mkdir -p "$WORK/shadow" && cp "$WORK/registry/map.json" "$WORK/shadow/map.json"
KEY=$("$WORK/router" keygen -client bench -rate 10000000 -burst 10000000 -keys "$WORK/keys.json" 2>/dev/null)
"$WORK/router" -listen "127.0.0.1:$ROUTER_PORT" -admin-listen "127.0.0.1:$ROUTER_ADMIN" \
  -registry "file:$WORK/registry/map.json" -keys "$WORK/keys.json" -log-level warn 2>"$WORK/router.log" &
PIDS+=($!)
wait_port "127.0.0.1:$ROUTER_PORT"

declare -A P50 P99 P999 MAX
for round in $(seq 1 "$ROUNDS"); do
  for mode in quiet churn; do
    # Both modes run the same map writer, so that its own CPU (a plan over
    # CELLS cells a second) weighs on both alike; in quiet mode it writes a
    # copy of the map that the router does not follow.
    target="$WORK/registry/map.json"
    [ "$mode" = churn ] || target="$WORK/shadow/map.json"
    "$WORK/bench-router" churn -registry "$target" -every "$EVERY" -for "$((DURATION + 2))s" >"$WORK/changes.json" &
    CHURN_PID=$!
    "$WORK/bench-router" load -name "$mode" -targets "http://127.0.0.1:$ROUTER_PORT" -key "$KEY" \
      -rate "$RATE" -duration "${DURATION}s" -warmup 2s >"$WORK/$mode.json"
    wait "$CHURN_PID"
    changes=$(sed 's/[^0-9]//g' "$WORK/changes.json")
    [ "$mode" = churn ] || changes="0 (${changes} to the copy)"
    read -r p50 p99 p999 max errors non2xx < <(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["p50_us"], r["p99_us"], r["p999_us"], r["max_us"], r["errors"], r["non_2xx"])' "$WORK/$mode.json")
    P50[$mode]+="$p50 "; P99[$mode]+="$p99 "; P999[$mode]+="$p999 "; MAX[$mode]+="$max "
    printf 'round %d %-5s  p50 %7.0f µs  p99 %7.0f µs  p99.9 %7.0f µs  max %7.0f µs  errors %s non-2xx %s  map changes %s\n' \
      "$round" "$mode" "$p50" "$p99" "$p999" "$max" "$errors" "$non2xx" "$changes"
  done
done

median() { python3 -c 'import statistics,sys; print("%.0f" % statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }
echo
echo "median of $ROUNDS rounds, $RATE req/s, $CELLS cells, a change every $EVERY in churn:"
printf '%-6s %10s %10s %10s %10s\n' mode "p50 µs" "p99 µs" "p99.9 µs" "max µs"
for mode in quiet churn; do
  # shellcheck disable=SC2086
  printf '%-6s %10s %10s %10s %10s\n' "$mode" "$(median ${P50[$mode]})" "$(median ${P99[$mode]})" "$(median ${P999[$mode]})" "$(median ${MAX[$mode]})"
done
