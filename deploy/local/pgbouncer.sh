#!/usr/bin/env bash
# PgBouncer from Debian's `pgbouncer` package: `make test` runs a workflow's services through
# it in transaction mode (tests/support/pgbouncer.py starts and stops its own instance).
#
#   deploy/local/pgbouncer.sh ensure   install the package when missing (apt-get; needs root)
#   deploy/local/pgbouncer.sh path     print CHORUS_PGBOUNCER=...
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

pgbouncer_bin() { command -v pgbouncer || ls /usr/sbin/pgbouncer 2>/dev/null || true; }

ensure() {
  if [[ -n "$(pgbouncer_bin)" ]]; then return 0; fi
  [[ "$(id -u)" == 0 ]] || die "no pgbouncer; install Debian's 'pgbouncer' package (needs root)"
  log "installing Debian's pgbouncer package"
  apt_install --no-install-recommends pgbouncer
  # The package's service is not wanted: each test runs an instance of its own.
  if command -v systemctl >/dev/null && systemctl is-active -q pgbouncer 2>/dev/null; then
    systemctl disable --now pgbouncer >/dev/null 2>&1 || true
  fi
  [[ -n "$(pgbouncer_bin)" ]] || die "pgbouncer installed but its binary is not found"
}

case "${1:-}" in
  ensure) ensure ;;
  path) echo "CHORUS_PGBOUNCER=$(pgbouncer_bin)" ;;
  *) die "usage: $0 ensure|path" ;;
esac
