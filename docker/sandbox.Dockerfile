# The sandbox image of veriloop's docker backend, for machines that can pull from a registry and download releases.
# (Without a registry, scripts/setup-sandbox.sh builds a smaller local image instead: see docker/README.md.)
#
#   docker build -f docker/sandbox.Dockerfile -t veriloop-sandbox:full docker/
#   VERILOOP_SANDBOX__DOCKER_IMAGE=veriloop-sandbox:full veriloop exec prog.py --lang python --sandbox docker
#
# Debian's toolchains for the sandbox languages, Dafny 4 (a release zip plus the .NET 8 runtime it runs on) and a
# pinned Verus release (plus the exact Rust toolchain that release names, installed with rustup). Jobs run as
# uid 65534 with a clean environment, so every tool is reachable from /usr/local/bin without any variable set.

FROM debian:bookworm-slim

ARG DEBIAN_FRONTEND=noninteractive
ARG DAFNY_VERSION=4.11.0
ARG DAFNY_SHA256=a46a9ff7cdd720f7955854c78e95df13f4cfe6b80691b05f8654fe19e8267179
ARG VERUS_VERSION=0.2025.06.14.9b557d7
# Empty: not checked. Set it to pin the Verus zip's digest as well as its version.
ARG VERUS_SHA256=

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# Language toolchains (the same languages the bwrap backend serves from the host), procps for the runner's kill
# pass, and what the downloads below need. libgomp1: the Z3 inside the Dafny zip links against it. (The man
# folder: the JDK's post-install links its man pages there, and the slim image leaves it out.)
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends \
        python3 gcc g++ libc6-dev openjdk-17-jdk-headless nodejs rustc golang-go \
        procps ca-certificates curl unzip libgomp1 \
    && rm -rf /var/lib/apt/lists/*

# .NET 8 runtime for Dafny, from Microsoft's package repository for Debian 12.
RUN curl -fsSL -o /tmp/packages-microsoft-prod.deb \
        https://packages.microsoft.com/config/debian/12/packages-microsoft-prod.deb \
    && dpkg -i /tmp/packages-microsoft-prod.deb \
    && rm /tmp/packages-microsoft-prod.deb \
    && apt-get update \
    && apt-get install -y --no-install-recommends dotnet-runtime-8.0 \
    && rm -rf /var/lib/apt/lists/*

# Dafny: the Linux release zip (it bundles its Z3) unpacked to /opt/dafny.
RUN curl -fsSL -o /tmp/dafny.zip \
        "https://github.com/dafny-lang/dafny/releases/download/v${DAFNY_VERSION}/dafny-${DAFNY_VERSION}-x64-ubuntu-22.04.zip" \
    && echo "${DAFNY_SHA256}  /tmp/dafny.zip" | sha256sum -c - \
    && unzip -q /tmp/dafny.zip -d /opt \
    && rm /tmp/dafny.zip \
    && ln -s /opt/dafny/dafny /usr/local/bin/dafny \
    && dafny --version

# rustup (no default toolchain: `rustc` stays Debian's) in /opt, readable by every user.
ENV RUSTUP_HOME=/opt/rustup CARGO_HOME=/opt/cargo
RUN curl -fsSL https://sh.rustup.rs -o /tmp/rustup-init.sh \
    && sh /tmp/rustup-init.sh -y --no-modify-path --profile minimal --default-toolchain none \
    && rm /tmp/rustup-init.sh \
    && ln -s /opt/cargo/bin/rustup /usr/local/bin/rustup

# Verus: the pinned release zip in /opt/verus, plus the Rust toolchain its version.json names (Verus looks it up by
# that exact name). The wrapper gives Verus the rustup location, which a job's clean environment does not carry.
RUN curl -fsSL -o /tmp/verus.zip \
        "https://github.com/verus-lang/verus/releases/download/release%2F${VERUS_VERSION}/verus-${VERUS_VERSION}-x86-linux.zip" \
    && if [ -n "${VERUS_SHA256}" ]; then echo "${VERUS_SHA256}  /tmp/verus.zip" | sha256sum -c -; fi \
    && unzip -q /tmp/verus.zip -d /opt \
    && mv /opt/verus-x86-linux /opt/verus \
    && rm /tmp/verus.zip \
    && toolchain="$(python3 -c 'import json; print(json.load(open("/opt/verus/version.json"))["verus"]["toolchain"])')" \
    && rustup toolchain install --profile minimal "${toolchain}" \
    && chmod -R a+rX /opt/rustup /opt/cargo /opt/verus \
    && printf '%s\n' '#!/bin/sh' 'export RUSTUP_HOME=/opt/rustup CARGO_HOME=/opt/cargo' \
        'export PATH="$PATH:/opt/cargo/bin"' 'exec /opt/verus/verus "$@"' > /usr/local/bin/verus \
    && chmod 0755 /usr/local/bin/verus \
    && verus --version

# Mount points of the docker backend: the job's tmpfs work dir, its inputs, and the runner (bound read-only).
RUN mkdir -p /work /in /opt/veriloop && chmod 1777 /work

ENV PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 DOTNET_CLI_TELEMETRY_OPTOUT=1
WORKDIR /work
USER 65534:65534
