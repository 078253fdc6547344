#!/usr/bin/env bash
# Install one npm package into the repository's gitignored .services/<name> folder, for a
# test server that ships on npm (Azurite, kinesalite). Needs Node.js and npm; no root.
# Idempotent: does nothing (and needs no network) when ENTRY is already there.
#
#   bash tests/services/install_npm.sh NAME VERSION ENTRY
#
# ENTRY is the file, relative to .services/<name>/node_modules/<name>, whose presence
# proves the install (e.g. index.js).
set -euo pipefail

name=$1 version=$2 entry=$3
me="tests/services/install_npm.sh ($name)"
die() {
  echo "$me: $*" >&2
  exit 1
}

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
prefix="$root/.services/$name"
main="$prefix/node_modules/$name/$entry"

if [[ -f "$main" ]]; then
  echo "$me: already installed ($prefix)"
  exit 0
fi

command -v node >/dev/null 2>&1 || die "node is not installed (Debian: apt-get install nodejs npm)"
command -v npm >/dev/null 2>&1 || die "npm is not installed (Debian: apt-get install npm)"

mkdir -p "$prefix"
log=$(mktemp -t quixsinks-npm.XXXXXX.log)
trap 'rm -f "$log"' EXIT
echo "$me: installing $name@$version from npm into $prefix"
if ! npm install --prefix "$prefix" --no-audit --no-fund --omit=dev "$name@$version" >"$log" 2>&1; then
  tail -n 20 "$log" >&2
  die "npm install $name failed (output above)"
fi
[[ -f "$main" ]] || die "npm installed $name but $main is missing"
echo "$me: done ($name $version, node $(node --version))"
