# ports.sh — port helpers shared by the bench scripts (sourced; the caller
# defines log).

# wait_port waits up to 10 s for something to listen on host:port.
wait_port() { # host:port
  local i
  for i in $(seq 1 200); do
    if (exec 3<>"/dev/tcp/${1%:*}/${1#*:}") 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  log "nothing listens on $1"; exit 1
}

# ports_free exits unless every loopback port given is free: a stale
# process on one would answer in place of the target.
ports_free() { # port...
  local p
  for p in "$@"; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      log "port $p is in use (a stale bench process?); free it first"; exit 1
    fi
  done
}
