#!/usr/bin/env bash
# install-browser.sh [DIR] — what the console's browser tests drive: Debian's
# Chromium (/usr/bin/chromium, apt-get as root) and playwright-core from the
# npm registry, pinned in scripts/browser/package-lock.json, into DIR
# (default bin/browser; no browser download: Playwright drives Debian's).
#
# Takes ~50 s on a fresh machine (apt-get install chromium 48 s, npm 2 s);
# nothing once both are there. Where either cannot be installed (not root,
# no apt-get, no node/npm, no network), it says why in DIR/unavailable and
# exits 0: the browser tests skip with that reason, the rest of the suite
# runs.
set -uo pipefail
dir=${1:-bin/browser}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$dir"
rm -f "$dir/unavailable"
unavailable() { echo "$*" > "$dir/unavailable"; echo "install-browser: $* (the browser tests will skip)" >&2; exit 0; }

if ! [ -x /usr/bin/chromium ]; then
  [ "$(id -u)" = 0 ] || unavailable "/usr/bin/chromium is missing and installing it needs root (apt-get install chromium)"
  command -v apt-get >/dev/null || unavailable "/usr/bin/chromium is missing and there is no apt-get"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q --no-install-recommends chromium >/dev/null 2>"$dir/apt.log"; then
    apt-get update -q >/dev/null 2>>"$dir/apt.log" || true
    apt-get install -y -q --no-install-recommends chromium >/dev/null 2>>"$dir/apt.log" ||
      unavailable "apt-get install chromium failed: $(tail -n 1 "$dir/apt.log")"
  fi
fi

want=$(sed -n 's/.*"playwright-core": "\(.*\)".*/\1/p' "$here/browser/package.json")
have=$(sed -n 's/.*"version": "\(.*\)".*/\1/p' "$dir/node_modules/playwright-core/package.json" 2>/dev/null | head -n 1)
if [ "$have" != "$want" ]; then
  command -v npm >/dev/null || unavailable "npm is missing (Debian's nodejs and npm packages)"
  cp "$here/browser/package.json" "$here/browser/package-lock.json" "$dir/"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >npm.log 2>&1) ||
    unavailable "npm ci playwright-core@$want failed: $(tail -n 1 "$dir/npm.log")"
fi
echo "install-browser: $(/usr/bin/chromium --version 2>/dev/null | head -n 1), playwright-core $want in $dir"
