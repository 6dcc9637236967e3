#!/bin/bash
# The compose broker, secured as deploy/local/kafka.sh secures `make up`'s: clients log in
# with SASL/SCRAM-SHA-512 over TLS (on kafka:9092 in the compose network and on
# 127.0.0.1:29092 from the host), the controller listener is mutual TLS, and the
# StandardAuthorizer denies what no ACL allows. The CA, the broker's certificate and the
# admin's password come from the `secrets` service (chorus.tools.composesecrets), mounted
# read-only at $SECRETS; service principals and ACLs are `chorus access apply`'s (the
# `setup` service). The admin's SCRAM credential goes in at format time, the only way a
# KRaft cluster takes its first user.
set -euo pipefail
source /opt/chorus/kafka-security.sh  # deploy/shared/kafka-security.sh
SECRETS=/etc/kafka/chorus
CONFIG=/opt/kafka/config/chorus-server.properties
DATA=/var/lib/kafka/data
ADMIN=chorus-admin
BROKER_CN=chorus-kafka-broker
password="$(cat "$SECRETS/admin.password")"
jaas="org.apache.kafka.common.security.scram.ScramLoginModule required"

umask 077  # the file holds the admin's password
cat >"$CONFIG" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@kafka:9093
listeners=INTERNAL://:9092,HOST://:29092,CONTROLLER://:9093
advertised.listeners=INTERNAL://kafka:9092,HOST://127.0.0.1:29092
listener.security.protocol.map=INTERNAL:SASL_SSL,HOST:SASL_SSL,CONTROLLER:SSL
controller.listener.names=CONTROLLER
inter.broker.listener.name=INTERNAL
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.internal.scram-sha-512.sasl.jaas.config=$jaas username="$ADMIN" password="$password";
listener.name.host.scram-sha-512.sasl.jaas.config=$jaas;
$(broker_security_properties "$SECRETS" "$ADMIN" "$BROKER_CN")
log.dirs=$DATA
num.partitions=3
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
PROPS

if [[ ! -f "$DATA/meta.properties" ]]; then
  /opt/kafka/bin/kafka-storage.sh format -t "$(/opt/kafka/bin/kafka-storage.sh random-uuid)" -c "$CONFIG" \
    --add-scram "SCRAM-SHA-512=[name=$ADMIN,password=$password]"
fi
exec /opt/kafka/bin/kafka-server-start.sh "$CONFIG"
