#!/usr/bin/env bash
# Local Apache Kafka 4.4 (KRaft, combined broker+controller) from Maven Central jars.
#
#   deploy/local/kafka.sh start|stop|status|reset|logs|jars
#
# start  resolves the jars once (mvn), formats storage once, starts the node and
#        waits until its client port accepts connections; a no-op when running.
# stop   SIGTERM (controlled shutdown) and wait.
# reset  stop and delete the node's data and logs (jars are kept).
# jars   resolves the jars only and prints their folder (deploy/local/docker.sh builds
#        a broker image from them).
#
# Secured like a production cluster, never PLAINTEXT: clients authenticate with
# SASL/SCRAM-SHA-512 over TLS on the client port, the controllers talk mutual TLS, and
# the StandardAuthorizer denies what no ACL allows (allow.everyone.if.no.acl.found=false).
# At first start a local CA, the broker's certificate and the admin principal's
# password are generated into .local/kafka/secrets (shared by every local cluster);
# .local/kafka/admin.env holds the admin client's CHORUS_KAFKA_* settings. Service
# principals and their ACLs come from the registry: `chorus access apply`.
#
# Environment: KAFKA_NODES=1 (or 3 for a loopback cluster, used by the
# reliability suite), KAFKA_PORT_BASE=9092 (node n listens on base+2(n-1),
# its controller on base+2(n-1)+1), KAFKA_START_TIMEOUT=90.
#
# KAFKA_CLUSTER=<name> selects a separate cluster beside the default one: its
# data, logs and cluster id live in .local/kafka/<name>/node<n> (the jars are
# shared). Its first start needs KAFKA_PORT_BASE (a range apart from 9092) and
# KAFKA_NODES, which are remembered in .local/kafka/<name>/cluster.env so that
# stop/status/reset need only KAFKA_CLUSTER. Example (the reliability suite's):
#   KAFKA_CLUSTER=reliability3 KAFKA_NODES=3 KAFKA_PORT_BASE=19192 deploy/local/kafka.sh start
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
source "$CHORUS_ROOT/deploy/shared/kafka-security.sh"

KAFKA_HOME="$CHORUS_LOCAL/kafka"
KAFKA_LIB="$KAFKA_HOME/lib"
KAFKA_CLUSTER="${KAFKA_CLUSTER:-}"
if [[ -n "$KAFKA_CLUSTER" ]]; then
  [[ "$KAFKA_CLUSTER" =~ ^[a-z0-9][a-z0-9_-]*$ && "$KAFKA_CLUSTER" != lib ]] \
    || die "KAFKA_CLUSTER must be a plain name ([a-z0-9_-], not 'lib'); got '$KAFKA_CLUSTER'"
  # Data of a named cluster never shares a folder with the default node1..n.
  KAFKA_DATA="$KAFKA_HOME/$KAFKA_CLUSTER"
  CLUSTER_ENV="$KAFKA_DATA/cluster.env"
  if [[ -f "$CLUSTER_ENV" ]]; then
    # shellcheck source=/dev/null
    source "$CLUSTER_ENV"  # SAVED_NODES, SAVED_PORT_BASE of the first start
    KAFKA_NODES="${KAFKA_NODES:-$SAVED_NODES}"
    KAFKA_PORT_BASE="${KAFKA_PORT_BASE:-$SAVED_PORT_BASE}"
    [[ "$KAFKA_NODES" == "$SAVED_NODES" && "$KAFKA_PORT_BASE" == "$SAVED_PORT_BASE" ]] \
      || die "cluster '$KAFKA_CLUSTER' was created with KAFKA_NODES=$SAVED_NODES KAFKA_PORT_BASE=$SAVED_PORT_BASE; reset it to change them"
  elif [[ "${1:-}" == start ]]; then
    # Defaulting to 9092 would find the default broker's port open and "use" it.
    [[ -n "${KAFKA_PORT_BASE:-}" ]] || die "KAFKA_CLUSTER=$KAFKA_CLUSTER needs KAFKA_PORT_BASE (ports apart from the default broker's 9092)"
  fi
else
  KAFKA_DATA="$KAFKA_HOME"
  CLUSTER_ENV=""
fi
KAFKA_NODES="${KAFKA_NODES:-1}"
KAFKA_PORT_BASE="${KAFKA_PORT_BASE:-9092}"
KAFKA_START_TIMEOUT="${KAFKA_START_TIMEOUT:-90}"
KAFKA_HEAP="${KAFKA_HEAP:--Xms512m -Xmx1g}"
POM="$CHORUS_ROOT/deploy/local/kafka/pom.xml"
SECRETS="$KAFKA_HOME/secrets"
ADMIN_USER="chorus-admin"
ADMIN_ENV="$KAFKA_HOME/admin.env"
# The broker's certificate subject: brokers and controllers authenticate each other
# with it (mutual TLS on the controller listener), so it is a super user.
BROKER_CN="chorus-kafka-broker"
SECURITY_STAMP="scram-tls-acl-1"

client_port() { echo $((KAFKA_PORT_BASE + 2 * ($1 - 1))); }
controller_port() { echo $((KAFKA_PORT_BASE + 2 * ($1 - 1) + 1)); }
node_dir() { echo "$KAFKA_DATA/node$1"; }

voters() {
  local n out=""
  for ((n = 1; n <= KAFKA_NODES; n++)); do
    out+="${out:+,}$n@127.0.0.1:$(controller_port "$n")"
  done
  echo "$out"
}

ensure_jars() {
  # The stamp holds the pom's hash so that a version bump re-resolves.
  local stamp="$KAFKA_LIB/.pom.sha256" want
  want="$(sha256sum "$POM" | cut -d' ' -f1)"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then return 0; fi
  command -v java >/dev/null || die "java not found: install a Java 17 runtime (Debian: openjdk-17-jre-headless)"
  command -v mvn >/dev/null || die "mvn not found: install Maven (Debian: maven)"
  log "resolving Apache Kafka jars from Maven Central into $KAFKA_LIB"
  rm -rf "$KAFKA_LIB"; mkdir -p "$KAFKA_LIB"
  mvn -B -q -Dstyle.color=never -f "$POM" dependency:copy-dependencies \
    -DoutputDirectory="$KAFKA_LIB" -DincludeScope=runtime \
    || die "mvn could not resolve the Kafka jars (see output above)"
  echo "$want" >"$stamp"
}

# Python 3.13 verifies certificates strictly (VERIFY_X509_STRICT) and refuses a CA without
# keyUsage, which the CA an older kafka.sh made lacks.
ca_is_strict() {
  [[ ! -f "$SECRETS/ca.pem" ]] \
    || openssl x509 -in "$SECRETS/ca.pem" -noout -ext keyUsage 2>/dev/null | grep -q "Certificate Sign"
}

ensure_secrets() {
  # A local CA, the broker's key and certificate (for 127.0.0.1 and localhost), and the
  # admin password: made once, kept across restarts and resets (clients keep trusting,
  # formatted nodes keep the admin credential they were formatted with).
  if ! ca_is_strict; then
    log "the local CA has no keyUsage (Python 3.13 refuses it): making it and the broker certificate again"
    rm -f "$SECRETS/broker.keystore.pem"
  fi
  if [[ ! -f "$SECRETS/broker.keystore.pem" || ! -f "$SECRETS/admin.password" ]]; then
    command -v openssl >/dev/null || die "openssl not found: install it (Debian: openssl)"
    log "generating the local CA, the broker certificate and the admin password in $SECRETS"
    mkdir -p "$SECRETS"; chmod 700 "$SECRETS"
    # Built in a scratch folder and moved in whole: a failed step leaves nothing half made.
    rm -rf "$SECRETS/.new"
    (
      set -euo pipefail
      umask 077; mkdir "$SECRETS/.new"; cd "$SECRETS/.new"
      openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 3650 -subj "/CN=Chorus local CA" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" -keyout ca.key -out ca.pem 2>/dev/null
      openssl req -newkey rsa:2048 -nodes -sha256 -subj "/CN=$BROKER_CN" \
        -keyout broker.key -out broker.csr 2>/dev/null
      printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' >broker.ext
      openssl x509 -req -sha256 -days 825 -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
        -extfile broker.ext -out broker.pem 2>/dev/null
      # Kafka's PEM keystore: the (PKCS#8) private key, then the certificate chain.
      cat broker.key broker.pem ca.pem >broker.keystore.pem
      # Kept when there is one: formatted nodes hold the admin credential made from it.
      [[ -f ../admin.password ]] || openssl rand -hex 24 >admin.password
      rm -f broker.csr broker.ext
      mv -f ./* ..
    ) || { rm -rf "$SECRETS/.new"; die "could not generate the local TLS material"; }
    rmdir "$SECRETS/.new"
  fi
  [[ -f "$ADMIN_ENV" ]] && return 0
  (
    umask 077
    cat >"$ADMIN_ENV" <<ENV
# The local cluster's admin principal (super user), for provisioning and tests.
# Generated by deploy/local/kafka.sh; load it with: set -a; . $ADMIN_ENV; set +a
CHORUS_KAFKA_SECURITY_PROTOCOL=SASL_SSL
CHORUS_KAFKA_SASL_MECHANISM=SCRAM-SHA-512
CHORUS_KAFKA_SASL_USERNAME=$ADMIN_USER
CHORUS_KAFKA_SASL_PASSWORD=$(cat "$SECRETS/admin.password")
CHORUS_KAFKA_SSL_CAFILE=$SECRETS/ca.pem
ENV
  )
}

write_config() {
  local n="$1" dir rf isr
  dir="$(node_dir "$n")"
  mkdir -p "$dir/data" "$dir/logs"
  rf=$(( KAFKA_NODES >= 3 ? 3 : 1 ))
  isr=$(( KAFKA_NODES >= 3 ? 2 : 1 ))
  cat >"$dir/server.properties" <<PROPS
# Generated by deploy/local/kafka.sh; edits are overwritten at start.
process.roles=broker,controller
node.id=$n
controller.quorum.voters=$(voters)
listeners=CLIENT://127.0.0.1:$(client_port "$n"),CONTROLLER://127.0.0.1:$(controller_port "$n")
advertised.listeners=CLIENT://127.0.0.1:$(client_port "$n")
# Clients (and brokers among themselves) use SCRAM over TLS; controllers use mutual TLS:
# KRaft controllers cannot check SCRAM, whose credentials live in the metadata they serve.
listener.security.protocol.map=CLIENT:SASL_SSL,CONTROLLER:SSL
controller.listener.names=CONTROLLER
inter.broker.listener.name=CLIENT
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.client.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="$ADMIN_USER" password="$(cat "$SECRETS/admin.password")";
$(broker_security_properties "$SECRETS" "$ADMIN_USER" "$BROKER_CN")
log.dirs=$dir/data
num.partitions=3
default.replication.factor=$rf
min.insync.replicas=$isr
# Internal topics: the defaults (3 replicas, 2 in sync) cannot be met by one node.
offsets.topic.replication.factor=$rf
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$isr
# Tests create many short-lived groups; waiting 3 s for joiners slows every one.
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
delete.topic.enable=true
log.retention.hours=168
log.segment.bytes=67108864
PROPS
}

format_storage() {
  local n="$1" dir cluster_id_file="$KAFKA_DATA/cluster.id"
  dir="$(node_dir "$n")"
  if [[ -f "$dir/data/meta.properties" && "$(cat "$dir/security.stamp" 2>/dev/null)" == "$SECURITY_STAMP" ]]; then
    return 0
  fi
  if [[ -f "$dir/data/meta.properties" ]]; then
    # Formatted before the cluster was secured: it has no admin credential to log in with.
    log "node $n holds data of an unsecured (PLAINTEXT) cluster; formatting it anew"
    rm -rf "$dir/data"; mkdir -p "$dir/data"
  fi
  mkdir -p "$KAFKA_DATA"
  [[ -f "$cluster_id_file" ]] || java -cp "$KAFKA_LIB/*" kafka.tools.StorageTool random-uuid >"$cluster_id_file"
  log "formatting KRaft storage for node $n (cluster $(cat "$cluster_id_file"))"
  # The admin's SCRAM credential goes in at format time, the only way KRaft takes a first
  # user; its password is on this short-lived command line (a local stack's, like the
  # server.properties copy, mode 600, the broker reads).
  java -cp "$KAFKA_LIB/*" -Dlog4j2.configurationFile="$CHORUS_ROOT/deploy/local/log4j2.yaml" \
    -Dkafka.logs.dir="$dir/logs" kafka.tools.StorageTool format \
    -t "$(cat "$cluster_id_file")" -c "$dir/server.properties" \
    --add-scram "SCRAM-SHA-512=[name=$ADMIN_USER,password=$(cat "$SECRETS/admin.password")]" \
    >"$dir/logs/format.log" 2>&1 \
    || { cat "$dir/logs/format.log" >&2; die "storage format failed for node $n"; }
  echo "$SECURITY_STAMP" >"$dir/security.stamp"
}

start_node() {
  local n="$1" dir port
  dir="$(node_dir "$n")"; port="$(client_port "$n")"
  if pid_alive "$dir/kafka.pid" && [[ "$(cat "$dir/security.stamp" 2>/dev/null)" != "$SECURITY_STAMP" ]]; then
    log "node $n runs unsecured (started by an older kafka.sh); restarting it secured"
    stop_pid "$dir/kafka.pid" "kafka node $n" 120
  fi
  if pid_alive "$dir/kafka.pid" && ! ca_is_strict; then
    log "node $n serves a certificate of a CA Python 3.13 refuses; restarting it with a new one"
    stop_pid "$dir/kafka.pid" "kafka node $n" 120
  fi
  if pid_alive "$dir/kafka.pid"; then return 0; fi
  if port_open 127.0.0.1 "$port"; then
    log "127.0.0.1:$port already accepts connections (a Kafka not started by this script?); using it"
    return 0
  fi
  ensure_secrets
  (umask 077 && write_config "$n")  # server.properties holds the admin password
  format_storage "$n"
  # KAFKA_NETNS_<n>: run node n in that network namespace (the reliability suite's network
  # lab, tests/reliability/netlab.py, which routes 127.0.0.1 to and from it); `ip netns exec`
  # execs java, so the pid is the broker's.
  local netns_var="KAFKA_NETNS_$n" in_netns=()
  [[ -n "${!netns_var:-}" ]] && in_netns=(ip netns exec "${!netns_var}")
  log "starting node $n on 127.0.0.1:$port${in_netns:+ in network namespace ${!netns_var}} (logs: $dir/logs/server.log)"
  # JVM flags as in Kafka's kafka-run-class.sh / kafka-server-start.sh.
  nohup "${in_netns[@]}" java $KAFKA_HEAP -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
    -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent \
    -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$CHORUS_ROOT/deploy/local/log4j2.yaml" \
    -Dkafka.logs.dir="$dir/logs" \
    -cp "$KAFKA_LIB/*" kafka.Kafka "$dir/server.properties" \
    >"$dir/logs/stdout.log" 2>&1 </dev/null &
  echo $! >"$dir/kafka.pid"
}

wait_node() {
  local n="$1" dir port i
  dir="$(node_dir "$n")"; port="$(client_port "$n")"
  # The broker binds its client port only once unfenced, so an accepted
  # connection means ready.
  for ((i = 0; i < KAFKA_START_TIMEOUT * 10; i++)); do
    port_open 127.0.0.1 "$port" && return 0
    if [[ -f "$dir/kafka.pid" ]] && ! pid_alive "$dir/kafka.pid"; then
      log "node $n exited during startup; last lines of its logs:"
      tail -n 40 "$dir/logs/stdout.log" "$dir/logs/server.log" >&2 2>/dev/null || true
      die "Kafka node $n did not start"
    fi
    sleep 0.1
  done
  log "node $n not ready after ${KAFKA_START_TIMEOUT}s; last lines of its logs:"
  tail -n 40 "$dir/logs/server.log" >&2 2>/dev/null || true
  die "Kafka node $n did not open 127.0.0.1:$port"
}

cmd_start() {
  local n t0=$SECONDS
  ensure_jars
  if [[ -n "$CLUSTER_ENV" && ! -f "$CLUSTER_ENV" ]]; then
    mkdir -p "$KAFKA_DATA"
    printf 'SAVED_NODES=%s\nSAVED_PORT_BASE=%s\n' "$KAFKA_NODES" "$KAFKA_PORT_BASE" >"$CLUSTER_ENV"
  fi
  for ((n = 1; n <= KAFKA_NODES; n++)); do start_node "$n"; done
  for ((n = 1; n <= KAFKA_NODES; n++)); do wait_node "$n"; done
  log "Kafka ready on $(for ((n = 1; n <= KAFKA_NODES; n++)); do printf '127.0.0.1:%s ' "$(client_port "$n")"; done)(${KAFKA_NODES} node(s), $((SECONDS - t0))s)"
}

cmd_stop() {
  local n pidfile
  # Every node is told at once: stopped one by one, the last ones lose the controller
  # quorum and cannot finish a controlled shutdown (they wait out the timeout).
  for ((n = 1; n <= KAFKA_NODES; n++)); do
    pidfile="$(node_dir "$n")/kafka.pid"
    if pid_alive "$pidfile"; then kill -TERM "$(cat "$pidfile")" 2>/dev/null || true; fi
  done
  for ((n = KAFKA_NODES; n >= 1; n--)); do stop_pid "$(node_dir "$n")/kafka.pid" "kafka node $n" 120; done
}

cmd_status() {
  local n rc=0 dir port
  for ((n = 1; n <= KAFKA_NODES; n++)); do
    dir="$(node_dir "$n")"; port="$(client_port "$n")"
    if pid_alive "$dir/kafka.pid" && port_open 127.0.0.1 "$port"; then
      echo "kafka node $n: running (pid $(cat "$dir/kafka.pid"), 127.0.0.1:$port)"
    elif port_open 127.0.0.1 "$port"; then
      echo "kafka node $n: 127.0.0.1:$port is open but not started by this script"
    else
      echo "kafka node $n: stopped"; rc=3
    fi
  done
  return $rc
}

cmd_reset() {
  cmd_stop
  local n
  for ((n = 1; n <= KAFKA_NODES; n++)); do rm -rf "$(node_dir "$n")"; done
  rm -f "$KAFKA_DATA/cluster.id"
  if [[ -n "$CLUSTER_ENV" ]]; then rm -f "$CLUSTER_ENV"; rmdir "$KAFKA_DATA" 2>/dev/null || true; fi
  log "Kafka data removed${KAFKA_CLUSTER:+ (cluster $KAFKA_CLUSTER)}"
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  reset) cmd_reset ;;
  logs) tail -n "${2:-100}" "$(node_dir 1)/logs/server.log" ;;
  jars) ensure_jars >&2; echo "$KAFKA_LIB" ;;  # only the folder on stdout: mvn writes there too
  *) echo "usage: $0 start|stop|status|reset|logs [lines]|jars" >&2; exit 2 ;;
esac
