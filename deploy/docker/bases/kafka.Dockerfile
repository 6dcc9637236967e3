# What apache/kafka:4.4.0 gives docker-compose.yml, from Debian's Java 17 and the broker's
# jars from Maven Central (the ones deploy/local/kafka.sh resolves; deploy/local/docker.sh
# bases puts them in the build context as libs/): for machines that reach Debian's and
# Maven Central's registries but no container registry. The same paths as the official
# image, so deploy/docker/kafka/start.sh runs on either: /opt/kafka/bin's scripts it calls,
# /opt/kafka/config writable, /var/lib/kafka/data, user 1000.
ARG DEBIAN_BASE=chorus-local/debian:bookworm
FROM ${DEBIAN_BASE}
RUN apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
       openjdk-17-jre-headless >/dev/null \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 1000 --create-home appuser \
    && mkdir -p /opt/kafka/bin /opt/kafka/config /opt/kafka/logs /var/lib/kafka/data \
    && chown -R appuser /opt/kafka/config /opt/kafka/logs /var/lib/kafka
COPY libs/ /opt/kafka/libs/
COPY kafka-log4j2.yaml /opt/kafka/config/log4j2.yaml
COPY kafka-storage.sh kafka-server-start.sh /opt/kafka/bin/
USER appuser
