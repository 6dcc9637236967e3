#!/bin/sh
# The official image's bin/kafka-server-start.sh: the broker with kafka-run-class.sh's JVM
# options, in the foreground (SIGTERM is a controlled shutdown).
exec java ${KAFKA_HEAP_OPTS:--Xms512m -Xmx1g} -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
  -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent \
  -Djava.awt.headless=true -Dkafka.logs.dir=/opt/kafka/logs \
  -Dlog4j2.configurationFile=/opt/kafka/config/log4j2.yaml \
  -cp '/opt/kafka/libs/*' kafka.Kafka "$@"
