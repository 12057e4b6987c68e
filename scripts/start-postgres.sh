#!/usr/bin/env bash
# PostgreSQL for veriloop (CI, tests, a local server): installs Debian's `postgresql` when missing,
# starts the Debian cluster "main" through pg_ctlcluster (the server refuses to run as root, and
# pg_ctlcluster switches to the postgres user), creates a login role with CREATEDB and a database
# it owns, and prints the SQLAlchemy URL as the last line. Idempotent: run it again and it only
# prints the URL. Works as root on a fresh Debian 12.
#
#   scripts/start-postgres.sh            start (or find running) and print the URL
#   scripts/start-postgres.sh stop       stop the cluster
#   export VERILOOP_TEST_POSTGRES_URL="$(scripts/start-postgres.sh | tail -n 1)"
#
# Settings (environment): VERILOOP_PG_USER, VERILOOP_PG_PASSWORD, VERILOOP_PG_DB (all default to
# "veriloop"), VERILOOP_PG_PORT (5432; used when the cluster is created).
set -euo pipefail

action="${1:-start}"
user="${VERILOOP_PG_USER:-veriloop}"
password="${VERILOOP_PG_PASSWORD:-veriloop}"
database="${VERILOOP_PG_DB:-veriloop}"
port="${VERILOOP_PG_PORT:-5432}"

log() { echo "start-postgres: $*" >&2; }
die() { log "$*"; exit 1; }

[[ "$user" =~ ^[a-z_][a-z0-9_]*$ ]] || die "VERILOOP_PG_USER must be a plain lower-case identifier"
[[ "$database" =~ ^[a-z_][a-z0-9_]*$ ]] || die "VERILOOP_PG_DB must be a plain lower-case identifier"
[[ "$port" =~ ^[0-9]+$ ]] || die "VERILOOP_PG_PORT must be a number"

newest_version() {
    local bins
    bins=$(ls -d /usr/lib/postgresql/*/bin/postgres 2>/dev/null || true)
    [[ -n "$bins" ]] || return 0
    echo "$bins" | sed -E 's|/usr/lib/postgresql/([^/]+)/bin/postgres|\1|' | sort -V | tail -n 1
}

install_postgres() {
    [[ $(id -u) -eq 0 ]] || die "PostgreSQL is not installed; run as root to install Debian's postgresql"
    log "installing Debian's postgresql"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q postgresql >&2; then
        apt-get update -q >&2
        apt-get install -y -q postgresql >&2
    fi
}

as_postgres() {
    if [[ $(id -u) -eq 0 ]]; then
        runuser -u postgres -- "$@"
    else
        sudo -n -u postgres -- "$@"
    fi
}

version="$(newest_version)"
if [[ -z "$version" || -z "$(command -v pg_ctlcluster || true)" ]]; then
    [[ "$action" == "stop" ]] && exit 0
    install_postgres
    version="$(newest_version)"
    [[ -n "$version" ]] || die "postgresql installed but no server binaries under /usr/lib/postgresql"
fi

if [[ "$action" == "stop" ]]; then
    if pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main" && $4 == "online"' | grep -q .; then
        pg_ctlcluster "$version" main stop
        log "stopped cluster $version/main"
    fi
    exit 0
fi
[[ "$action" == "start" ]] || die "unknown action '$action' (start or stop)"

if ! pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main"' | grep -q .; then
    log "creating cluster $version/main on port $port"
    pg_createcluster --port "$port" "$version" main >&2
fi
port="$(pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main" {print $3}')"

if ! pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main" && $4 == "online"' | grep -q .; then
    log "starting cluster $version/main"
    pg_ctlcluster "$version" main start
fi
for _ in $(seq 1 150); do
    pg_isready -q -h 127.0.0.1 -p "$port" && break
    sleep 0.2
done
pg_isready -q -h 127.0.0.1 -p "$port" || die "the server on port $port did not become ready"

# Role (password refreshed on every run) and database, through the local socket as postgres.
as_postgres psql -q -p "$port" -d postgres -v ON_ERROR_STOP=1 -v user="$user" -v password="$password" >&2 <<'SQL'
SELECT format('CREATE ROLE %I LOGIN CREATEDB', :'user')
WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'user') \gexec
SELECT format('ALTER ROLE %I WITH LOGIN CREATEDB PASSWORD %L', :'user', :'password') \gexec
SQL
as_postgres psql -q -p "$port" -d postgres -v ON_ERROR_STOP=1 -v user="$user" -v db="$database" >&2 <<'SQL'
SELECT format('CREATE DATABASE %I OWNER %I', :'db', :'user')
WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'db') \gexec
SQL

encoded_password="$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$password" 2>/dev/null || echo "$password")"
echo "postgresql+psycopg://${user}:${encoded_password}@127.0.0.1:${port}/${database}"
