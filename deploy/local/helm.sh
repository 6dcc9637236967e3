#!/usr/bin/env bash
# Helm, built from its Go module, and the chart's validator (deploy/helm/validate: the
# Kubernetes, KEDA, Strimzi and CloudNativePG schemas from npm), for the chart's tests.
#
#   deploy/local/helm.sh ensure   build helm into .local/bin when missing (go install; the
#                                 first build takes minutes) and install the validator's
#                                 packages (npm ci) when missing or stale
#   deploy/local/helm.sh path     print helm's path
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

HELM_VERSION="v3.22.0"
# The Kubernetes version helm assumes without a cluster (`helm template`, `helm lint`'s
# deprecation checks): that of its client-go (v0.37 -> 1.37), as Helm's own Makefile sets it.
KUBE_MINOR="37"
BIN_DIR="$CHORUS_ROOT/.local/bin"
HELM_BIN="$BIN_DIR/helm"
VALIDATOR_DIR="$CHORUS_ROOT/deploy/helm/validate"

go_bin() { command -v go || { [[ -x /usr/local/go/bin/go ]] && echo /usr/local/go/bin/go; } || true; }

ensure_helm() {
  if [[ -x "$HELM_BIN" ]] && "$HELM_BIN" version --short 2>/dev/null | grep -q "^$HELM_VERSION"; then return 0; fi
  local go
  go="$(go_bin)"
  [[ -n "$go" ]] || die "no go (Go 1.26): helm is built from its module, helm.sh/helm/v3@$HELM_VERSION"
  log "building helm $HELM_VERSION into $BIN_DIR (go install; a few minutes the first time)"
  mkdir -p "$BIN_DIR"
  local pkg=helm.sh/helm/v3
  GOBIN="$BIN_DIR" "$go" install -trimpath -ldflags "-s -w \
    -X $pkg/internal/version.version=$HELM_VERSION -X $pkg/internal/version.gitTreeState=clean \
    -X $pkg/pkg/chartutil.k8sVersionMajor=1 -X $pkg/pkg/chartutil.k8sVersionMinor=$KUBE_MINOR \
    -X $pkg/pkg/lint/rules.k8sVersionMajor=1 -X $pkg/pkg/lint/rules.k8sVersionMinor=$KUBE_MINOR" \
    "$pkg/cmd/helm@$HELM_VERSION" || die "go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION failed"
  [[ -x "$HELM_BIN" ]] || die "go install finished but $HELM_BIN is missing"
}

ensure_validator() {
  command -v node >/dev/null || die "no node: the chart's validator runs on Node.js (Debian's nodejs)"
  command -v npm >/dev/null || die "no npm: the validator's packages come from the npm registry"
  local stamp="$VALIDATOR_DIR/node_modules/.package-lock.json"
  if [[ -f "$stamp" && ! "$VALIDATOR_DIR/package-lock.json" -nt "$stamp" ]]; then return 0; fi
  log "installing the chart validator's packages (npm ci in deploy/helm/validate)"
  (cd "$VALIDATOR_DIR" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) || die "npm ci failed"
}

case "${1:-}" in
  ensure) ensure_helm; ensure_validator ;;
  path) echo "$HELM_BIN" ;;
  *) die "usage: $0 ensure|path" ;;
esac
