#!/usr/bin/env bash
# Install Azurite (Microsoft's Azure Storage emulator, from npm) into .services/azurite, for
# the Azure Blob integration tests (tests/services/azurite.py). Node 20 works despite
# Azurite's engine warning. Idempotent.
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/install_npm.sh" \
  azurite "${AZURITE_VERSION:-3.37.0}" dist/src/blob/main.js
