#!/usr/bin/env bash
# The headless browser the console's browser tests drive: Debian's chromium and its
# chromedriver (Selenium talks to the driver; the driver starts the browser).
#
#   deploy/local/browser.sh ensure   install both when missing (apt-get; needs root)
#   deploy/local/browser.sh paths    print CHORUS_CHROMIUM=... and CHORUS_CHROMEDRIVER=...
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

chromium_bin() { command -v chromium || command -v chromium-browser || true; }
driver_bin() { command -v chromedriver || { [[ -x /usr/lib/chromium/chromedriver ]] && echo /usr/lib/chromium/chromedriver; } || true; }

ensure() {
  if [[ -n "$(chromium_bin)" && -n "$(driver_bin)" ]]; then return 0; fi
  [[ "$(id -u)" == 0 ]] || die "no chromium/chromedriver; install Debian's 'chromium' and 'chromium-driver' packages (needs root)"
  log "installing Debian's chromium and chromium-driver packages"
  apt_install --no-install-recommends chromium chromium-driver fonts-dejavu-core
  [[ -n "$(chromium_bin)" && -n "$(driver_bin)" ]] || die "chromium installed but its binaries are not on PATH"
}

case "${1:-}" in
  ensure) ensure ;;
  paths) echo "CHORUS_CHROMIUM=$(chromium_bin)"; echo "CHORUS_CHROMEDRIVER=$(driver_bin)" ;;
  *) die "usage: $0 ensure|paths" ;;
esac
