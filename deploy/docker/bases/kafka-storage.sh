#!/bin/sh
# The official image's bin/kafka-storage.sh, for what start.sh asks of it (random-uuid, format).
exec java -cp '/opt/kafka/libs/*' -Dlog4j2.configurationFile=/opt/kafka/config/log4j2.yaml \
  kafka.tools.StorageTool "$@"
