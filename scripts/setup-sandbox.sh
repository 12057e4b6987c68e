#!/usr/bin/env bash
# Install and start what veriloop's sandboxes need, as root on Debian 12 with only the package
# registries reachable. Idempotent: every step checks first and does nothing when already done.
#
#   bubblewrap (the default sandbox), debootstrap, Docker (Debian docker.io; dockerd started with
#   flags that work inside this kind of VM, on overlay2 where it can), the language toolchains that are
#   missing, and a local sandbox image built from a debootstrap root file system (no registry needed).
#
# Environment:
#   VERILOOP_SANDBOX_IMAGE   image tag to build (default veriloop-sandbox:local)
#   VERILOOP_SKIP_DOCKER=1   only the bubblewrap parts
#   VERILOOP_SKIP_IMAGE=1    start dockerd but do not build the image
#   VERILOOP_DOCKER_STORAGE_DRIVER   dockerd's storage driver (default: the first of overlay2, fuse-overlayfs, vfs
#                            that works, or the one whose images /var/lib/docker already holds)
set -euo pipefail

IMAGE="${VERILOOP_SANDBOX_IMAGE:-veriloop-sandbox:local}"
CACHE_DIR="${VERILOOP_SANDBOX_CACHE:-/var/cache/veriloop}"
DOCKERD_LOG="${CACHE_DIR}/dockerd.log"
# Toolchains inside the local image: the same languages the bwrap backend serves from the host.
IMAGE_PACKAGES="python3,gcc,g++,libc6-dev,openjdk-17-jdk-headless,nodejs,rustc,golang-go,procps"

log() { printf 'setup-sandbox: %s\n' "$*" >&2; }

if [[ "$(id -u)" != 0 ]]; then
  log "must run as root"
  exit 1
fi
mkdir -p "$CACHE_DIR"

# ------------------------------------------------------------------ packages
apt_updated=0
apt_install() {
  if [[ $apt_updated == 0 ]]; then
    apt-get update -qq
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
candidate_known() {  # not `apt-cache | grep -q`: under pipefail, grep's early exit makes apt-cache's SIGPIPE a "no"
  local policy
  policy=$(apt-cache policy "$1" 2>/dev/null || true)
  [[ $policy == *"Candidate: "[0-9]* ]]
}
has_candidate() {  # a failed or partial index update (a registry hiccup) is retried once before a package is given up
  [[ $apt_updated != 0 ]] || { apt-get update -qq; apt_updated=1; }
  candidate_known "$1" && return 0
  [[ $apt_updated == 2 ]] && return 1
  log "no candidate for $1: updating the package index again"
  apt-get update -qq || true
  apt_updated=2
  candidate_known "$1"
}

missing=()
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v setpriv >/dev/null || missing+=(util-linux)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v gcc >/dev/null || missing+=(gcc libc6-dev)
command -v g++ >/dev/null || missing+=(g++)
command -v javac >/dev/null || missing+=(openjdk-17-jdk-headless)
command -v node >/dev/null || missing+=(nodejs)
command -v rustc >/dev/null || [[ -x "${HOME:-/root}/.cargo/bin/rustc" ]] || missing+=(rustc)
if [[ "${VERILOOP_SKIP_DOCKER:-0}" != 1 ]] && ! command -v dockerd >/dev/null; then
  missing+=(docker.io)
fi
if ((${#missing[@]})); then
  log "installing ${missing[*]}"
  apt_install "${missing[@]}"
fi
if ! command -v go >/dev/null; then
  if has_candidate golang-go; then
    log "installing golang-go"
    apt_install golang-go
  else
    log "golang-go has no candidate: language go will report itself unavailable"
  fi
fi

[[ "${VERILOOP_SKIP_DOCKER:-0}" == 1 ]] && { log "done (docker skipped)"; exit 0; }

# ------------------------------------------------------------------ dockerd
# Storage driver, the first that starts: overlay2 (the kernel's overlayfs: layers and containers share the image's
# files), fuse-overlayfs (the same in user space, where the kernel's overlayfs cannot be mounted but /dev/fuse
# exists), vfs (every layer and every container a full copy of the image: minutes for the Compose stack's 1.8 GB
# service image). A data root that already holds images of one driver keeps that driver (others would not see
# them); VERILOOP_DOCKER_STORAGE_DRIVER picks one.
DOCKER_ROOT=/var/lib/docker
docker_up() { docker info >/dev/null 2>&1; }
start_dockerd() {  # DRIVER: start dockerd with it; succeed when the engine answers and runs that driver
  log "starting dockerd, storage driver $1 (log: $DOCKERD_LOG)"
  # No iptables and no bridge: sandbox containers run with network_mode=none anyway.
  nohup dockerd --storage-driver="$1" --iptables=false --ip6tables=false --bridge=none \
    >"$DOCKERD_LOG" 2>&1 </dev/null &
  local pid=$!
  for _ in $(seq 1 120); do
    docker_up && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  if docker_up && [[ "$(docker info --format '{{.Driver}}')" == "$1" ]]; then
    return 0
  fi
  log "dockerd with $1 did not come up; last log lines:"
  tail -n 5 "$DOCKERD_LOG" >&2 || true
  kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  return 1
}
clear_stale_dockerd() {  # a pid file left by a dockerd that is gone (a machine restored from a snapshot) blocks a start
  local pidfile=/var/run/docker.pid old
  [[ -f $pidfile ]] || return 0
  old=$(cat "$pidfile" 2>/dev/null || true)
  if [[ -n "$old" ]] && kill -0 "$old" 2>/dev/null && tr '\0' ' ' <"/proc/$old/cmdline" 2>/dev/null | grep -q dockerd; then
    log "dockerd $old is running but does not answer: waiting up to 60 s"
    for _ in $(seq 1 120); do docker_up && return 0; kill -0 "$old" 2>/dev/null || break; sleep 0.5; done
    log "stopping the unresponsive dockerd $old"
    kill "$old" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 "$old" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$old" 2>/dev/null || true
  else
    log "removing the stale $pidfile (process ${old:-?} is gone)"
  fi
  rm -f "$pidfile"
}
if ! docker_up; then
  clear_stale_dockerd
fi
if ! docker_up; then
  drivers=(overlay2 fuse-overlayfs vfs)
  if [[ -n "${VERILOOP_DOCKER_STORAGE_DRIVER:-}" ]]; then
    drivers=("$VERILOOP_DOCKER_STORAGE_DRIVER")
  else
    for driver in overlay2 fuse-overlayfs vfs; do
      if [[ -n "$(ls -A "$DOCKER_ROOT/image/$driver/imagedb/content/sha256" 2>/dev/null)" ]]; then
        drivers=("$driver")
        log "$DOCKER_ROOT holds $driver images: keeping that storage driver"
        break
      fi
    done
  fi
  started_driver=""
  for driver in "${drivers[@]}"; do
    if [[ $driver == fuse-overlayfs ]]; then
      [[ -c /dev/fuse ]] || continue
      command -v fuse-overlayfs >/dev/null || apt_install fuse-overlayfs || continue
    fi
    if start_dockerd "$driver"; then
      started_driver=$driver
      break
    fi
  done
  [[ -n "$started_driver" ]] || { log "dockerd did not start with any of: ${drivers[*]}"; exit 1; }
fi
log "docker engine $(docker version --format '{{.Server.Version}}'), storage driver $(docker info --format '{{.Driver}}')"

[[ "${VERILOOP_SKIP_IMAGE:-0}" == 1 ]] && { log "done (image skipped)"; exit 0; }

# ------------------------------------------------------------------ local sandbox image
if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  log "image $IMAGE present"
  exit 0
fi

# The mirror and suite come from this machine's own apt configuration.
mirror="$(grep -h -m1 -E '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | head -n1 || true)"
if [[ -z "$mirror" ]]; then
  mirror="$(grep -h -m1 -E '^deb ' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' | head -n1 || true)"
fi
suite="$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")"
if [[ -z "$mirror" ]]; then
  log "no Debian mirror found in the apt configuration"
  exit 1
fi

rootfs="$(mktemp -d "${CACHE_DIR}/rootfs.XXXXXX")"
cleanup() {
  umount -R "$rootfs/proc" "$rootfs/sys" 2>/dev/null || true
  rm -rf --one-file-system "$rootfs"
}
trap cleanup EXIT
started=$SECONDS
# Two stages, so that dpkg is configured before it installs anything: no fsync per file (a throw-away tree; the
# slow part of a one-stage debootstrap here) and none of the files a sandbox never reads: docs, man pages, locales,
# Go's race-detector library, its compiled cmd/ packages (only for building Go itself) and test tree, the JDK's
# jmods. Smaller also means faster containers: on the vfs storage driver every create copies the whole image.
log "debootstrap $suite (minbase + toolchains) into $rootfs: stage 1 (download, unpack)"
debootstrap --foreign --variant=minbase --include="$IMAGE_PACKAGES" "$suite" "$rootfs" "$mirror" \
  >"${CACHE_DIR}/debootstrap.log" 2>&1 || {
  log "debootstrap failed; last log lines:"
  tail -n 20 "${CACHE_DIR}/debootstrap.log" >&2
  exit 1
}
mkdir -p "$rootfs/etc/dpkg/dpkg.cfg.d" "$rootfs/usr/share/man/man1"  # man1: the JDK's alternatives link there
printf '%s\n' force-unsafe-io \
  'path-exclude=/usr/share/doc/*' 'path-include=/usr/share/doc/*/copyright' 'path-exclude=/usr/share/man/*' \
  'path-exclude=/usr/share/info/*' 'path-exclude=/usr/share/locale/*' 'path-exclude=/usr/share/lintian/*' \
  'path-exclude=/usr/lib/go-*/pkg/*_race/*' 'path-exclude=/usr/lib/go-*/pkg/*/cmd/*' \
  'path-exclude=/usr/share/go-*/test/*' 'path-exclude=/usr/lib/jvm/*/jmods/*' 'path-exclude=/usr/lib/jvm/*/man/*' \
  >"$rootfs/etc/dpkg/dpkg.cfg.d/veriloop-sandbox"
log "stage 2 (install, configure) after $((SECONDS - started)) s"
chroot "$rootfs" /debootstrap/debootstrap --second-stage >>"${CACHE_DIR}/debootstrap.log" 2>&1 || {
  log "debootstrap (second stage) failed; last log lines:"
  tail -n 20 "${CACHE_DIR}/debootstrap.log" >&2
  exit 1
}
umount -R "$rootfs/proc" "$rootfs/sys" 2>/dev/null || true
log "installed after $((SECONDS - started)) s"
# What the first stage unpacked before dpkg had its settings, and what apt and debootstrap leave behind.
rm -rf "${rootfs:?}"/var/cache/apt/* "${rootfs:?}"/var/lib/apt/lists/* "${rootfs:?}"/usr/share/man/* \
  "${rootfs:?}"/usr/share/info/* "${rootfs:?}"/usr/share/locale/* "${rootfs:?}"/var/log/* "${rootfs:?}"/debootstrap
find "$rootfs/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete 2>/dev/null || true
chmod 0755 "$rootfs"  # mktemp made it 0700: the image root must be traversable by uid 65534
mkdir -p "$rootfs/work" "$rootfs/in" "$rootfs/opt/veriloop"
chmod 1777 "$rootfs/work"
log "docker import -> $IMAGE"
tar -C "$rootfs" -c . | docker import \
  --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8' \
  --change 'WORKDIR /work' \
  - "$IMAGE" >/dev/null
log "image $IMAGE built in $((SECONDS - started)) s ($(docker image inspect "$IMAGE" --format '{{.Size}}') bytes)"
