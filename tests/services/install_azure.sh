#!/usr/bin/env bash
# Install Azurite (Microsoft's Azure Storage emulator, from npm) into the repository's
# gitignored .services/azurite folder, for the Azure Blob integration tests
# (tests/services/azurite.py). Needs Node.js and npm (Node 20 works despite Azurite's
# engine warning); no root needed.
# Idempotent: does nothing (and needs no network) when Azurite is already there.
set -euo pipefail

die() {
  echo "tests/services/install_azure.sh: $*" >&2
  exit 1
}

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
prefix="$root/.services/azurite"
main="$prefix/node_modules/azurite/dist/src/blob/main.js"
version="${AZURITE_VERSION:-3.37.0}"

if [[ -f "$main" ]]; then
  echo "tests/services/install_azure.sh: azurite already installed ($prefix)"
  exit 0
fi

command -v node >/dev/null 2>&1 || die "node is not installed (Debian: apt-get install nodejs npm)"
command -v npm >/dev/null 2>&1 || die "npm is not installed (Debian: apt-get install npm)"

mkdir -p "$prefix"
log=$(mktemp -t quixsinks-npm.XXXXXX.log)
trap 'rm -f "$log"' EXIT
echo "tests/services/install_azure.sh: installing azurite@$version from npm into $prefix"
if ! npm install --prefix "$prefix" --no-audit --no-fund --omit=dev "azurite@$version" >"$log" 2>&1; then
  tail -n 20 "$log" >&2
  die "npm install azurite failed (output above)"
fi
[[ -f "$main" ]] || die "npm installed azurite but $main is missing"
echo "tests/services/install_azure.sh: done (azurite $version, node $(node --version))"
