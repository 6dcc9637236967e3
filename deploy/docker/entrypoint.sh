#!/bin/sh
# The chorus image's entrypoint: runs the command with this container's own logins.
#
# In docker-compose.yml the `secrets` service writes each service's Kafka principal and
# PostgreSQL role into that service's volume (chorus.tools.composesecrets), and
# CHORUS_CREDENTIALS_FILE names the file; it is loaded here so that no password sits in the
# compose file or in an environment another container can read. Without the variable the
# command runs as it is (the Helm chart hands each pod its secrets itself).
set -eu
if [ -n "${CHORUS_CREDENTIALS_FILE:-}" ]; then
  # A service whose logins were not issued must not start on the demo defaults instead.
  [ -r "$CHORUS_CREDENTIALS_FILE" ] || { echo "chorus: cannot read $CHORUS_CREDENTIALS_FILE (CHORUS_CREDENTIALS_FILE)" >&2; exit 78; }
  set -a
  # shellcheck source=/dev/null
  . "$CHORUS_CREDENTIALS_FILE"
  set +a
  unset CHORUS_CREDENTIALS_FILE
fi
exec "$@"
