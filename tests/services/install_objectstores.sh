#!/usr/bin/env bash
# Azurite (the Azure Storage emulator) from npm into the repo's gitignored .services/.
# Idempotent and quick when present. moto_server and gcp-storage-emulator come from PyPI
# (the dev extra), the Node runtime from Debian (nodejs) when missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [[ -x .services/azurite/node_modules/.bin/azurite-blob ]]; then
  echo "tests/services/install_objectstores.sh: azurite already installed"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "tests/services/install_objectstores.sh: installing nodejs and npm from Debian"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm
fi
mkdir -p .services/azurite
npm install --prefix .services/azurite --no-audit --no-fund --loglevel=error azurite@3
echo "tests/services/install_objectstores.sh: azurite installed in .services/azurite"
