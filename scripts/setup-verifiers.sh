#!/usr/bin/env bash
# Install the formal verifiers veriloop runs, as root on Debian 12 with only the package registries reachable.
# Idempotent: every step checks first and does nothing when already done.
#
#   Dafny   Debian's `dafny` package (2.3, on Mono); `dafny /compile:0 FILE`.
#   Nagini  PyPI `nagini` in its OWN virtualenv: it pins z3-solver 4.8.7, mypy 0.900 and pytest 7.0.0, which must
#           not reach veriloop's environment. It needs a Java runtime (17 is present; installed here if missing).
#   Verus   not installable from the registries; the adapter runs when a `verus` binary is on PATH.
#
# veriloop finds the Nagini virtualenv at .venv-nagini beside the checkout (the default here), else at
# <home>/nagini-venv, or wherever VERILOOP_VERIFIERS__NAGINI_PYTHON points.
#
# Environment:
#   VERILOOP_NAGINI_VENV   where to create Nagini's virtualenv (default: <repo>/.venv-nagini)
#   VERILOOP_PYTHON        interpreter for it (default: python3.11, else python3)
#   VERILOOP_SKIP_NAGINI=1 only Dafny
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VERILOOP_NAGINI_VENV:-$ROOT/.venv-nagini}"
NAGINI_VERSION="1.2.0"

log() { printf 'setup-verifiers: %s\n' "$*" >&2; }

if [[ "$(id -u)" != 0 ]]; then
  log "must run as root"
  exit 1
fi

apt_updated=0
apt_install() {
  if [[ $apt_updated == 0 ]]; then
    apt-get update -qq
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# ------------------------------------------------------------------ Dafny
if ! command -v dafny >/dev/null 2>&1; then
  log "installing Debian's dafny (Mono)"
  apt_install dafny
fi
log "dafny: $(dafny /version 2>/dev/null | head -n 1)"

# ------------------------------------------------------------------ Nagini
if [[ "${VERILOOP_SKIP_NAGINI:-0}" == 1 ]]; then
  exit 0
fi
if ! command -v java >/dev/null 2>&1; then
  log "installing a Java runtime for Nagini's Viper back end"
  apt_install openjdk-17-jre-headless
fi
python="${VERILOOP_PYTHON:-}"
if [[ -z "$python" ]]; then
  python="$(command -v python3.11 || command -v python3)"
fi
# pyenv shims cost 50-110 ms per start: use the interpreter behind them.
python="$("$python" -c 'import os, sys; print(os.path.realpath(sys.executable))')"
if ! "$python" -c 'import venv, ensurepip' >/dev/null 2>&1; then
  log "installing python3-venv"
  apt_install python3-venv
fi
if [[ ! -x "$VENV/bin/python" ]]; then
  log "creating Nagini's virtualenv at $VENV"
  "$python" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('nagini') != '$NAGINI_VERSION')" \
    >/dev/null 2>&1; then
  log "installing nagini $NAGINI_VERSION into $VENV"
  "$VENV/bin/pip" install -q "nagini==$NAGINI_VERSION"
fi
"$VENV/bin/python" -c 'import nagini_translation, nagini_contracts' >/dev/null
log "nagini: $("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("nagini"))') at $VENV/bin/python"
