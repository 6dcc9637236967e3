#!/usr/bin/env bash
# kcat against the secured local cluster:  deploy/local/kcat.sh -F <properties> [kcat args]
# (`chorus access client-config chorus-auditor --users-dir .local/kafka/secrets/users`
# writes the properties of a principal).
#
# Installs Debian's kcat when missing (as root). Debian's kcat links librdkafka 2.0.2,
# whose SCRAM exchange Kafka 4 rejects (a client nonce sent twice; fixed in librdkafka
# 2.6.1, confluentinc/librdkafka#4895), so it runs on the newer librdkafka that the
# project's confluent-kafka wheel ships (the same ABI, librdkafka.so.1).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

if ! command -v kcat >/dev/null; then
  [[ "$(id -u)" == 0 ]] || die "kcat not found; install Debian's 'kcat' package (needs root)"
  log "installing Debian's kcat package"
  apt_install kcat
fi
lib="$(ls "$CHORUS_ROOT"/.venv/lib/python3*/site-packages/confluent_kafka.libs/librdkafka-*.so.1 2>/dev/null | head -n 1)"
[[ -n "$lib" ]] || die "no librdkafka in .venv (confluent-kafka); run \`make setup\`"
libdir="$CHORUS_LOCAL/kcat-lib"
mkdir -p "$libdir"
ln -sf "$lib" "$libdir/librdkafka.so.1"
LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec kcat "$@"
