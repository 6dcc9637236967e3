#!/usr/bin/env bash
# Makes `docker compose` work, so docker-compose.yml can be validated with
# `docker compose config` on machines without a Docker engine.
#
# Such machines may have the docker client but not its compose plugin. Then this
# builds Docker Compose v2 from the Go module proxy (about 2-3 minutes, once; the
# binary is kept in .local/docker/cli-plugins) and installs it where the client
# looks for a user's plugins, ${DOCKER_CONFIG:-~/.docker}/cli-plugins, as Docker's
# manual install does. So plain `docker compose` works for tests, users and CI.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

COMPOSE_VERSION="${COMPOSE_VERSION:-v2.40.3}"
BUILT="$CHORUS_LOCAL/docker/cli-plugins/docker-compose"
USER_PLUGINS="${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"

command -v docker >/dev/null || die "no docker client on this machine"
docker compose version >/dev/null 2>&1 && exit 0
if [[ ! -x "$BUILT" ]]; then
  command -v go >/dev/null || die "docker has no compose plugin and Go is missing to build one"
  log "building Docker Compose $COMPOSE_VERSION from the Go module proxy (once, a few minutes)"
  work="$(mktemp -d)"
  trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
  # `go install pkg@version` refuses modules with exclude directives, so build
  # the downloaded module as the main module instead.
  src="$(go mod download -json "github.com/docker/compose/v2@$COMPOSE_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
  cp -r "$src" "$work/src"; chmod -R u+w "$work/src"
  mkdir -p "$(dirname "$BUILT")"
  (cd "$work/src" && go build -trimpath -o "$BUILT" ./cmd) >&2 || die "building docker compose failed"
fi
mkdir -p "$USER_PLUGINS" || die "cannot create $USER_PLUGINS for the compose plugin"
install -m 0755 "$BUILT" "$USER_PLUGINS/docker-compose"
docker compose version >/dev/null 2>&1 || die "installed $USER_PLUGINS/docker-compose but \`docker compose\` still fails"
log "installed Docker Compose $COMPOSE_VERSION as $USER_PLUGINS/docker-compose"
