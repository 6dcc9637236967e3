# What python:3.11-slim gives the chorus image, from Debian's packages: for machines that
# reach Debian's and PyPI's registries but no container registry (deploy/local/docker.sh
# bases builds it on a debootstrap of bookworm, whose Python is 3.11).
ARG DEBIAN_BASE=chorus-local/debian:bookworm
FROM ${DEBIAN_BASE}
RUN apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
       python3 python3-pip python-is-python3 ca-certificates >/dev/null \
    && rm -rf /var/lib/apt/lists/* \
    # The image is the application's own environment, as python:3.11-slim's is: pip installs
    # into it (PEP 668's marker would refuse that outside a virtualenv).
    && rm -f /usr/lib/python3.*/EXTERNALLY-MANAGED \
    && ln -s /usr/bin/pip3 /usr/local/bin/pip
ENV LANG=C.UTF-8
CMD ["python3"]
