#!/usr/bin/env bash
# Install kinesalite (a Kinesis implementation on LevelDB, from npm) into the repository's
# gitignored .services/kinesalite folder, for the Kinesis tests and benchmark. Needs Node.js
# and npm; no root needed. kinesalite's CLI has no host flag: tests/services/kinesalite.py
# starts it bound to 127.0.0.1 through its createServer() API.
# Idempotent: does nothing (and needs no network) when kinesalite is already there.
set -euo pipefail

die() {
  echo "tests/services/install_kinesis.sh: $*" >&2
  exit 1
}

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
prefix="$root/.services/kinesalite"
main="$prefix/node_modules/kinesalite/index.js"
version="${KINESALITE_VERSION:-3.3.3}"

if [[ -f "$main" ]]; then
  echo "tests/services/install_kinesis.sh: kinesalite already installed ($prefix)"
  exit 0
fi

command -v node >/dev/null 2>&1 || die "node is not installed (Debian: apt-get install nodejs npm)"
command -v npm >/dev/null 2>&1 || die "npm is not installed (Debian: apt-get install npm)"

mkdir -p "$prefix"
log=$(mktemp -t quixsinks-npm.XXXXXX.log)
trap 'rm -f "$log"' EXIT
echo "tests/services/install_kinesis.sh: installing kinesalite@$version from npm into $prefix"
if ! npm install --prefix "$prefix" --no-audit --no-fund --omit=dev "kinesalite@$version" >"$log" 2>&1; then
  tail -n 20 "$log" >&2
  die "npm install kinesalite failed (output above)"
fi
[[ -f "$main" ]] || die "npm installed kinesalite but $main is missing"
echo "tests/services/install_kinesis.sh: done (kinesalite $version, node $(node --version))"
