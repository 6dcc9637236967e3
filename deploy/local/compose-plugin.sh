#!/usr/bin/env bash
# Makes `docker compose` available for validating docker-compose.yml.
#
# Machines without a Docker engine may still have the docker client but not
# its compose plugin. Then this builds Docker Compose v2 from the Go module
# proxy (about 2-3 minutes, once) into .local/docker/cli-plugins, and tests run
# `docker compose` with DOCKER_CONFIG=.local/docker. Prints the DOCKER_CONFIG
# to use (empty when the system's plugin works).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

COMPOSE_VERSION="${COMPOSE_VERSION:-v2.40.3}"
PLUGIN_DIR="$CHORUS_LOCAL/docker/cli-plugins"

command -v docker >/dev/null || die "no docker client on this machine"
if docker compose version >/dev/null 2>&1; then echo ""; exit 0; fi
if [[ -x "$PLUGIN_DIR/docker-compose" ]] && DOCKER_CONFIG="$CHORUS_LOCAL/docker" docker compose version >/dev/null 2>&1; then
  echo "$CHORUS_LOCAL/docker"; exit 0
fi
command -v go >/dev/null || die "docker has no compose plugin and Go is missing to build one"
log "building Docker Compose $COMPOSE_VERSION from the Go module proxy (once, a few minutes)"
work="$(mktemp -d)"
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
# `go install pkg@version` refuses modules with exclude directives, so build
# the downloaded module as the main module instead.
src="$(go mod download -json "github.com/docker/compose/v2@$COMPOSE_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
cp -r "$src" "$work/src"; chmod -R u+w "$work/src"
mkdir -p "$PLUGIN_DIR"
(cd "$work/src" && go build -trimpath -o "$PLUGIN_DIR/docker-compose" ./cmd) >&2 || die "building docker compose failed"
echo "$CHORUS_LOCAL/docker"
