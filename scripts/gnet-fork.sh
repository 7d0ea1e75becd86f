#!/usr/bin/env bash
# third_party/gnet is gnet's release GNET_VERSION, as the Go module proxy
# serves it, plus cellkit's series of changes, third_party/gnet/patches/*.patch
# (git format-patch files, applied in order by git am). This script is the
# one way to make that tree, to check it, and to take a new release
# (third_party/gnet/README.cellkit.md says how).
#
#   scripts/gnet-fork.sh apply          write the tree: upstream + the series
#   scripts/gnet-fork.sh check          compare the committed tree with it
#                                       (exit 1 on a difference, 3 when the
#                                       release cannot be downloaded)
#   scripts/gnet-fork.sh work DIR       DIR/gnet: a git repository, upstream
#                                       (tag base) and the series as commits
#                                       (branch cellkit), to change the series
#   scripts/gnet-fork.sh rebase DIR V   in that repository, release V as a new
#                                       base and the series rebased onto it
#   scripts/gnet-fork.sh export DIR     the series from DIR (base..cellkit)
#                                       into patches/, then apply
#
# Besides the tree, third_party/gnet holds only cellkit's README.cellkit.md
# and patches/. The series imports cellkit's io_uring module beside it,
# third_party/uring (../uring in the fork's go.mod).
set -euo pipefail

GNET_VERSION=v2.9.7
MODULE=github.com/panjf2000/gnet/v2

root=$(cd "$(dirname "$0")/.." && pwd)
fork=$root/third_party/gnet
patches=$fork/patches
# The series' commits get one identity, whoever runs this (git am needs
# one; a machine may have none configured).
export GIT_AUTHOR_NAME=cellkit GIT_AUTHOR_EMAIL=cellkit@cellkit.invalid
export GIT_COMMITTER_NAME=cellkit GIT_COMMITTER_EMAIL=cellkit@cellkit.invalid
# The user's own git settings must not change what is applied or compared.
git() { command git -c core.autocrlf=false -c core.excludesFile=/dev/null -c commit.gpgSign=false -c tag.gpgSign=false -c advice.detachedHead=false "$@"; }

die() { echo "gnet-fork: $*" >&2; exit "${code:-1}"; }

# fill DIR VERSION: DIR's files replaced by those of gnet's release
# VERSION, writable. The release is the module cache's copy, downloaded
# outside any module so that no go.mod is touched; exit 3 if the proxy
# (or, with GOPROXY=off, the cache) does not have it.
fill() {
  local out src tmp
  tmp=$(mktemp -d)
  if ! out=$(cd "$tmp" && env -u GOWORK GOFLAGS=-mod=mod go mod download -json "$MODULE@$2" 2>&1); then
    rmdir "$tmp"
    code=3 die "cannot download $MODULE@$2: $out"
  fi
  rmdir "$tmp"
  src=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' <<<"$out")
  case "$src" in
  */gnet/v2@"$2") ;;
  *) code=3 die "no directory of $MODULE@$2 in: $out" ;;
  esac
  find "$1" -mindepth 1 -maxdepth 1 ! -name .git -exec rm -rf {} +
  cp -R "$src/." "$1/"
  chmod -R u+w "$1"
}

# series DIR: DIR/gnet a repository of the release GNET_VERSION (tag base)
# with the series applied (branch cellkit); DIR/uring the io_uring module
# its go.mod points at.
series() {
  mkdir -p "$1/gnet"
  ln -sfn "$root/third_party/uring" "$1/uring"
  fill "$1/gnet" "$GNET_VERSION"
  git -C "$1/gnet" init -q -b cellkit
  git -C "$1/gnet" add -A -f .
  git -C "$1/gnet" commit -q -m "gnet $GNET_VERSION"
  git -C "$1/gnet" tag base
  shopt -s nullglob
  local ps=("$patches"/*.patch)
  if [ ${#ps[@]} -gt 0 ]; then
    git -C "$1/gnet" am -q -3 "${ps[@]}" ||
      die "the series does not apply to $GNET_VERSION: rebase it (third_party/gnet/README.cellkit.md)"
  fi
}

# ours: the tracked files of third_party/gnet that are cellkit's, not the tree.
ours() { grep -v -e '^README\.cellkit\.md$' -e '^patches/'; }

cmd=${1:-}
case "$cmd" in
apply)
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  series "$work"
  rm -rf "$work/gnet/.git"
  find "$fork" -mindepth 1 -maxdepth 1 ! -name README.cellkit.md ! -name patches -exec rm -rf {} +
  cp -R "$work/gnet/." "$fork/"
  echo "third_party/gnet: $MODULE $GNET_VERSION + $(ls "$patches"/*.patch 2>/dev/null | wc -l) patches"
  ;;
check)
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  series "$work"
  git -C "$work/gnet" ls-files | sort >"$work/want"
  git -C "$fork" ls-files | ours | sort >"$work/have"
  status=0
  comm -23 "$work/want" "$work/have" | sed 's/^/missing from third_party\/gnet: /'
  comm -13 "$work/want" "$work/have" | sed 's/^/in third_party\/gnet, not in upstream + the series: /'
  cmp -s "$work/want" "$work/have" || status=1
  while read -r f; do
    [ -f "$fork/$f" ] || continue
    if ! cmp -s "$work/gnet/$f" "$fork/$f"; then
      diff -u --label "upstream $GNET_VERSION + series: $f" --label "third_party/gnet/$f" "$work/gnet/$f" "$fork/$f" || true
      status=1
    fi
  done <"$work/want"
  if [ $status -ne 0 ]; then
    die "third_party/gnet is not $MODULE $GNET_VERSION + third_party/gnet/patches: change the series, not the tree (third_party/gnet/README.cellkit.md)"
  fi
  echo "third_party/gnet is $MODULE $GNET_VERSION + $(ls "$patches"/*.patch 2>/dev/null | wc -l) patches"
  ;;
work)
  [ $# -eq 2 ] || die "usage: $0 work DIR"
  [ ! -e "$2/gnet" ] || die "$2/gnet exists"
  series "$2"
  echo "$2/gnet: $MODULE $GNET_VERSION (tag base) + the series (branch cellkit)"
  ;;
rebase)
  [ $# -eq 3 ] || die "usage: $0 rebase DIR VERSION"
  repo=$2/gnet
  [ -d "$repo/.git" ] || die "$repo is not a repository of $0 work"
  old=$(git -C "$repo" rev-parse base)
  git -C "$repo" checkout -q --detach base
  fill "$repo" "$3"
  git -C "$repo" add -A -f .
  git -C "$repo" commit -q -m "gnet $3"
  git -C "$repo" tag -f base >/dev/null
  git -C "$repo" rebase --onto base "$old" cellkit ||
    die "a change does not apply to $3: resolve it in $repo (git rebase --continue), then export"
  echo "$repo: the series on $3 (tag base); set GNET_VERSION=$3 in $0, then: $0 export $2"
  ;;
export)
  [ $# -eq 2 ] || die "usage: $0 export DIR"
  repo=$2/gnet
  [ -d "$repo/.git" ] || die "$repo is not a repository of $0 work"
  rm -f "$patches"/*.patch
  mkdir -p "$patches"
  git -C "$repo" format-patch -q --zero-commit --no-signature -N -o "$patches" base..cellkit
  "$0" apply
  ;;
*)
  die "usage: $0 apply | check | work DIR | rebase DIR VERSION | export DIR"
  ;;
esac
