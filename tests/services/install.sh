#!/usr/bin/env bash
# Install, from Debian, what the integration tests and benchmarks need when it is missing:
#   postgresql              server binaries (initdb, pg_ctl) under /usr/lib/postgresql/<ver>/bin
#   libpostgresql-jdbc-java PostgreSQL JDBC driver (/usr/share/java/postgresql.jar), for benchmarks
#   influxdb                InfluxDB 1.x server (/usr/bin/influxd), stand-in for InfluxDB 3
#   influxdb-client         its `influx` CLI: `influx -import`, the influxdb1 benchmark's ceiling
#   redis-server redis-tools Redis 7 server and redis-cli / redis-benchmark (the redis sink)
#   mosquitto mosquitto-clients MQTT broker, mosquitto_passwd and mosquitto_pub (the mqtt sink)
# Idempotent: does nothing (and needs no network) when all are present.
# The tests never use Debian's own `main` PostgreSQL cluster nor its `influxdb` service; they
# start throwaway ones (tests/services/postgres.py, tests/services/influxdb.py). If apt starts
# either on install, it is left alone (and reported, for influxd).
set -euo pipefail

die() {
  echo "tests/services/install.sh: $*" >&2
  exit 1
}

have_pg_ctl() { ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; }
have_influxd() { command -v influxd >/dev/null 2>&1 || [[ -x /usr/bin/influxd ]]; }
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
influxd_pids() { pgrep -x influxd 2>/dev/null | sort || true; }

missing=()
have_pg_ctl || missing+=(postgresql)
have_pkg libpostgresql-jdbc-java || missing+=(libpostgresql-jdbc-java)
have_influxd || missing+=(influxdb)
have_pkg influxdb-client || missing+=(influxdb-client) # `influx -import`: the influxdb1 bench's ceiling
have_pkg redis-server || missing+=(redis-server)
have_pkg redis-tools || missing+=(redis-tools)
have_pkg mosquitto || missing+=(mosquitto)
have_pkg mosquitto-clients || missing+=(mosquitto-clients)

if ((${#missing[@]} == 0)); then
  echo "tests/services/install.sh: postgresql, libpostgresql-jdbc-java, influxdb (and its client), redis and mosquitto already installed"
  exit 0
fi

sudo=()
if ((EUID != 0)); then
  command -v sudo >/dev/null 2>&1 || die "need root (or sudo) to install: ${missing[*]}"
  sudo=(sudo)
fi

log=$(mktemp -t quixsinks-apt.XXXXXX.log)
trap 'rm -f "$log"' EXIT

influxd_before=$(influxd_pids)
echo "tests/services/install.sh: installing ${missing[*]} from Debian"
if ! "${sudo[@]}" apt-get update -qq >"$log" 2>&1 ||
  ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$log" 2>&1; then
  tail -n 20 "$log" >&2
  die "apt-get failed installing ${missing[*]} (output above)"
fi

have_pg_ctl || die "postgresql installed but no /usr/lib/postgresql/*/bin/pg_ctl found"
have_pkg libpostgresql-jdbc-java || die "libpostgresql-jdbc-java did not install"
have_influxd || die "influxdb installed but no influxd found"
command -v redis-server >/dev/null 2>&1 || die "redis-server installed but not on PATH"
[[ -x /usr/sbin/mosquitto ]] || die "mosquitto installed but no /usr/sbin/mosquitto found"

# Debian's influxdb postinst may start its own service (0.0.0.0:8086, /var/lib/influxdb) when
# no policy-rc.d forbids it. The tests do not need it (their servers use free ports); leave it.
influxd_new=$(comm -13 <(echo "$influxd_before") <(influxd_pids) | tr '\n' ' ')
if [[ -n "${influxd_new// /}" ]]; then
  echo "tests/services/install.sh: note: the influxdb package started its service" \
    "(pid ${influxd_new% }); the tests do not use it, stop it with: service influxdb stop"
fi
echo "tests/services/install.sh: done ($(ls -d /usr/lib/postgresql/*/bin | tail -n 1)," \
  "$(influxd version 2>/dev/null || echo influxd))"
