#!/usr/bin/env bash
# What the service tests need beyond Python: Debian's Chromium (the browser tests drive it through Playwright's
# `executable_path`, so no `playwright install` and no download from a CDN) and Debian's docker-compose 1.29 (the
# test that validates compose.yaml with `docker-compose config`). Idempotent; works as root on a fresh Debian 12.
#
#   bash scripts/setup-browser.sh          install what is missing, print the chromium path as the last line
set -euo pipefail

log() { echo "setup-browser: $*" >&2; }

missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
# Fonts: a headless Chromium with no fonts renders boxes; Debian's chromium recommends these.
dpkg -s fonts-liberation >/dev/null 2>&1 || missing+=(fonts-liberation)

if ((${#missing[@]})); then
    [[ $(id -u) -eq 0 ]] || { log "missing ${missing[*]}; run as root to install them"; exit 1; }
    log "installing ${missing[*]} from Debian"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >&2; then
        apt-get update -q >&2
        apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
    fi
fi
command -v chromium
