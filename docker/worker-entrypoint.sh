#!/bin/sh
# The worker container's entry point in the default sandbox mode (bubblewrap inside the container): Docker mounts
# the container's own cgroups read-only; bwrap's per-job memory and pids limits are child cgroups of them, so try to
# make those mounts writable (needs CAP_SYS_ADMIN, which bwrap needs anyway), then run the command. Only the
# container's own cgroup subtree is visible there, so nothing outside the container can be changed. Where the engine
# refuses (some hosts do, even to --privileged), jobs are bounded by rlimits instead (sandbox.cgroups=auto).
set -eu
if [ "$(id -u)" = 0 ]; then
  for point in /sys/fs/cgroup/memory /sys/fs/cgroup/pids; do
    if [ -d "$point" ] && [ ! -w "$point" ]; then
      mount -o remount,rw "$point" 2>/dev/null \
        || echo "worker-entrypoint: $point stays read-only: jobs get rlimits, not cgroups (sandbox.cgroups=auto)" >&2
    fi
  done
fi
exec "$@"
