#!/bin/bash
# postgres.Dockerfile's entrypoint: the official image's first start, for what
# docker-compose.yml uses of it. Runs as root to read the password file (only root may: the
# `secrets` service writes it 0600), initialises the cluster once as `postgres`, then runs
# the server as `postgres`.
set -euo pipefail
if [[ "${1:-}" != postgres ]]; then exec "$@"; fi
shift
user="${POSTGRES_USER:-postgres}"
db="${POSTGRES_DB:-$user}"
if [[ -n "${POSTGRES_PASSWORD_FILE:-}" ]]; then
  password="$(cat "$POSTGRES_PASSWORD_FILE")"
else
  password="${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD or POSTGRES_PASSWORD_FILE}"
fi
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
if [[ ! -s "$PGDATA/PG_VERSION" ]]; then
  pwfile="$(mktemp)"; printf '%s\n' "$password" >"$pwfile"; chown postgres "$pwfile"
  as_postgres initdb -D "$PGDATA" --username="$user" --pwfile="$pwfile" --auth-local=trust \
    --auth-host=scram-sha-256 --encoding=UTF8 >/dev/null
  rm -f "$pwfile"
  # Every other container reaches it over the compose network, with a password.
  printf 'host all all all scram-sha-256\n' >>"$PGDATA/pg_hba.conf"
  if [[ "$db" != postgres ]]; then
    as_postgres postgres --single -D "$PGDATA" postgres <<<"CREATE DATABASE \"$db\";" >/dev/null
  fi
fi
unset password POSTGRES_PASSWORD
exec setpriv --reuid=postgres --regid=postgres --init-groups \
  postgres -D "$PGDATA" -c listen_addresses='*' "$@"
