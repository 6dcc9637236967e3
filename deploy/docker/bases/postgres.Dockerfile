# What postgres:16 gives docker-compose.yml, from Debian's PostgreSQL (15 in bookworm): for
# machines that reach Debian's registry but no container registry (deploy/local/docker.sh
# bases). The entrypoint takes the official image's POSTGRES_USER, POSTGRES_PASSWORD_FILE
# and POSTGRES_DB, and the same `postgres -c ...` command.
ARG DEBIAN_BASE=chorus-local/debian:bookworm
FROM ${DEBIAN_BASE}
RUN apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
       postgresql-15 postgresql-client-15 >/dev/null \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /var/lib/postgresql/data /var/run/postgresql \
    && chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql
COPY postgres-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data LANG=C.UTF-8
ENTRYPOINT ["docker-entrypoint.sh"]
STOPSIGNAL SIGINT
EXPOSE 5432
CMD ["postgres"]
