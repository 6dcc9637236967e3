#!/usr/bin/env bash
# A Docker engine and the base images docker-compose.yml builds on, for `make test-compose`.
#
#   deploy/local/docker.sh ensure   a running engine and `docker compose`
#   deploy/local/docker.sh bases    the base images; prints the env file to give compose
#   deploy/local/docker.sh stop     stops the engine this script started
#
# ensure  uses the engine there is; else (as root) installs Debian's docker.io when dockerd
#         is missing and starts dockerd (overlay2), its log and pid in .local/docker. The
#         compose plugin comes from deploy/local/compose-plugin.sh.
# bases   docker-compose.yml names the official images (python:3.11-slim to build on,
#         apache/kafka, postgres) and takes others from CHORUS_PYTHON_IMAGE,
#         CHORUS_KAFKA_IMAGE and CHORUS_POSTGRES_IMAGE. Where a container registry answers,
#         the official ones are used. Where none does, the same roles are built from Debian
#         packages (deploy/docker/bases): a debootstrap of bookworm imported as
#         chorus-local/debian:bookworm, then Python 3.11, Java 17 with the broker's jars
#         from Maven Central, and PostgreSQL 15 on it. Either way it writes
#         .local/docker/bases.env and prints its path, for `docker compose --env-file`.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

DOCKER_HOME="$CHORUS_LOCAL/docker"
PIDFILE="$DOCKER_HOME/dockerd.pid"
BASES_ENV="$DOCKER_HOME/bases.env"
BASES="$CHORUS_ROOT/deploy/docker/bases"
DEBIAN_BASE="chorus-local/debian:bookworm"
ENGINE_START_TIMEOUT="${ENGINE_START_TIMEOUT:-60}"

engine_up() { docker info >/dev/null 2>&1; }

cmd_ensure() {
  mkdir -p "$DOCKER_HOME"
  if ! engine_up; then
    [[ "$(id -u)" == 0 ]] || die "no Docker engine answers, and starting one needs root"
    if ! command -v dockerd >/dev/null; then
      log "installing Debian's docker.io (the engine)"
      apt_install --no-install-recommends docker.io
    fi
    log "starting dockerd (log: $DOCKER_HOME/dockerd.log)"
    nohup dockerd --storage-driver=overlay2 --pidfile "$PIDFILE" \
      >"$DOCKER_HOME/dockerd.log" 2>&1 &
    local i
    for ((i = 0; i < ENGINE_START_TIMEOUT * 2; i++)); do
      engine_up && break
      sleep 0.5
    done
    engine_up || die "dockerd did not answer within ${ENGINE_START_TIMEOUT}s; see $DOCKER_HOME/dockerd.log"
  fi
  "$CHORUS_ROOT/deploy/local/compose-plugin.sh"
}

registry_reachable() { docker pull -q python:3.11-slim >/dev/null 2>&1; }

# This machine's own CAs (Debian's place for them): a TLS-intercepting proxy between it and
# the package registries signs with one, and the images' pip must trust it as the host does.
LOCAL_CAS=/usr/local/share/ca-certificates

local_cas_digest() { cat "$LOCAL_CAS"/*.crt 2>/dev/null | sha256sum | cut -c1-16; }

debian_base() {
  local want
  want="$(local_cas_digest)"
  [[ "$(docker image inspect -f '{{ index .Config.Labels "chorus.local-cas" }}' "$DEBIAN_BASE" 2>/dev/null)" == "$want" ]] \
    && return 0
  command -v debootstrap >/dev/null || apt_install debootstrap
  local root
  root="$(mktemp -d)"
  # The rootfs is root's (device nodes, setuid binaries): removed whole whatever happens.
  trap 'rm -rf "$root"' RETURN
  log "debootstrap of Debian bookworm (minbase) for $DEBIAN_BASE (about a minute, once)"
  debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >"$DOCKER_HOME/debootstrap.log" 2>&1 \
    || die "debootstrap failed; see $DOCKER_HOME/debootstrap.log"
  # Security and point-release fixes too, as the official images carry them.
  cat >"$root/etc/apt/sources.list" <<LIST
deb http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
LIST
  if compgen -G "$LOCAL_CAS/*.crt" >/dev/null; then
    log "the bases trust this machine's own CAs too ($LOCAL_CAS)"
    mkdir -p "$root$LOCAL_CAS" && cp "$LOCAL_CAS"/*.crt "$root$LOCAL_CAS/"
  fi
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | docker import -c "LABEL chorus.local-cas=$want" - "$DEBIAN_BASE" >/dev/null \
    || die "docker import of the rootfs failed"
}

build_base() {  # TAG DOCKERFILE CONTEXT
  log "building $1"
  docker build -q -t "$1" -f "$2" --build-arg "DEBIAN_BASE=$DEBIAN_BASE" "$3" >>"$DOCKER_HOME/build.log" 2>&1 \
    || die "building $1 failed; see $DOCKER_HOME/build.log"
}

cmd_bases() {
  mkdir -p "$DOCKER_HOME"
  engine_up || die "no Docker engine: run $0 ensure first"
  if registry_reachable; then
    log "a container registry answers: compose uses the official images"
    : >"$BASES_ENV"
  else
    log "no container registry answers: building the bases from Debian packages"
    debian_base
    build_base chorus-local/python:3.11 "$BASES/python.Dockerfile" "$BASES"
    build_base chorus-local/postgres:15 "$BASES/postgres.Dockerfile" "$BASES"
    # The broker's jars as `make up` runs them, beside the scripts, as one build context.
    local lib context
    lib="$("$CHORUS_ROOT/deploy/local/kafka.sh" jars)"
    context="$(mktemp -d)"
    trap 'rm -rf "$context"' RETURN
    cp -r "$lib" "$context/libs"
    cp "$BASES"/kafka-* "$context/"
    build_base chorus-local/kafka:4.4.0 "$BASES/kafka.Dockerfile" "$context"
    cat >"$BASES_ENV" <<ENV
# Written by deploy/local/docker.sh bases: docker-compose.yml's bases, built from Debian.
CHORUS_PYTHON_IMAGE=chorus-local/python:3.11
CHORUS_KAFKA_IMAGE=chorus-local/kafka:4.4.0
CHORUS_POSTGRES_IMAGE=chorus-local/postgres:15
ENV
  fi
  echo "$BASES_ENV"
}

cmd_stop() { stop_pid "$PIDFILE" dockerd 60; }

case "${1:-}" in
  ensure) cmd_ensure ;;
  bases) cmd_bases ;;
  stop) cmd_stop ;;
  *) echo "usage: $0 ensure|bases|stop" >&2; exit 2 ;;
esac
