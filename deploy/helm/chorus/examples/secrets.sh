#!/usr/bin/env bash
# The Secrets the chart expects (default names of values.yaml), made from files and
# variables you hold; nothing here is a value. Review, fill in, run once per namespace:
#   NS=chorus deploy/helm/chorus/examples/secrets.sh
set -euo pipefail
NS="${NS:?namespace}"
k() { kubectl --namespace "$NS" "$@"; }
REGISTRY="$(dirname "$0")/../files/registry.yaml"
# The services, by object name, from the chart's registry file: those with a database, those
# with a Kafka login, and the signers of decision events (registry names).
facts() { awk -v want="$1" '
  /^  [a-z_]+:$/ { name = "" } /^    name: / { name = $2 }
  $0 == "    " want ": true" && name != "" { print name }' "$REGISTRY"; }
mapfile -t SERVICES < <(facts database)
mapfile -t KAFKA_USERS < <(facts kafka)
mapfile -t KEY_CLIENTS < <(facts keyService)
read -r -a SIGNERS <<<"$(sed -n 's/^signers: \[\(.*\)\]$/\1/p' "$REGISTRY" | tr -d ',')"

# Kafka: each service's SCRAM password (its principal is its registry name), the admin's, the CA.
for s in "${KAFKA_USERS[@]}"; do
  k create secret generic "chorus-kafka-$s" --from-file=password="secrets/kafka/$s.password"
done
k create secret generic chorus-kafka-admin --from-file=password=secrets/kafka/admin.password
k create secret generic chorus-kafka-ca --from-file=ca.crt=secrets/kafka/ca.pem

# PostgreSQL: each service's DSN, as its own role (chorus access database makes the roles).
for s in "${SERVICES[@]}"; do
  k create secret generic "chorus-db-$s" --from-file=url="secrets/db/$s.url"
done

# Settings that are secrets.
k create secret generic chorus-api-keys --from-file=api-keys.json=secrets/api-keys.json
# Each service that handles personal fields presents its own credential to the key service,
# which maps each to its service (secrets/key-service-clients.json: {"<credential>": "<service>"}).
for s in "${KEY_CLIENTS[@]}"; do
  k create secret generic "chorus-key-service-client-$s" --from-file=api-key="secrets/key-service/$s.key"
done
k create secret generic chorus-key-service-clients --from-file=clients.json=secrets/key-service-clients.json
# The key service's data-key API is TLS only: its certificate for its in-cluster name, and the
# authority its callers verify it with (or let cert-manager make chorus-key-service-tls). With
# a release named chorus, e.g.:
#   chorus access key-service-tls --dir secrets/key-service-tls \
#     --host chorus-key-service --host "chorus-key-service.$NS.svc"
k create secret generic chorus-key-service-tls --from-file=tls.crt=secrets/key-service-tls/key_service.pem \
  --from-file=tls.key=secrets/key-service-tls/key_service.key --from-file=ca.crt=secrets/key-service-tls/ca.pem
k create secret generic chorus-master-keys --from-file=master-keys.json=secrets/master-keys.json
k create secret generic chorus-subject-key --from-file=subject-key=secrets/subject.key
k create secret generic chorus-gateway \
  --from-file=audit-api-key=secrets/gateway-audit.key --from-file=webhook-secret=secrets/webhook.secret
k create secret generic chorus-payment-provider --from-file=api-key=secrets/payment.key
k create secret generic chorus-link-key --from-file=link-key=secrets/link.key
k create secret generic chorus-console --from-file=session-key=secrets/console-session.key

# Signing keys (chorus access signing-keys --signing-dir secrets/signing): every signer's
# public key in one Secret, each signer's private key in its own.
k create secret generic chorus-signing-public $(for f in secrets/signing/*.pub; do printf -- '--from-file=%s ' "$f"; done)
for signer in "${SIGNERS[@]}"; do
  k create secret generic "chorus-signing-${signer//_/-}" --from-file="$signer.key=secrets/signing/$signer.key"
done
