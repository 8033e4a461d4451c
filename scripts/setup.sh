#!/usr/bin/env bash
# Sets up what lotus's examples and tests need on a fresh machine:
# a Python virtual environment in .venv (ignored by git) with Pillow and
# numpy, and a release build of the `lotus` binary and its control library.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv with $($PY --version 2>&1)" >&2
    "$PY" -m venv .venv
fi
if ! .venv/bin/python -c 'import PIL, numpy, ittapi' 2>/dev/null; then
    echo "setup: installing Pillow and numpy into .venv" >&2
    .venv/bin/python -m pip install --quiet --disable-pip-version-check pillow numpy ittapi
fi
if [ "${LOTUS_SKIP_BUILD:-0}" != 1 ]; then
    cargo build --release --quiet
fi
