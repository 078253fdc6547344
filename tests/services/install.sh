#!/usr/bin/env bash
# Install, from Debian, what the integration tests and benchmarks need when it is missing:
#   postgresql              server binaries (initdb, pg_ctl) under /usr/lib/postgresql/<ver>/bin
#   libpostgresql-jdbc-java PostgreSQL JDBC driver (/usr/share/java/postgresql.jar), for benchmarks
# Idempotent: does nothing (and needs no network) when both are present.
# The tests never use Debian's own `main` cluster; they start a throwaway one
# (tests/services/postgres.py). If apt starts `main` on install, it is left alone.
set -euo pipefail

die() {
  echo "tests/services/install.sh: $*" >&2
  exit 1
}

have_pg_ctl() { ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; }
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

missing=()
have_pg_ctl || missing+=(postgresql)
have_pkg libpostgresql-jdbc-java || missing+=(libpostgresql-jdbc-java)

if ((${#missing[@]} == 0)); then
  echo "tests/services/install.sh: postgresql and libpostgresql-jdbc-java already installed"
  exit 0
fi

sudo=()
if ((EUID != 0)); then
  command -v sudo >/dev/null 2>&1 || die "need root (or sudo) to install: ${missing[*]}"
  sudo=(sudo)
fi

log=$(mktemp -t quixsinks-apt.XXXXXX.log)
trap 'rm -f "$log"' EXIT

echo "tests/services/install.sh: installing ${missing[*]} from Debian"
if ! "${sudo[@]}" apt-get update -qq >"$log" 2>&1 ||
  ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$log" 2>&1; then
  tail -n 20 "$log" >&2
  die "apt-get failed installing ${missing[*]} (output above)"
fi

have_pg_ctl || die "postgresql installed but no /usr/lib/postgresql/*/bin/pg_ctl found"
have_pkg libpostgresql-jdbc-java || die "libpostgresql-jdbc-java did not install"
echo "tests/services/install.sh: done ($(ls -d /usr/lib/postgresql/*/bin | tail -n 1))"
