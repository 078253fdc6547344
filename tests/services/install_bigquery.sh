#!/usr/bin/env bash
# Install bqemulator (a BigQuery emulator on DuckDB and SQLGlot, REST and gRPC with the
# Storage Write API, from PyPI) into its own virtualenv .services/bqemulator, for the
# BigQuery tests and benchmark. tests/services/bqemulator.py starts it with two runtime
# patches (see there). Idempotent: does nothing (and needs no network) when installed.
set -euo pipefail
me="tests/services/install_bigquery.sh"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
prefix="$root/.services/bqemulator"
version="${BQEMULATOR_VERSION:-1.4.0}"

if [[ -x "$prefix/bin/bqemulator" ]] && "$prefix/bin/python" -c "import numpy, bqemulator" 2>/dev/null; then
  echo "$me: already installed ($prefix)"
  exit 0
fi
python=${PYTHON:-python3}
"$python" -m venv "$prefix"
log=$(mktemp -t quixsinks-bqemulator.XXXXXX.log)
trap 'rm -f "$log"' EXIT
echo "$me: installing bqemulator $version from PyPI into $prefix"
# numpy: bqemulator registers DuckDB Python UDFs at start, which need it (not declared)
if ! "$prefix/bin/pip" install --quiet "bqemulator==$version" numpy >"$log" 2>&1; then
  tail -n 20 "$log" >&2
  echo "$me: pip install bqemulator failed (output above)" >&2
  exit 1
fi
echo "$me: done"
