# PostgreSQL from Debian's `postgresql` package, for machines that cannot pull the official `postgres` image.
# It speaks the official image's interface: POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB, data in
# /var/lib/postgresql/data, port 5432, and `pg_isready` on PATH for the same health check. compose.local.yaml
# builds it (or set VERILOOP_POSTGRES_IMAGE to an image built from it):
#
#   docker build -f postgres.Dockerfile -t veriloop-postgres:local docker/                 # from Debian's mirror
#   docker build -f postgres.Dockerfile --build-arg BASE_IMAGE=veriloop-postgres-base:bookworm \
#     -t veriloop-postgres:local docker/              # offline: the base from scripts/build-base-images.sh
#
# Few instructions: on the vfs storage driver each one copies the whole image (see service.Dockerfile).
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint
RUN set -eu; \
    if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then \
        mkdir -p /etc/postgresql-common; \
        echo 'create_main_cluster = false' > /etc/postgresql-common/createcluster.conf; \
        apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql \
        && rm -rf /var/lib/apt/lists/*; \
    fi; \
    bin="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)"; \
    for tool in postgres initdb pg_ctl pg_isready psql pg_dump pg_restore; do ln -sf "$bin/$tool" /usr/local/bin/$tool; done; \
    mkdir -p /var/lib/postgresql/data /run/postgresql; \
    chown -R postgres:postgres /var/lib/postgresql /run/postgresql; \
    chmod 0700 /var/lib/postgresql/data; \
    chmod 0755 /usr/local/bin/postgres-entrypoint
USER postgres
ENTRYPOINT ["postgres-entrypoint"]
