# Shared settings for deploy/local/*.sh. Sourced, never run.
# Everything the local stack writes lives in $CHORUS_LOCAL (git-ignored).
set -euo pipefail

CHORUS_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CHORUS_LOCAL="${CHORUS_LOCAL:-$CHORUS_ROOT/.local}"

log() { printf '[%s] %s\n' "$(basename "$0" .sh)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# apt_install [OPTION...] PACKAGE...: install Debian packages, quietly and without questions
# (as root: callers check first, to say what is missing when they are not).
apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq "$@" >/dev/null || die "apt-get install $* failed"
}

# port_open HOST PORT -> 0 when something accepts TCP connections there.
port_open() {
  (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null && return 0 || return 1
}

# pid_alive PIDFILE -> 0 when the pid in the file is a running process.
pid_alive() {
  [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

# stop_pid PIDFILE NAME TIMEOUT_S: SIGTERM, wait, then SIGKILL as a last resort.
stop_pid() {
  local pidfile="$1" name="$2" timeout="${3:-60}" pid i
  if ! pid_alive "$pidfile"; then
    rm -f "$pidfile"; log "$name is not running"; return 0
  fi
  pid="$(cat "$pidfile")"
  log "stopping $name (pid $pid, SIGTERM)"
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < timeout * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$pidfile"; log "$name stopped"; return 0; }
    sleep 0.1
  done
  log "$name did not stop within ${timeout}s; sending SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$pidfile"
}
