# One image for every Folio process: storage node, auditor, gateway, local cluster.
#   docker build -t folio .
#   docker compose up            (see compose.yaml: keys, etcd + 3 storage nodes + auditor + 2 gateways
#                                 + the Spark analytics service)
# Debian 12: its openjdk-17 is the Java Spark needs (Debian 13, python:3.11-slim's default now, has none)
FROM python:3.11-slim-bookworm AS base
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
# Java 17 for the analytics service's Spark driver and the Spark connector
# (slim images have no man directories, where openjdk's update-alternatives links java.1)
RUN mkdir -p /usr/share/man/man1 && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/folio
COPY pyproject.toml README.md ./
COPY coordination ./coordination
COPY storage ./storage
COPY gateway ./gateway
COPY web_ui ./web_ui
COPY spark ./spark
COPY folio ./folio
RUN pip install . && useradd --system --home /var/lib/folio folio && mkdir -p /var/lib/folio \
    && chown folio /var/lib/folio
USER folio
VOLUME ["/var/lib/folio"]
# storage node wire port and metrics port; gateway HTTP/WebSocket port (dashboard at /)
EXPOSE 3181 8000 8080
ENTRYPOINT ["folio"]
CMD ["--help"]
