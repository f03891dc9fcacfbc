#!/usr/bin/env bash
# Builds the reference PersonaPlex web client (client/ of github.com/NVIDIA/personaplex) with npm, for
# `personaplex-server --static DIR` (docs/reference-client.md). The built files are never committed: they go
# under --out (default build/reference-client), one folder per client version, and a later run for the same
# version only prints the path. The last line on stdout is the built dist/ folder; the rest goes to stderr.
#
# usage: scripts/build-reference-client.sh [--source PATH] [--rev REV] [--out DIR] [--force]
#   --source PATH  a checkout of NVIDIA/personaplex (a folder with client/) or a git repository or mirror
#                  of it (default: $PPX_PERSONAPLEX_SOURCE, else the mirror ../.mirror/NVIDIA+personaplex/repo
#                  or /work/.mirror/NVIDIA+personaplex/repo when present, else a shallow git clone of
#                  https://github.com/NVIDIA/personaplex into DIR/personaplex)
#   --rev REV      the commit to build from a git source (default HEAD)
#   --out DIR      where builds are kept (default build/reference-client)
#   --force        build again even when DIR holds this version
# Exit status: 0 built (or cached); 1 the build failed; 2 bad usage; 3 no client sources (none given or
# found, and the clone failed); 4 npm cannot reach its registry; 5 node >= 18 or npm is not installed.
# The tests skip on 3, 4 and 5 (tests/test-webclient.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
upstream=https://github.com/NVIDIA/personaplex

source_dir="${PPX_PERSONAPLEX_SOURCE:-}"
rev=HEAD
out="$root/build/reference-client"
force=0
while [ $# -gt 0 ]; do
  case "$1" in
    --source) source_dir="$2"; shift ;;
    --rev) rev="$2"; shift ;;
    --out) out="$2"; shift ;;
    --force) force=1 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "build-reference-client.sh: unknown option $1" >&2; exit 2 ;;
  esac
  [ $# -gt 0 ] && shift
done

say() { echo "build-reference-client: $*" >&2; }
die() { local code=$1; shift; say "$*"; exit "$code"; }

command -v node >/dev/null 2>&1 || die 5 "node is not installed (scripts/install-deps.sh --tests)"
command -v npm >/dev/null 2>&1 || die 5 "npm is not installed (scripts/install-deps.sh --tests)"
node_major=$(node -p 'process.versions.node.split(".")[0]')
[ "$node_major" -ge 18 ] || die 5 "node $(node --version) is too old: the client's Vite 5 needs Node.js 18 or newer"

mkdir -p "$out"
out=$(cd "$out" && pwd)
# One build at a time in one --out folder.
exec 9>"$out/.lock"
flock 9

# A git repository of its own: bare (a mirror), or the top of a work tree (not a folder inside another one).
is_git() {
  [ -d "$1" ] || return 1
  [ "$(git -C "$1" rev-parse --is-bare-repository 2>/dev/null)" = true ] && return 0
  local top
  top=$(git -C "$1" rev-parse --show-toplevel 2>/dev/null) && [ "$(realpath "$top")" = "$(realpath "$1")" ]
}

# Where the sources come from: a folder with client/ in it, or a git repository (bare mirrors included).
if [ -z "$source_dir" ]; then
  for candidate in "$root/../.mirror/NVIDIA+personaplex/repo" /work/.mirror/NVIDIA+personaplex/repo \
      "$out/personaplex"; do
    if [ -f "$candidate/client/package.json" ] || is_git "$candidate"; then
      source_dir=$candidate
      break
    fi
  done
fi
if [ -z "$source_dir" ]; then
  say "no checkout given or found: cloning $upstream"
  rm -rf "$out/personaplex"
  if ! GIT_TERMINAL_PROMPT=0 timeout 180 git clone -q --depth 1 "$upstream" "$out/personaplex" >&2; then
    rm -rf "$out/personaplex"
    die 3 "no client sources: $upstream could not be cloned (offline?); pass --source PATH or set PPX_PERSONAPLEX_SOURCE"
  fi
  source_dir="$out/personaplex"
fi
[ -d "$source_dir" ] || die 3 "no client sources: $source_dir is not a folder"

# The version key: the commit for a git source (its client/ as committed), a hash of the files otherwise
# (a work tree's uncommitted edits count).
stage="$out/stage"
rm -rf "$stage"
mkdir -p "$stage"
# A work tree with uncommitted edits in client/ is built from its files; git sources from the commit.
use_git=0
if is_git "$source_dir"; then
  use_git=1
  if [ -f "$source_dir/client/package.json" ] && [ "$rev" = HEAD ] &&
      [ -n "$(git -C "$source_dir" status --porcelain -- client 2>/dev/null)" ]; then
    use_git=0
  fi
fi
if [ "$use_git" = 1 ]; then
  commit=$(git -C "$source_dir" rev-parse --verify -q "$rev^{commit}") ||
    die 3 "no client sources: $source_dir has no commit $rev"
  git -C "$source_dir" cat-file -e "$commit:client/package-lock.json" 2>/dev/null ||
    die 3 "no client sources: $source_dir at ${commit:0:12} has no client/package-lock.json"
  key="commit-$commit"
  from="$source_dir at commit $commit"
  git -C "$source_dir" archive "$commit" client | tar -x -C "$stage"
else
  [ -f "$source_dir/client/package-lock.json" ] ||
    die 3 "no client sources: $source_dir/client/package-lock.json is missing"
  (cd "$source_dir" && find client -path client/node_modules -prune -o -path client/dist -prune -o -type f -print0 |
    tar --null -T - -cf -) | tar -x -C "$stage"
  key="files-$(cd "$stage" && find client -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)"
  from="$source_dir (files, not a clean git checkout)"
fi

dist="$out/$key/dist"
if [ "$force" = 0 ] && [ -f "$out/$key/stamp" ] && [ -f "$dist/index.html" ]; then
  rm -rf "$stage"
  say "cached: $dist ($(head -1 "$out/$key/stamp"))"
  echo "$dist"
  exit 0
fi

say "building the client from $from with node $(node --version), npm $(npm --version)"
cd "$stage/client"
# The client's own lock file, exactly (npm ci); --prefer-offline reuses npm's cache when it has a package.
if ! npm ci --prefer-offline --no-audit --no-fund --loglevel=error >&2; then
  if ! timeout 30 npm ping >/dev/null 2>&1; then
    die 4 "npm ci failed and the npm registry is unreachable (offline?)"
  fi
  die 1 "npm ci failed"
fi
# src/env.ts refuses to start without VITE_QUEUE_API_PATH (the queue API, unused when the page is served
# by the server it talks to: the page's WebSocket goes to its own host's /api/chat).
VITE_QUEUE_API_PATH=/api npm run build >&2 || die 1 "npm run build failed"
[ -f dist/index.html ] || die 1 "npm run build wrote no dist/index.html"

rm -rf "${out:?}/$key"
mkdir -p "$out/$key"
mv dist "$dist"
{
  echo "$from"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) with node $(node --version), npm $(npm --version)"
} >"$out/$key/stamp"
cd "$out"
rm -rf "$stage"
say "built: $dist"
echo "$dist"
