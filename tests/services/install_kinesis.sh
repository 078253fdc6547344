#!/usr/bin/env bash
# Install kinesalite (a Kinesis implementation on LevelDB, from npm) into .services/kinesalite,
# for the Kinesis tests and benchmark. Its CLI has no host flag: tests/services/kinesalite.py
# starts it bound to 127.0.0.1 through its createServer() API. Idempotent.
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/install_npm.sh" \
  kinesalite "${KINESALITE_VERSION:-3.3.3}" index.js
