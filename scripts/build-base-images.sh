#!/usr/bin/env bash
# Local base images for the Compose stack, with no registry: one `debootstrap --variant=minbase` of this machine's
# Debian release (from its configured mirror), pared down and loaded with `docker import`, twice:
#
#   veriloop-base:bookworm            python3 + venv, bubblewrap, procps, ca-certificates: the service image's base
#                                     (no compilers); stands in for the public python:3.11-slim-bookworm
#   veriloop-postgres-base:bookworm   the same plus Debian's postgresql: docker/postgres.Dockerfile's base
#
# Then build the stack with compose.local.yaml (see docs/service.md). Idempotent: an image already there is kept.
# As root; needs debootstrap and a running Docker engine (scripts/setup-sandbox.sh installs and starts both).
#
#   VERILOOP_BASE_IMAGE, VERILOOP_POSTGRES_BASE_IMAGE   tags to build (defaults above)
set -euo pipefail

BASE="${VERILOOP_BASE_IMAGE:-veriloop-base:bookworm}"
PG_BASE="${VERILOOP_POSTGRES_BASE_IMAGE:-veriloop-postgres-base:bookworm}"
CACHE_DIR="${VERILOOP_SANDBOX_CACHE:-/var/cache/veriloop}"
PACKAGES="python3,python3-venv,bubblewrap,procps,ca-certificates"

log() { printf 'build-base-images: %s\n' "$*" >&2; }
have() { docker image inspect "$1" >/dev/null 2>&1; }

[[ "$(id -u)" == 0 ]] || { log "must run as root"; exit 1; }
docker info >/dev/null 2>&1 || { log "no Docker engine: run scripts/setup-sandbox.sh first"; exit 1; }
command -v debootstrap >/dev/null || { log "debootstrap is missing: run scripts/setup-sandbox.sh first"; exit 1; }
if have "$BASE" && have "$PG_BASE"; then
  log "images $BASE and $PG_BASE present"
  exit 0
fi
mkdir -p "$CACHE_DIR"

mirror="$(grep -h -m1 -E '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | head -n1 || true)"
[[ -n "$mirror" ]] || mirror="$(grep -h -m1 -E '^deb ' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' | head -n1 || true)"
[[ -n "$mirror" ]] || { log "no Debian mirror found in the apt configuration"; exit 1; }
suite="$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")"

rootfs="$(mktemp -d "${CACHE_DIR}/base.XXXXXX")"
cleanup() {
  umount -R "$rootfs/proc" "$rootfs/sys" "$rootfs/dev" 2>/dev/null || true
  rm -rf --one-file-system "$rootfs"
}
trap cleanup EXIT
started=$SECONDS
logfile="${CACHE_DIR}/build-base-images.log"
log "debootstrap $suite into $rootfs (log: $logfile)"
debootstrap --foreign --variant=minbase --include="$PACKAGES" "$suite" "$rootfs" "$mirror" >"$logfile" 2>&1 \
  || { log "debootstrap failed; last log lines:"; tail -n 20 "$logfile" >&2; exit 1; }
# No fsync per file (a throw-away tree) and none of the files a container never reads.
mkdir -p "$rootfs/etc/dpkg/dpkg.cfg.d"
printf '%s\n' force-unsafe-io 'path-exclude=/usr/share/doc/*' 'path-include=/usr/share/doc/*/copyright' \
  'path-exclude=/usr/share/man/*' 'path-exclude=/usr/share/info/*' 'path-exclude=/usr/share/locale/*' \
  'path-exclude=/usr/share/lintian/*' >"$rootfs/etc/dpkg/dpkg.cfg.d/veriloop-base"
chroot "$rootfs" /debootstrap/debootstrap --second-stage >>"$logfile" 2>&1 \
  || { log "debootstrap (second stage) failed; last log lines:"; tail -n 20 "$logfile" >&2; exit 1; }
umount -R "$rootfs/proc" "$rootfs/sys" 2>/dev/null || true

pare() {
  rm -rf "${rootfs:?}"/var/cache/apt/* "${rootfs:?}"/var/lib/apt/lists/* "${rootfs:?}"/usr/share/man/* \
    "${rootfs:?}"/usr/share/info/* "${rootfs:?}"/usr/share/locale/* "${rootfs:?}"/var/log/* "${rootfs:?}"/debootstrap
  find "$rootfs/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete 2>/dev/null || true
  find "$rootfs/usr/lib/python3" "$rootfs/usr/lib/python3.11" -name __pycache__ -prune -exec rm -rf {} + 2>/dev/null || true
  chmod 0755 "$rootfs"
}
import_as() {
  tar -C "$rootfs" -c . | docker import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' - "$1" >/dev/null
  log "image $1: $(docker image inspect "$1" --format '{{.Size}}') bytes, after $((SECONDS - started)) s"
}

pare
have "$BASE" || import_as "$BASE"

if ! have "$PG_BASE"; then
  # Debian's postgresql, with no cluster created at install time and no service started in the chroot.
  mkdir -p "$rootfs/etc/postgresql-common"
  echo 'create_main_cluster = false' >"$rootfs/etc/postgresql-common/createcluster.conf"
  printf '#!/bin/sh\nexit 101\n' >"$rootfs/usr/sbin/policy-rc.d" && chmod 0755 "$rootfs/usr/sbin/policy-rc.d"
  cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
  mount -t proc proc "$rootfs/proc"
  chroot "$rootfs" apt-get update -qq >>"$logfile" 2>&1
  DEBIAN_FRONTEND=noninteractive chroot "$rootfs" apt-get install -y -qq --no-install-recommends postgresql \
    >>"$logfile" 2>&1 || { log "apt-get install postgresql failed; last log lines:"; tail -n 20 "$logfile" >&2; exit 1; }
  umount "$rootfs/proc"
  rm -f "$rootfs/usr/sbin/policy-rc.d" "$rootfs/etc/resolv.conf"
  pare
  import_as "$PG_BASE"
fi
