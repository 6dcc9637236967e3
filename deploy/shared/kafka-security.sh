# What secures a Chorus broker, the same for `make up`'s (deploy/local/kafka.sh) and the
# compose one (deploy/docker/kafka/start.sh, which mounts this file): TLS from PEM files,
# mutual TLS on the controller listener, and the StandardAuthorizer denying what no ACL
# allows. Sourced, never run.

# broker_security_properties SECRETS ADMIN BROKER_CN: the server.properties lines. SECRETS
# holds the broker's certificate and key (broker.keystore.pem) and the CA (ca.pem); ADMIN
# (the admin principal) and the broker's certificate subject (brokers and controllers
# authenticate each other with it) are super users.
broker_security_properties() {
  cat <<PROPS
ssl.keystore.type=PEM
ssl.keystore.location=$1/broker.keystore.pem
ssl.truststore.type=PEM
ssl.truststore.location=$1/ca.pem
listener.name.controller.ssl.client.auth=required
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:$2;User:CN=$3
PROPS
}
