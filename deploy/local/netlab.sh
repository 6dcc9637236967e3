#!/usr/bin/env bash
# The network lab of the reliability suite and the soak (tests/reliability/netlab.py):
# processes in network namespaces of their own, partitioned by nftables rules and slowed
# by toxiproxy, all on this machine.
#
#   deploy/local/netlab.sh ensure   install what the lab needs when missing: Debian's
#                                   nftables and iproute2 (as root), toxiproxy built from
#                                   its Go module into .local/bin
#   deploy/local/netlab.sh check    exit 0 when this machine can run the lab (root, netns,
#                                   nft), else say why
#   deploy/local/netlab.sh reset    remove what a lab left behind (its namespaces, bridge,
#                                   nftables tables and toxiproxy): a run that crashed
#   deploy/local/netlab.sh toxiproxy-path   print toxiproxy-server's path
#
# Every name the lab makes starts with "chl" (interfaces, namespaces) or "chorus_lab"
# (nftables tables), so reset never touches anything else on the machine.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# Shopify's TCP fault proxy: latency, resets and stalls on a path between two processes
# (this kernel has no netem qdisc). Built from the Go module proxy.
TOXIPROXY_VERSION="v2.12.0"
BIN_DIR="$CHORUS_ROOT/.local/bin"
TOXIPROXY_BIN="$BIN_DIR/toxiproxy-server-$TOXIPROXY_VERSION"

go_bin() { command -v go || { [[ -x /usr/local/go/bin/go ]] && echo /usr/local/go/bin/go; } || true; }

ensure_packages() {
  local missing=()
  command -v nft >/dev/null || missing+=(nftables)
  command -v ip >/dev/null || missing+=(iproute2)
  ((${#missing[@]} == 0)) && return 0
  [[ "$(id -u)" == 0 ]] || die "missing ${missing[*]} (Debian packages); the network lab needs root"
  log "installing Debian's ${missing[*]}"
  apt_install "${missing[@]}"
}

ensure_toxiproxy() {
  [[ -x "$TOXIPROXY_BIN" ]] && return 0
  local go work
  go="$(go_bin)"
  [[ -n "$go" ]] || die "no go: toxiproxy is built from its module, github.com/Shopify/toxiproxy/v2@$TOXIPROXY_VERSION"
  log "building toxiproxy $TOXIPROXY_VERSION into $BIN_DIR (go install, about a minute the first time)"
  mkdir -p "$BIN_DIR"
  work="$(mktemp -d)"
  GOBIN="$work" "$go" install -trimpath -ldflags "-s -w" \
    "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION" \
    || { rm -rf "$work"; die "go install github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION failed"; }
  mv "$work/server" "$TOXIPROXY_BIN"
  rm -rf "$work"
}

check() {
  [[ "$(id -u)" == 0 ]] || die "the network lab needs root (network namespaces, nftables)"
  command -v nft >/dev/null || die "no nft: run \`$0 ensure\`"
  local probe="chlprobe$$"
  ip netns add "$probe" 2>/dev/null || die "cannot create a network namespace here"
  ip netns exec "$probe" nft list tables >/dev/null 2>&1 || { ip netns del "$probe"; die "nftables does not work in a namespace here"; }
  ip netns del "$probe"
}

reset() {
  local ns link table
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^chl' || true); do
    # Whatever still runs in it (a service a crashed run left) goes with it.
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep '^chl' || true); do
    ip link del "$link" 2>/dev/null || true
  done
  for table in $(nft list tables 2>/dev/null | awk '$3 ~ /^chorus_lab/ {print $2" "$3}' | tr ' ' ':' || true); do
    nft delete table "${table%%:*}" "${table#*:}" 2>/dev/null || true
  done
  pkill -f "$BIN_DIR/toxiproxy-server" 2>/dev/null || true
}

case "${1:-}" in
  ensure) ensure_packages; ensure_toxiproxy ;;
  check) check ;;
  reset) reset ;;
  toxiproxy-path) echo "$TOXIPROXY_BIN" ;;
  *) die "usage: $0 ensure|check|reset|toxiproxy-path" ;;
esac
