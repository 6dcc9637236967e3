#!/usr/bin/env bash
# Local PostgreSQL for Chorus.
#
#   deploy/local/postgres.sh start|stop|restart|status|reset|url
#
# start  when a server already answers at $CHORUS_DATABASE_URL, uses it and
#        does nothing else. Otherwise installs Debian's `postgresql` package if
#        no server binaries exist, and runs a private cluster: initdb into
#        .local/postgres, port $CHORUS_PG_PORT on 127.0.0.1, database `chorus`.
#        A no-op when that cluster already runs.
# stop   stops the private cluster (fast shutdown); never a server it did not start.
# restart fast shutdown (open connections are cut, in-flight transactions roll
#        back) and start again, waiting until it answers: the reliability suite's
#        "PostgreSQL restart under load". Only the private cluster.
# reset  stop and delete the private cluster's data.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

PG_LINK="$CHORUS_LOCAL/postgres"
PG_HOME="$PG_LINK"
CHORUS_PG_PORT="${CHORUS_PG_PORT:-54329}"
CHORUS_DATABASE_URL="${CHORUS_DATABASE_URL:-postgresql://chorus:chorus@127.0.0.1:$CHORUS_PG_PORT/chorus}"

pg_bindir() {
  local d
  d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
  [[ -n "$d" && -x "$d/initdb" ]] && echo "$d"
}

ensure_binaries() {
  if [[ -n "$(pg_bindir)" ]]; then return 0; fi
  [[ "$(id -u)" == 0 ]] || die "no PostgreSQL server binaries; install Debian's 'postgresql' package (needs root) or set CHORUS_DATABASE_URL to a running server"
  log "installing Debian's postgresql package"
  apt_install postgresql
  [[ -n "$(pg_bindir)" ]] || die "postgresql installed but no server binaries under /usr/lib/postgresql"
}

# initdb and postgres refuse to run as root; the Debian package creates the
# 'postgres' user, so the private cluster runs as that user when we are root. From /:
# the caller's directory (a clone under /root, a mktemp -d) may be closed to that user.
as_owner() {
  if [[ "$(id -u)" == 0 ]]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi
}

# Where the cluster lives: .local/postgres in the checkout, unless we are root and the
# 'postgres' user cannot reach the checkout (a clone under /root or in a mktemp -d
# directory is mode 700). Then the data lives in /var/lib/chorus-postgres/<checkout
# hash>, and .local/postgres is a symlink to it, so logs stay where README.md says.
resolve_home() {  # [reset]: what is in the way is about to be removed anyway
  if [[ "$(id -u)" == 0 && ! -L "$PG_LINK" ]] && id postgres >/dev/null 2>&1; then
    mkdir -p "$CHORUS_LOCAL"
    if ! runuser -u postgres -- test -x "$CHORUS_LOCAL" 2>/dev/null; then
      local outside
      outside="/var/lib/chorus-postgres/$(printf '%s' "$CHORUS_LOCAL" | sha1sum | cut -c1-12)"
      if [[ "${1:-}" != reset && -d "$PG_LINK" && -n "$(ls -A "$PG_LINK" 2>/dev/null)" ]]; then
        die "$PG_LINK holds a cluster the 'postgres' user cannot reach; move it or run \`$0 reset\`"
      fi
      rm -rf "$PG_LINK"
      mkdir -p "$outside"
      ln -s "$outside" "$PG_LINK"
      log "the postgres user cannot enter $CHORUS_LOCAL; the cluster lives in $outside"
    fi
  fi
  if [[ -L "$PG_LINK" ]]; then PG_HOME="$(readlink -f "$PG_LINK")"; fi
  PG_DATA="$PG_HOME/data"
  PG_RUN="$PG_HOME/run"
  PG_LOG="$PG_HOME/postgres.log"
}

url_reachable() {
  command -v psql >/dev/null || return 1
  PGCONNECT_TIMEOUT=3 psql "$CHORUS_DATABASE_URL" -qtAc 'select 1' >/dev/null 2>&1
}

init_cluster() {
  [[ -f "$PG_DATA/PG_VERSION" ]] && return 0
  local bin pwfile
  bin="$(pg_bindir)"
  log "initdb into $PG_DATA"
  mkdir -p "$PG_HOME" "$PG_RUN"
  pwfile="$PG_HOME/.pw"
  echo chorus >"$pwfile"
  if [[ "$(id -u)" == 0 ]]; then chown -R postgres:postgres "$PG_HOME"; fi
  as_owner "$bin/initdb" -D "$PG_DATA" -U chorus --pwfile="$pwfile" \
    --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 >"$PG_HOME/initdb.log" 2>&1 \
    || { cat "$PG_HOME/initdb.log" >&2; die "initdb failed"; }
  rm -f "$pwfile"
  cat >>"$PG_DATA/postgresql.conf" <<CONF
# Chorus local cluster (deploy/local/postgres.sh)
listen_addresses = '127.0.0.1'
port = $CHORUS_PG_PORT
unix_socket_directories = '$PG_RUN'
# Every service replica holds a small pool; tests run several at once.
max_connections = 300
shared_buffers = 256MB
logging_collector = off
log_min_messages = warning
CONF
}

cmd_start() {
  if url_reachable; then
    log "PostgreSQL reachable at $CHORUS_DATABASE_URL; using it"
    return 0
  fi
  if port_open 127.0.0.1 "$CHORUS_PG_PORT" && [[ ! -f "$PG_DATA/postmaster.pid" ]]; then
    die "127.0.0.1:$CHORUS_PG_PORT is in use but does not accept $CHORUS_DATABASE_URL; free the port or set CHORUS_PG_PORT / CHORUS_DATABASE_URL"
  fi
  ensure_binaries
  resolve_home  # again: installing the package may just have created the postgres user
  init_cluster
  local bin t0=$SECONDS
  bin="$(pg_bindir)"
  mkdir -p "$PG_RUN"; [[ "$(id -u)" == 0 ]] && chown postgres:postgres "$PG_RUN" "$PG_HOME"
  touch "$PG_LOG"; [[ "$(id -u)" == 0 ]] && chown postgres:postgres "$PG_LOG"
  log "starting PostgreSQL on 127.0.0.1:$CHORUS_PG_PORT (log: $PG_LOG)"
  as_owner "$bin/pg_ctl" -D "$PG_DATA" -l "$PG_LOG" -w -t 60 start >/dev/null \
    || { tail -n 40 "$PG_LOG" >&2; die "PostgreSQL did not start"; }
  if ! as_owner "$bin/psql" -h "$PG_RUN" -p "$CHORUS_PG_PORT" -U chorus -d postgres -qtAc \
      "select 1 from pg_database where datname = 'chorus'" | grep -q 1; then
    as_owner "$bin/createdb" -h "$PG_RUN" -p "$CHORUS_PG_PORT" -U chorus chorus
  fi
  url_reachable || die "PostgreSQL started but $CHORUS_DATABASE_URL does not answer (see $PG_LOG)"
  log "PostgreSQL ready at $CHORUS_DATABASE_URL ($((SECONDS - t0))s)"
}

cmd_stop() {
  local bin
  bin="$(pg_bindir || true)"
  if [[ -z "$bin" || ! -f "$PG_DATA/postmaster.pid" ]]; then log "private PostgreSQL is not running"; return 0; fi
  as_owner "$bin/pg_ctl" -D "$PG_DATA" -m fast -w -t 60 stop >/dev/null && log "PostgreSQL stopped"
}

cmd_restart() {
  local bin t0=$SECONDS
  bin="$(pg_bindir || true)"
  if [[ -z "$bin" || ! -f "$PG_DATA/postmaster.pid" ]]; then die "the private PostgreSQL ($PG_DATA) is not running; nothing to restart"; fi
  log "restarting PostgreSQL (fast shutdown)"
  as_owner "$bin/pg_ctl" -D "$PG_DATA" -l "$PG_LOG" -m fast -w -t 60 restart >/dev/null \
    || { tail -n 40 "$PG_LOG" >&2; die "PostgreSQL did not restart"; }
  url_reachable || die "PostgreSQL restarted but $CHORUS_DATABASE_URL does not answer (see $PG_LOG)"
  log "PostgreSQL back at $CHORUS_DATABASE_URL ($((SECONDS - t0))s)"
}

cmd_status() {
  if [[ -f "$PG_DATA/postmaster.pid" ]] && url_reachable; then
    echo "postgres: running (private cluster, $CHORUS_DATABASE_URL)"
  elif url_reachable; then
    echo "postgres: reachable at $CHORUS_DATABASE_URL (not started by this script)"
  else
    echo "postgres: stopped"; return 3
  fi
}

cmd_reset() {
  cmd_stop
  rm -rf "$PG_HOME"
  [[ -L "$PG_LINK" ]] && rm -f "$PG_LINK"
  log "PostgreSQL data removed"
}

case "${1:-}" in
  start) resolve_home; cmd_start ;;
  stop) resolve_home; cmd_stop ;;
  restart) resolve_home; cmd_restart ;;
  status) resolve_home; cmd_status ;;
  reset) resolve_home reset; cmd_reset ;;
  url) echo "$CHORUS_DATABASE_URL" ;;
  *) echo "usage: $0 start|stop|restart|status|reset|url" >&2; exit 2 ;;
esac
