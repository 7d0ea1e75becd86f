#!/usr/bin/env bash
# bench-router.sh — the edge router side by side with direct calls, NGINX,
# HAProxy and a minimal httputil proxy, in one run on this machine:
#
#   (a) direct          wrk → the backends
#   (b) nginx           wrk → NGINX from Debian (2 workers, upstream keep-alive) → backends
#   (c) httputil        wrk → a minimal httputil.ReverseProxy → backends
#   (d) router          wrk → the cellkit router (auth, rate limit, slot routing) → backends
#   (e) router, 1 P     the same router with GOMAXPROCS=1 (one event loop, as an NGINX
#                       worker is): for information, the target is (d)
#   (f) router at REF   with BASE_REF=<git ref>: the router built from that commit,
#                       to measure a change before/after in the same run
#   (g) nginx, TLS      (b) with TLS on its listener (TLS 1.3, ECDSA P-256)
#   (h) router, TLS     (d) with TLS on its listener, the same certificate
#                       (TLS=0 leaves (g) and (h) out). Connections are kept
#                       alive: this is the record layer's cost; the
#                       handshake's is in the pair rounds with a new
#                       connection per request (TLS_NEWCONN_ROUNDS, 3).
#   (i) router, mTLS    (d) with the 4 backends on mutual TLS (a second set,
#                       requiring the router's client certificate)
#   (j) nginx, mTLS     (b) likewise (proxy_ssl_certificate, upstream keep-alive,
#                       session reuse); (i) and (j) also have pair rounds
#   (k) haproxy         wrk → HAProxy from Debian (2 threads, keep-alive to the
#                       backends with http-reuse always) → backends
#   (l) haproxy, TLS    (k) with TLS on its listener, the same certificate
#
# Pair rounds: PAIR_ROUNDS (8) more rounds load the router and NGINX at the
# same time (wrk -t1 -c32 each), then the router and HAProxy, with TLS (h)
# and (g), (h) and (l) too, and with BASE_REF the router and (f): both
# see the same machine noise, so the ratios of their throughput and CPU per
# request are steadier than across rounds in turn.
#
# The backends are 4 trivial "cells" answering a small JSON at once. Every
# target gets the same requests: POST /v1/inquiries with a JSON body naming
# one of 1000 users and an X-API-Key.
#
# Throughput: wrk, 2 threads, 64 connections, DURATION s per target, ROUNDS
# rounds in rotating order; the ratios are per round, the median is shown.
# CPU: user+system seconds of the proxy's processes over the wrk run divided
# by the requests served, and of it the user seconds (the rest, the kernel's:
# the system calls, and on loopback the receiver's TCP input they run).
# Latency: an open-loop generator at RATE req/s (latency from each request's
# intended send time), LAT_DURATION s per target after a 2 s warm-up.
#
# System calls: SYSCALL_REQUESTS (100000) requests at saturation (a closed
# loop over CONNS connections) and RATE × SYSCALL_SECONDS (10) at the
# open-loop rate, to each proxy (plain), with perf counting the system calls
# its processes (every thread) enter (raw_syscalls:sys_enter, and the
# common calls one by one) while they are served: a count over a fixed
# number of requests, divided by the requests served. SYSCALLS=0 leaves it
# out.
#
# Installs what it needs (nginx-light, haproxy, wrk, perf) with apt-get when missing.
# Environment: ROUNDS (3), DURATION (10), RATE (2000), LAT_DURATION (10),
# CONNS (64), LAT_ROUNDS (2), BASE_REF (none). The machine should be otherwise idle: the
# report prints the load average before and after.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
RATE=${RATE:-2000}
LAT_DURATION=${LAT_DURATION:-10}
LAT_ROUNDS=${LAT_ROUNDS:-2}
CONNS=${CONNS:-64}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d /tmp/bench-router.XXXXXX)
PORTS=(19101 19102 19103 19104)
NGINX_PORT=19300
HAPROXY_PORT=19320
HAPROXY_TLS_PORT=19321
MINPROXY_PORT=19201
ROUTER_PORT=19080
ROUTER_ADMIN=19081
ROUTER1_PORT=19090
ROUTER1_ADMIN=19091
BASE_PORT=19095
BASE_ADMIN=19096
BASE_REF=${BASE_REF:-}
TLS=${TLS:-1}
NGINX_TLS_PORT=19301
ROUTER_TLS_PORT=19082
ROUTER_TLS_ADMIN=19083
TLS_PORTS=(19111 19112 19113 19114)
NGINX_MTLS_PORT=19302
ROUTER_MTLS_PORT=19084
ROUTER_MTLS_ADMIN=19085
TARGETS="a b c d e k"
[ -n "$BASE_REF" ] && TARGETS="$TARGETS f"
[ "$TLS" = 1 ] && TARGETS="$TARGETS g h i j l"
PIDS=()

log() { printf '%s\n' "$*" >&2; }

cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ -n "$BASE_REF" ]; then git -C "$ROOT" worktree remove --force "$WORK/base" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# --- tools ------------------------------------------------------------------
install_missing() {
  local missing=()
  command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || missing+=(nginx-light)
  command -v wrk >/dev/null || missing+=(wrk)
  command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || missing+=(haproxy)
  [ "${SYSCALLS:-1}" = 0 ] || command -v perf >/dev/null || missing+=(linux-perf)
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]} with apt-get"
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}
install_missing
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
HAPROXY=$(command -v haproxy || echo /usr/sbin/haproxy)
CLK_TCK=$(getconf CLK_TCK)

log "building the router and the bench helper"
(cd "$ROOT" && go build -o "$WORK/router" ./router && go build -o "$WORK/bench-router" ./scripts/bench-router)
if [ -n "$BASE_REF" ]; then
  log "building the router at $BASE_REF"
  git -C "$ROOT" worktree add --detach "$WORK/base" "$BASE_REF" >/dev/null 2>&1
  (cd "$WORK/base" && go build -o "$WORK/router-base" ./router)
fi

# shellcheck source=scripts/ports.sh
. "$ROOT/scripts/ports.sh"

# Every port must be free: a stale process on one would answer in place of
# the target (and its CPU would not be counted).
ports_free "${PORTS[@]}" $NGINX_PORT $HAPROXY_PORT $HAPROXY_TLS_PORT $MINPROXY_PORT $ROUTER_PORT $ROUTER_ADMIN $ROUTER1_PORT $ROUTER1_ADMIN $BASE_PORT $BASE_ADMIN $NGINX_TLS_PORT $ROUTER_TLS_PORT $ROUTER_TLS_ADMIN "${TLS_PORTS[@]}" $NGINX_MTLS_PORT $ROUTER_MTLS_PORT $ROUTER_MTLS_ADMIN

# --- the targets ------------------------------------------------------------
"$WORK/bench-router" backends -ports "$(IFS=,; echo "${PORTS[*]}")" &
BACKENDS_PID=$!; PIDS+=("$BACKENDS_PID")
BACKEND_URLS=()
for p in "${PORTS[@]}"; do wait_port "127.0.0.1:$p"; BACKEND_URLS+=("http://127.0.0.1:$p"); done
BACKEND_LIST=$(IFS=,; echo "${BACKEND_URLS[*]}")

"$WORK/bench-router" mkmap -out "$WORK/registry/map.json" -backends "$BACKEND_LIST"
KEY=$("$WORK/router" keygen -client bench -rate 10000000 -burst 10000000 -keys "$WORK/keys.json")

ROUTER_ARGS=(-listen "127.0.0.1:$ROUTER_PORT" -admin-listen "127.0.0.1:$ROUTER_ADMIN"
  -registry "file:$WORK/registry/map.json" -keys "$WORK/keys.json" -log-level warn)
"$WORK/router" "${ROUTER_ARGS[@]}" 2>"$WORK/router.log" &
ROUTER_PID=$!; PIDS+=("$ROUTER_PID")
GOMAXPROCS=1 "$WORK/router" "${ROUTER_ARGS[@]}" -listen "127.0.0.1:$ROUTER1_PORT" -admin-listen "127.0.0.1:$ROUTER1_ADMIN" 2>"$WORK/router1.log" &
ROUTER1_PID=$!; PIDS+=("$ROUTER1_PID")
if [ "$TLS" = 1 ]; then
  "$WORK/bench-router" certs -dir "$WORK/certs"
  "$WORK/router" "${ROUTER_ARGS[@]}" -listen "127.0.0.1:$ROUTER_TLS_PORT" -admin-listen "127.0.0.1:$ROUTER_TLS_ADMIN" \
    -tls-cert "$WORK/certs/router.pem" -tls-key "$WORK/certs/router-key.pem" 2>"$WORK/router-tls.log" &
  ROUTER_TLS_PID=$!; PIDS+=("$ROUTER_TLS_PID")
  "$WORK/bench-router" backends -ports "$(IFS=,; echo "${TLS_PORTS[*]}")" \
    -tls-cert "$WORK/certs/cell.pem" -tls-key "$WORK/certs/cell-key.pem" -tls-client-ca "$WORK/certs/ca.pem" &
  TLS_BACKENDS_PID=$!; PIDS+=("$TLS_BACKENDS_PID")
  TLS_BACKEND_URLS=()
  for p in "${TLS_PORTS[@]}"; do wait_port "127.0.0.1:$p"; TLS_BACKEND_URLS+=("https://127.0.0.1:$p"); done
  "$WORK/bench-router" mkmap -out "$WORK/registry-tls/map.json" -backends "$(IFS=,; echo "${TLS_BACKEND_URLS[*]}")"
  "$WORK/router" "${ROUTER_ARGS[@]}" -listen "127.0.0.1:$ROUTER_MTLS_PORT" -admin-listen "127.0.0.1:$ROUTER_MTLS_ADMIN" \
    -registry "file:$WORK/registry-tls/map.json" -cell-tls-ca "$WORK/certs/ca.pem" \
    -cell-tls-cert "$WORK/certs/router.pem" -cell-tls-key "$WORK/certs/router-key.pem" 2>"$WORK/router-mtls.log" &
  ROUTER_MTLS_PID=$!; PIDS+=("$ROUTER_MTLS_PID")
fi
if [ -n "$BASE_REF" ]; then
  "$WORK/router-base" "${ROUTER_ARGS[@]}" -listen "127.0.0.1:$BASE_PORT" -admin-listen "127.0.0.1:$BASE_ADMIN" 2>"$WORK/router-base.log" &
  BASE_PID=$!; PIDS+=("$BASE_PID")
fi

"$WORK/bench-router" minproxy -listen "127.0.0.1:$MINPROXY_PORT" -backends "$BACKEND_LIST" &
MINPROXY_PID=$!; PIDS+=("$MINPROXY_PID")

mkdir -p "$WORK/nginx"
{
  echo "worker_processes 2;"
  echo "pid $WORK/nginx/nginx.pid;"
  echo "error_log $WORK/nginx/error.log warn;"
  echo "events { worker_connections 4096; }"
  echo "http {"
  echo "  access_log off;"
  echo "  client_body_temp_path $WORK/nginx/body; proxy_temp_path $WORK/nginx/proxy;"
  echo "  fastcgi_temp_path $WORK/nginx/fcgi; uwsgi_temp_path $WORK/nginx/uwsgi; scgi_temp_path $WORK/nginx/scgi;"
  echo "  upstream cells {"
  for p in "${PORTS[@]}"; do echo "    server 127.0.0.1:$p;"; done
  echo "    keepalive 256;"
  echo "  }"
  echo "  server {"
  echo "    listen 127.0.0.1:$NGINX_PORT backlog=4096;"
  echo "    location / {"
  echo "      proxy_pass http://cells;"
  echo "      proxy_http_version 1.1;"
  echo "      proxy_set_header Connection \"\";"
  echo "      proxy_set_header X-Forwarded-For \$remote_addr;"
  echo "    }"
  echo "  }"
  if [ "$TLS" = 1 ]; then
    echo "  upstream cells_tls {"
    for p in "${TLS_PORTS[@]}"; do echo "    server 127.0.0.1:$p;"; done
    echo "    keepalive 256;"
    echo "  }"
    echo "  server {"
    echo "    listen 127.0.0.1:$NGINX_MTLS_PORT backlog=4096;"
    echo "    location / {"
    echo "      proxy_pass https://cells_tls;"
    echo "      proxy_http_version 1.1;"
    echo "      proxy_set_header Connection \"\";"
    echo "      proxy_set_header X-Forwarded-For \$remote_addr;"
    echo "      proxy_ssl_certificate $WORK/certs/router.pem;"
    echo "      proxy_ssl_certificate_key $WORK/certs/router-key.pem;"
    echo "      proxy_ssl_trusted_certificate $WORK/certs/ca.pem;"
    echo "      proxy_ssl_verify on;"
    echo "      proxy_ssl_name localhost;"
    echo "      proxy_ssl_session_reuse on;"
    echo "      proxy_ssl_protocols TLSv1.2 TLSv1.3;"
    echo "    }"
    echo "  }"
    echo "  server {"
    echo "    listen 127.0.0.1:$NGINX_TLS_PORT ssl backlog=4096;"
    echo "    ssl_certificate $WORK/certs/router.pem;"
    echo "    ssl_certificate_key $WORK/certs/router-key.pem;"
    echo "    ssl_protocols TLSv1.2 TLSv1.3;"
    echo "    ssl_session_cache shared:SSL:10m;"
    echo "    location / {"
    echo "      proxy_pass http://cells;"
    echo "      proxy_http_version 1.1;"
    echo "      proxy_set_header Connection \"\";"
    echo "      proxy_set_header X-Forwarded-For \$remote_addr;"
    echo "    }"
    echo "  }"
  fi
  echo "}"
} >"$WORK/nginx/nginx.conf"
"$NGINX" -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" -e "$WORK/nginx/error.log" -g 'daemon off;' &
NGINX_PID=$!; PIDS+=("$NGINX_PID")

# HAProxy: two threads as NGINX has two workers, keep-alive to the backends
# with their connections shared between requests (http-reuse always), the
# same X-Forwarded-For; logs off, as NGINX's.
mkdir -p "$WORK/haproxy"
{
  echo "global"
  echo "  nbthread 2"
  echo "  maxconn 8000"
  echo "  tune.ssl.default-dh-param 2048"
  echo "defaults"
  echo "  mode http"
  echo "  timeout connect 5s"
  echo "  timeout client 30s"
  echo "  timeout server 30s"
  echo "  timeout http-keep-alive 30s"
  echo "  option http-keep-alive"
  echo "  http-reuse always"
  echo "frontend plain"
  echo "  bind 127.0.0.1:$HAPROXY_PORT backlog 4096"
  echo "  option forwardfor"
  echo "  default_backend cells"
  if [ "$TLS" = 1 ]; then
    cat "$WORK/certs/router.pem" "$WORK/certs/router-key.pem" >"$WORK/haproxy/router.pem"
    echo "frontend tls"
    echo "  bind 127.0.0.1:$HAPROXY_TLS_PORT ssl crt $WORK/haproxy/router.pem ssl-min-ver TLSv1.2 backlog 4096"
    echo "  option forwardfor"
    echo "  default_backend cells"
  fi
  echo "backend cells"
  echo "  balance roundrobin"
  for p in "${PORTS[@]}"; do echo "  server c$p 127.0.0.1:$p maxconn 1024"; done
} >"$WORK/haproxy/haproxy.cfg"
"$HAPROXY" -db -f "$WORK/haproxy/haproxy.cfg" 2>"$WORK/haproxy/haproxy.log" &
HAPROXY_PID=$!; PIDS+=("$HAPROXY_PID")

wait_port "127.0.0.1:$ROUTER_PORT"
wait_port "127.0.0.1:$ROUTER1_PORT"
wait_port "127.0.0.1:$MINPROXY_PORT"
wait_port "127.0.0.1:$NGINX_PORT"
wait_port "127.0.0.1:$HAPROXY_PORT"
[ "$TLS" != 1 ] || wait_port "127.0.0.1:$HAPROXY_TLS_PORT"
[ -z "$BASE_REF" ] || wait_port "127.0.0.1:$BASE_PORT"
[ "$TLS" != 1 ] || { wait_port "127.0.0.1:$ROUTER_TLS_PORT"; wait_port "127.0.0.1:$ROUTER_MTLS_PORT"; wait_port "127.0.0.1:$NGINX_MTLS_PORT"; }

# --- measuring --------------------------------------------------------------
cat >"$WORK/req.lua" <<'EOF'
local reqs = {}
local i = 0
init = function(args)
  local key = os.getenv("BENCH_KEY") or ""
  for k = 1, 1000 do
    local body = string.format('{"user_id":"user-%06d","product":"credit-line","amount":5000000,"priority":"normal"}', k)
    reqs[k] = wrk.format("POST", "/v1/inquiries", {["Content-Type"] = "application/json", ["X-API-Key"] = key}, body)
  end
end
request = function() i = i % 1000 + 1; return reqs[i] end
EOF
# the same requests, each on a new connection (a TLS handshake each)
sed 's/\["X-API-Key"\] = key}/["X-API-Key"] = key, ["Connection"] = "close"}/' "$WORK/req.lua" >"$WORK/req-close.lua"

# cpu_ticks PID... — user+system clock ticks of the processes and their children
cpu_ticks() { CPU_FIELDS='$14 + $15' cpu_sum "$@"; }
# user_ticks PID... — the user clock ticks alone (the rest is the kernel's)
user_ticks() { CPU_FIELDS='$14' cpu_sum "$@"; }
cpu_sum() {
  local total=0 pid child
  for pid in "$@"; do
    for child in "$pid" $(pgrep -P "$pid" || true); do
      if [ -r "/proc/$child/stat" ]; then
        total=$((total + $(awk "{print $CPU_FIELDS}" "/proc/$child/stat")))
      fi
    done
  done
  echo "$total"
}

declare -A URL PROCS
URL[a]="http://127.0.0.1:${PORTS[0]}";  PROCS[a]="$BACKENDS_PID"
URL[b]="http://127.0.0.1:$NGINX_PORT";  PROCS[b]="$NGINX_PID"
URL[c]="http://127.0.0.1:$MINPROXY_PORT"; PROCS[c]="$MINPROXY_PID"
URL[d]="http://127.0.0.1:$ROUTER_PORT"; PROCS[d]="$ROUTER_PID"
URL[e]="http://127.0.0.1:$ROUTER1_PORT"; PROCS[e]="$ROUTER1_PID"
URL[k]="http://127.0.0.1:$HAPROXY_PORT"; PROCS[k]="$HAPROXY_PID"
declare -A NAME=([a]="direct" [b]="nginx" [c]="httputil" [d]="router" [e]="router-1P" [f]="router@$BASE_REF" [g]="nginx-tls" [h]="router-tls" [i]="router-mtls-cells" [j]="nginx-mtls-cells" [k]="haproxy" [l]="haproxy-tls")
if [ "$TLS" = 1 ]; then
  URL[g]="https://127.0.0.1:$NGINX_TLS_PORT"; PROCS[g]="$NGINX_PID"
  URL[h]="https://127.0.0.1:$ROUTER_TLS_PORT"; PROCS[h]="$ROUTER_TLS_PID"
  URL[i]="http://127.0.0.1:$ROUTER_MTLS_PORT"; PROCS[i]="$ROUTER_MTLS_PID"
  URL[j]="http://127.0.0.1:$NGINX_MTLS_PORT"; PROCS[j]="$NGINX_PID"
  URL[l]="https://127.0.0.1:$HAPROXY_TLS_PORT"; PROCS[l]="$HAPROXY_PID"
fi
if [ -n "$BASE_REF" ]; then URL[f]="http://127.0.0.1:$BASE_PORT"; PROCS[f]="$BASE_PID"; fi

# throughput TARGET ROUND — runs wrk, records req/s and proxy CPU µs/request
RESULTS="$WORK/results.txt"
: >"$RESULTS"
throughput() {
  local t=$1 round=$2 out t0 t1 u0 u1 b0 b1 rps reqs non2xx
  # shellcheck disable=SC2086
  local bp=$BACKENDS_PID; [[ $t != [ij] ]] || bp=$TLS_BACKENDS_PID
  # shellcheck disable=SC2086
  t0=$(cpu_ticks ${PROCS[$t]}); u0=$(user_ticks ${PROCS[$t]}); b0=$(cpu_ticks "$bp")
  out=$(BENCH_KEY=$KEY wrk -t2 -c"$CONNS" -d"${DURATION}s" -s "$WORK/req.lua" "${URL[$t]}/v1/inquiries")
  # shellcheck disable=SC2086
  t1=$(cpu_ticks ${PROCS[$t]}); u1=$(user_ticks ${PROCS[$t]}); b1=$(cpu_ticks "$bp")
  rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
  reqs=$(awk '/requests in/ {print $1}' <<<"$out")
  non2xx=$(awk '/Non-2xx/ {print $NF}' <<<"$out"); non2xx=${non2xx:-0}
  if [ "$non2xx" != 0 ] || grep -q "Socket errors" <<<"$out"; then log "$out"; fi
  awk -v t="$t" -v r="$round" -v rps="$rps" -v n="$reqs" -v p="$((t1 - t0))" -v u="$((u1 - u0))" -v b="$((b1 - b0))" -v hz="$CLK_TCK" -v bad="$non2xx" \
    'BEGIN { printf "%s %s %.0f %.2f %.2f %s %.2f\n", t, r, rps, (t=="a" ? 0 : p/hz*1e6/n), b/hz*1e6/n, bad, (t=="a" ? 0 : u/hz*1e6/n) }' >>"$RESULTS"
  log "round $round ${NAME[$t]}: $rps req/s ($non2xx non-2xx)"
}


LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
log "warming up (load average $LOAD_BEFORE)"
for t in $TARGETS; do BENCH_KEY=$KEY wrk -t2 -c"$CONNS" -d2s -s "$WORK/req.lua" "${URL[$t]}/v1/inquiries" >/dev/null; done

ORDERS=("a b c d e k" "k e d c b a" "b d k a e c" "c e a k d b")
[ -z "$BASE_REF" ] || ORDERS=("a b c d e f k" "k f e d c b a" "b f d k a e c" "c e a k f d b")
if [ "$TLS" = 1 ]; then
  ORDERS=("${ORDERS[0]} g h i j l" "l j i h g ${ORDERS[1]}" "${ORDERS[2]} h l j g i" "g i ${ORDERS[3]} j l h")
fi
for round in $(seq 1 "$ROUNDS"); do
  for t in ${ORDERS[$(((round - 1) % 4))]}; do throughput "$t" "$round"; done
done

PAIRS="$WORK/pairs.txt"
: >"$PAIRS"
# pair_round X Y [LUA TAG] — X and Y loaded at once; appends "X Y throughput-ratio cpu-ratio [TAG]"
pair_round() {
  local x=$1 y=$2 lua=${3:-$WORK/req.lua} tag=${4:-} x0 y0 x1 y1 wx wy nx ny
  # shellcheck disable=SC2086
  x0=$(cpu_ticks ${PROCS[$x]}); y0=$(cpu_ticks ${PROCS[$y]})
  BENCH_KEY=$KEY wrk -t1 -c$((CONNS / 2)) -d"${DURATION}s" -s "$lua" "${URL[$x]}/v1/inquiries" >"$WORK/w$x.txt" &
  wx=$!
  BENCH_KEY=$KEY wrk -t1 -c$((CONNS / 2)) -d"${DURATION}s" -s "$lua" "${URL[$y]}/v1/inquiries" >"$WORK/w$y.txt" &
  wy=$!
  wait "$wx" "$wy"
  # shellcheck disable=SC2086
  x1=$(cpu_ticks ${PROCS[$x]}); y1=$(cpu_ticks ${PROCS[$y]})
  nx=$(awk '/requests in/ {print $1}' "$WORK/w$x.txt"); ny=$(awk '/requests in/ {print $1}' "$WORK/w$y.txt")
  awk -v x="$x" -v y="$y" -v nx="$nx" -v ny="$ny" -v cx=$((x1 - x0)) -v cy=$((y1 - y0)) \
    -v tag="$tag" 'BEGIN { printf "%s %s %.4f %.4f %s\n", x, y, nx / ny, (cx / nx) / (cy / ny), tag }' >>"$PAIRS"
  log "pair round: ${NAME[$x]} and ${NAME[$y]} at once: $(tail -1 "$PAIRS")"
}
for pr in $(seq 1 "${PAIR_ROUNDS:-8}"); do
  if [ $((pr % 2)) = 1 ]; then pair_round d b; else pair_round b d; fi
  if [ $((pr % 2)) = 1 ]; then pair_round k d; else pair_round d k; fi
  # In turns of order, as the pair with NGINX: a run of one build against
  # itself, always in the same order, gave 0.926× (6 rounds), a bias
  # the comparison must not carry.
  if [ -n "$BASE_REF" ]; then if [ $((pr % 2)) = 1 ]; then pair_round d f; else pair_round f d; fi; fi
  if [ "$TLS" = 1 ]; then
    if [ $((pr % 2)) = 1 ]; then pair_round h g; else pair_round g h; fi
    if [ $((pr % 2)) = 1 ]; then pair_round l h; else pair_round h l; fi
    if [ $((pr % 2)) = 1 ]; then pair_round i j; else pair_round j i; fi
  fi
done
if [ "$TLS" = 1 ]; then
  for pr in $(seq 1 "${TLS_NEWCONN_ROUNDS:-3}"); do
    if [ $((pr % 2)) = 1 ]; then pair_round h g "$WORK/req-close.lua" newconn; else pair_round g h "$WORK/req-close.lua" newconn; fi
    if [ $((pr % 2)) = 1 ]; then pair_round l h "$WORK/req-close.lua" newconn; else pair_round h l "$WORK/req-close.lua" newconn; fi
  done
fi

LAT="$WORK/latency.txt"
: >"$LAT"
for lr in $(seq 1 "$LAT_ROUNDS"); do
  for t in $TARGETS; do
    targets=${URL[$t]}
    [ "$t" = a ] && targets=$BACKEND_LIST
    ca=(); [[ ${URL[$t]} != https* ]] || ca=(-ca "$WORK/certs/ca.pem")
    "$WORK/bench-router" load -name "$t" -targets "$targets" -key "$KEY" -rate "$RATE" -duration "${LAT_DURATION}s" -conns "$CONNS" "${ca[@]}" >>"$LAT"
    log "latency round $lr ${NAME[$t]}: $(tail -1 "$LAT")"
  done
done

# --- system calls per request ------------------------------------------------
# syscalls TARGET MODE — perf counts the system calls of the proxy's
# processes (every thread) over a fixed number of requests: MODE sat
# (SYSCALL_REQUESTS in a closed loop over CONNS connections, each sent when
# the last is answered: bench-router load -requests) or open (RATE ×
# SYSCALL_SECONDS requests at RATE req/s); appends "TARGET MODE requests
# total per-call-counts..." to $SYSC.
SYSC="$WORK/syscalls.txt"
: >"$SYSC"
declare -A SC_RATE
SC_CALLS="read write readv writev recvfrom sendto recvmsg sendmsg epoll_wait epoll_pwait epoll_ctl accept4 close futex nanosleep io_uring_enter"
SC_EVENTS=raw_syscalls:sys_enter
for c in $SC_CALLS; do SC_EVENTS="$SC_EVENTS,syscalls:sys_enter_$c"; done
syscalls() {
  local t=$1 mode=$2 pids perf_pid n out
  # shellcheck disable=SC2086
  pids=$(for p in ${PROCS[$t]}; do echo "$p"; pgrep -P "$p" || true; done | sort -u | paste -sd, -)
  perf stat -x, -e "$SC_EVENTS" -p "$pids" -o "$WORK/perf-$t-$mode.csv" &
  perf_pid=$!
  sleep 0.5 # attached
  if [ "$mode" = sat ]; then
    out=$("$WORK/bench-router" load -name "$t" -targets "${URL[$t]}" -key "$KEY" -requests "$SYSCALL_REQUESTS" -conns "$CONNS")
  else
    out=$("$WORK/bench-router" load -name "$t" -targets "${URL[$t]}" -key "$KEY" -rate "$RATE" -warmup 0s -duration "${SYSCALL_SECONDS}s" -conns "$CONNS")
  fi
  n=$(sed -n 's/.*"sent":\([0-9]*\).*/\1/p' <<<"$out")
  SC_RATE[$t$mode]=$(sed -n 's/.*"rate":\([0-9.]*\).*/\1/p' <<<"$out")
  kill -INT "$perf_pid"; wait "$perf_pid" || true
  awk -F, -v t="$t" -v m="$mode" -v n="$n" -v calls="$SC_CALLS" '
    /raw_syscalls:sys_enter/ { total = $1 }
    /syscalls:sys_enter_/ { c = $3; sub(/.*sys_enter_/, "", c); count[c] = $1 }
    END { k = split(calls, cs, " "); printf "%s %s %d %d", t, m, n, total; for (i = 1; i <= k; i++) printf " %d", count[cs[i]]; printf "\n" }' \
    "$WORK/perf-$t-$mode.csv" >>"$SYSC"
  log "system calls, ${NAME[$t]} ($mode): $(tail -1 "$SYSC")"
}
SYSCALL_REQUESTS=${SYSCALL_REQUESTS:-100000}
SYSCALL_SECONDS=${SYSCALL_SECONDS:-10}
if [ "${SYSCALLS:-1}" != 0 ]; then
  for t in d b k ${BASE_REF:+f}; do syscalls "$t" sat; done
  for t in d b k ${BASE_REF:+f}; do syscalls "$t" open; done
fi

# --- the report -------------------------------------------------------------
echo
echo "bench-router: load average before/after: $LOAD_BEFORE / $(cut -d' ' -f1-3 /proc/loadavg)"
echo "bench-router: $(nproc) cores, $(uname -r), $("$NGINX" -v 2>&1 | sed 's/.*: //'), $(go version | awk '{print $3}'), wrk -t2 -c$CONNS -d${DURATION}s x $ROUNDS rounds, open loop $RATE req/s x ${LAT_DURATION}s x $LAT_ROUNDS"
echo
awk -v targets="$TARGETS" -v ref="$BASE_REF" '
  function median(arr, n,   i, j, tmp) {
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (arr[j] < arr[i]) { tmp = arr[i]; arr[i] = arr[j]; arr[j] = tmp }
    return (n % 2) ? arr[(n + 1) / 2] : (arr[n / 2] + arr[n / 2 + 1]) / 2
  }
  { rps[$1, $2] = $3; cpu[$1, $2] = $4; bcpu[$1, $2] = $5; bad[$1] += $6; ucpu[$1, $2] = $7; if ($2 > rounds) rounds = $2 }
  END {
    nt = split(targets, ts, " ")
    name["a"] = "(a) direct"; name["b"] = "(b) nginx"; name["c"] = "(c) httputil"; name["d"] = "(d) router"; name["e"] = "(e) router, GOMAXPROCS=1"; name["f"] = "(f) router at " ref; name["g"] = "(g) nginx, TLS"; name["h"] = "(h) router, TLS"; name["i"] = "(i) router, mutual TLS to the cells"; name["j"] = "(j) nginx, mutual TLS to the cells"; name["k"] = "(k) haproxy"; name["l"] = "(l) haproxy, TLS"
    printf "| target | req/s (median) | / direct | proxy CPU µs/req | of it user / kernel | backend CPU µs/req | non-2xx |\n|---|---:|---:|---:|---:|---:|---:|\n"
    for (k = 1; k <= nt; k++) {
      t = ts[k]
      for (r = 1; r <= rounds; r++) { x[r] = rps[t, r]; y[r] = rps[t, r] / rps["a", r]; c[r] = cpu[t, r]; bc[r] = bcpu[t, r]; uc[r] = ucpu[t, r]; kc[r] = cpu[t, r] - ucpu[t, r] }
      m = median(x, rounds); q = median(y, rounds); cc = median(c, rounds); bb = median(bc, rounds); uu = median(uc, rounds); kk = median(kc, rounds)
      printf "| %s | %.0f | %.2f× | %s | %s | %.1f | %d |\n", name[t], m, q, (t == "a" ? "–" : sprintf("%.1f", cc)), (t == "a" ? "–" : sprintf("%.1f / %.1f", uu, kk)), bb, bad[t]
    }
    for (r = 1; r <= rounds; r++) { db[r] = rps["d", r] / rps["b", r]; dc[r] = rps["d", r] / rps["c", r]; cb[r] = cpu["d", r] / cpu["b", r] }
    printf "\n(d)/(b) router vs nginx: %.2f× (rounds:", median(db, rounds)
    for (r = 1; r <= rounds; r++) printf " %.2f", rps["d", r] / rps["b", r]
    printf ")\n(d)/(c) router vs httputil: %.2f×\n", median(dc, rounds)
    printf "router CPU per request / nginx CPU per request: %.2f×\n", median(cb, rounds)
    for (r = 1; r <= rounds; r++) { dk[r] = rps["d", r] / rps["k", r]; ck[r] = cpu["d", r] / cpu["k", r] }
    printf "(d)/(k) router vs haproxy: throughput %.2f×, CPU per request %.2f×\n", median(dk, rounds), median(ck, rounds)
    for (r = 1; r <= rounds; r++) { eb[r] = rps["e", r] / rps["b", r] }
    printf "(e)/(b) router with GOMAXPROCS=1 vs nginx: %.2f×\n", median(eb, rounds)
    if (index(targets, "h")) {
      for (r = 1; r <= rounds; r++) { hg[r] = rps["h", r] / rps["g", r]; chg[r] = cpu["h", r] / cpu["g", r]; hd[r] = rps["h", r] / rps["d", r]; chd[r] = cpu["h", r] / cpu["d", r] }
      printf "(h)/(g) router vs nginx, both on TLS: throughput %.2f×, CPU per request %.2f×\n", median(hg, rounds), median(chg, rounds)
      printf "(h)/(d) the router on TLS vs plain: throughput %.2f×, CPU per request %.2f×\n", median(hd, rounds), median(chd, rounds)
      for (r = 1; r <= rounds; r++) { hl[r] = rps["h", r] / rps["l", r]; chl[r] = cpu["h", r] / cpu["l", r] }
      printf "(h)/(l) router vs haproxy, both on TLS: throughput %.2f×, CPU per request %.2f×\n", median(hl, rounds), median(chl, rounds)
      for (r = 1; r <= rounds; r++) { ij[r] = rps["i", r] / rps["j", r]; cij[r] = cpu["i", r] / cpu["j", r]; id[r] = rps["i", r] / rps["d", r]; cid[r] = cpu["i", r] / cpu["d", r] }
      printf "(i)/(j) router vs nginx, both on mutual TLS to the cells: throughput %.2f×, CPU per request %.2f×\n", median(ij, rounds), median(cij, rounds)
      printf "(i)/(d) the router with mutual TLS to the cells vs plain: throughput %.2f×, CPU per request %.2f×\n", median(id, rounds), median(cid, rounds)
    }
    if (index(targets, "f")) {
      for (r = 1; r <= rounds; r++) { df[r] = rps["d", r] / rps["f", r]; cf[r] = cpu["d", r] / cpu["f", r] }
      printf "(d)/(f) router vs router at %s: throughput %.3f× (rounds:", ref, median(df, rounds)
      for (r = 1; r <= rounds; r++) printf " %.2f", rps["d", r] / rps["f", r]
      printf "), CPU per request %.3f×\n", median(cf, rounds)
    }
  }' "$RESULTS"
if [ -s "$PAIRS" ]; then
  awk -v ref="$BASE_REF" '
    function median(arr, n,   i, j, tmp) {
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (arr[j] < arr[i]) { tmp = arr[i]; arr[i] = arr[j]; arr[j] = tmp }
      return (n % 2) ? arr[(n + 1) / 2] : (arr[n / 2] + arr[n / 2 + 1]) / 2
    }
    {
      # ratios as router / other, whichever order the round ran in
      # TLS pairs: h is the router, g the peer; the newconn tag marks a new connection per request
      if ($1 == "d" || $1 == "h" || $1 == "i") { k = $2 $5; t = $3; c = $4 } else { k = $1 $5; t = 1 / $3; c = 1 / $4 }
      n[k]++; tt[k, n[k]] = t; cc[k, n[k]] = c; line[k] = line[k] sprintf(" %.3f/%.3f", t, c)
    }
    END {
      label["b"] = "nginx"; label["k"] = "haproxy"; label["l"] = "haproxy, both on TLS (kept-alive connections)"; label["lnewconn"] = "haproxy, both on TLS, a new connection (a handshake) per request"; label["f"] = "router at " ref; label["g"] = "nginx, both on TLS (kept-alive connections)"; label["gnewconn"] = "nginx, both on TLS, a new connection (a handshake) per request"; label["j"] = "nginx, both on mutual TLS to the cells"
      for (k in n) {
        for (r = 1; r <= n[k]; r++) { a[r] = tt[k, r]; z[r] = cc[k, r] }
        printf "router and %s loaded at once, %d rounds: router throughput %.3f×, CPU per request %.3f× (per round:%s)\n", label[k], n[k], median(a, n[k]), median(z, n[k]), line[k]
      }
    }' "$PAIRS"
fi
echo
awk -v targets="$TARGETS" -v ref="$BASE_REF" '
  function num(key,   m) { if (match($0, "\"" key "\":[0-9.]+")) { m = substr($0, RSTART, RLENGTH); sub(/.*:/, "", m); return m + 0 } return 0 }
  function median(arr, n,   i, j, tmp) {
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (arr[j] < arr[i]) { tmp = arr[i]; arr[i] = arr[j]; arr[j] = tmp }
    return (n % 2) ? arr[(n + 1) / 2] : (arr[n / 2] + arr[n / 2 + 1]) / 2
  }
  {
    match($0, /"name":"[a-l]"/); t = substr($0, RSTART + 8, 1)
    n[t]++; p50[t, n[t]] = num("p50_us"); p99[t, n[t]] = num("p99_us"); p999[t, n[t]] = num("p999_us")
    errs[t] += num("errors") + num("non_2xx") + num("late")
  }
  END {
    nt = split(targets, ts, " ")
    name["a"] = "(a) direct"; name["b"] = "(b) nginx"; name["c"] = "(c) httputil"; name["d"] = "(d) router"; name["e"] = "(e) router, GOMAXPROCS=1"; name["f"] = "(f) router at " ref; name["g"] = "(g) nginx, TLS"; name["h"] = "(h) router, TLS"; name["i"] = "(i) router, mutual TLS to the cells"; name["j"] = "(j) nginx, mutual TLS to the cells"; name["k"] = "(k) haproxy"; name["l"] = "(l) haproxy, TLS"
    for (k = 1; k <= nt; k++) { t = ts[k]
      for (r = 1; r <= n[t]; r++) { x[r] = p50[t, r]; y[r] = p99[t, r]; z[r] = p999[t, r] }
      m50[t] = median(x, n[t]); m99[t] = median(y, n[t]); m999[t] = median(z, n[t]) }
    printf "| target @ open loop | p50 µs | p99 µs | p99.9 µs | Δp50 µs | Δp99 µs | errors |\n|---|---:|---:|---:|---:|---:|---:|\n"
    for (k = 1; k <= nt; k++) { t = ts[k]
      printf "| %s | %.0f | %.0f | %.0f | %s | %s | %d |\n", name[t], m50[t], m99[t], m999[t],
        (t == "a" ? "–" : sprintf("%+.0f", m50[t] - m50["a"])), (t == "a" ? "–" : sprintf("%+.0f", m99[t] - m99["a"])), errs[t] }
    w99 = 0; w999 = 0
    for (r = 1; r <= n["d"]; r++) { if (p99["d", r] <= p99["b", r]) w99++; if (p999["d", r] <= p999["b", r]) w999++ }
    printf "\nper round, router vs nginx: p99 at or below in %d of %d rounds, p99.9 in %d of %d\n", w99, n["d"], w999, n["d"]
    w99 = 0; w999 = 0
    for (r = 1; r <= n["d"]; r++) { if (p99["d", r] <= p99["k", r]) w99++; if (p999["d", r] <= p999["k", r]) w999++ }
    printf "per round, router vs haproxy: p99 at or below in %d of %d rounds, p99.9 in %d of %d\n", w99, n["d"], w999, n["d"]
    printf "p99 µs per round, router / nginx:"
    for (r = 1; r <= n["d"]; r++) printf " %.0f/%.0f", p99["d", r], p99["b", r]
    printf "\n"
    if (n["h"] > 0) {
      w99 = 0; w999 = 0
      for (r = 1; r <= n["h"]; r++) { if (p99["h", r] <= p99["g", r]) w99++; if (p999["h", r] <= p999["g", r]) w999++ }
      printf "per round, router vs nginx on TLS: p99 at or below in %d of %d rounds, p99.9 in %d of %d\n", w99, n["h"], w999, n["h"]
    }
  }' "$LAT"
if [ -s "$SYSC" ]; then
  echo
  awk -v calls="$SC_CALLS" -v ref="$BASE_REF" '
    BEGIN { name["d"] = "router"; name["b"] = "nginx"; name["k"] = "haproxy"; name["f"] = "router at " ref; mode["sat"] = "saturation"; mode["open"] = "open loop" }
    { rows[++nr] = $0 }
    END {
      k = split(calls, cs, " ")
      printf "| proxy | load | requests | system calls / request |"
      for (i = 1; i <= k; i++) printf " %s |", cs[i]
      printf "\n|---|---|---:|---:|"; for (i = 1; i <= k; i++) printf "---:|"; printf "\n"
      for (r = 1; r <= nr; r++) {
        split(rows[r], f, " ")
        if (f[3] == 0) continue
        printf "| %s | %s | %d | %.2f |", name[f[1]], mode[f[2]], f[3], f[4] / f[3]
        for (i = 1; i <= k; i++) { v = f[4 + i] / f[3]; printf " %s |", (v == 0 ? "–" : sprintf("%.2f", v)) }
        printf "\n"
      }
    }' "$SYSC"
fi
echo
echo "targets: (d) ≥ 1.10× the better of nginx and haproxy in throughput, ≤ 0.9× its CPU per request; p99 and p99.9 ≤ both at the open-loop rate; fewer system calls per request than both"
