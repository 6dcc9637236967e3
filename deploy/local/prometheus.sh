#!/usr/bin/env bash
# Prometheus and promtool from Debian's `prometheus` package: `make observe` runs the
# server against the dev stack's targets; `make test` checks and unit-tests the alert rules
# and every dashboard's PromQL with promtool.
#
#   deploy/local/prometheus.sh ensure   install the package when missing (apt-get; needs root)
#   deploy/local/prometheus.sh paths    print CHORUS_PROMETHEUS=... and CHORUS_PROMTOOL=...
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

prometheus_bin() { command -v prometheus || true; }
promtool_bin() { command -v promtool || true; }

ensure() {
  if [[ -n "$(prometheus_bin)" && -n "$(promtool_bin)" ]]; then return 0; fi
  [[ "$(id -u)" == 0 ]] || die "no prometheus/promtool; install Debian's 'prometheus' package (needs root)"
  log "installing Debian's prometheus package (prometheus, promtool)"
  apt_install --no-install-recommends prometheus
  # The package's service is not wanted: `make observe` runs the server in the foreground.
  if command -v systemctl >/dev/null && systemctl is-active -q prometheus 2>/dev/null; then
    systemctl disable --now prometheus >/dev/null 2>&1 || true
  fi
  [[ -n "$(prometheus_bin)" && -n "$(promtool_bin)" ]] || die "prometheus installed but its binaries are not on PATH"
}

case "${1:-}" in
  ensure) ensure ;;
  paths) echo "CHORUS_PROMETHEUS=$(prometheus_bin)"; echo "CHORUS_PROMTOOL=$(promtool_bin)" ;;
  *) die "usage: $0 ensure|paths" ;;
esac
