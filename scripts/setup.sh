#!/usr/bin/env bash
# Sets up what lotus's examples and tests need on a fresh machine:
# a Python virtual environment in .venv (ignored by git) with Pillow, numpy
# and ittapi, and a release build of the `lotus` binary and its control
# library.
#
#   bash scripts/setup.sh           # the light set-up (the demo's)
#   bash scripts/setup.sh --torch   # also torch, torchvision, pandas, albumentations,
#                                   # OpenCV and kornia (the tests')
#
# --torch installs the pinned torch and torchvision below unless .venv can
# already import both. PyPI, the one registry reached here, has no CPU-only
# build for Linux x86-64: the default wheel comes with its CUDA libraries
# (about 5.4 GB in .venv, about 1.5 minutes to download and install here).
# pip's cache stays on (no --no-cache-dir), so where pip can cache, a second
# fresh .venv reuses the download. The tests run torch on the CPU only.
set -euo pipefail
cd "$(dirname "$0")/.."

TORCH_PINS=(torch==2.15.0 torchvision==0.29.2)
AUG_PINS=(albumentations==2.0.8 opencv-python-headless==5.0.0.93 kornia==0.9.0)
want_torch=0
for arg in "$@"; do
    case "$arg" in
        --torch) want_torch=1 ;;
        *) echo "setup: unknown option $arg (use --torch or nothing)" >&2; exit 2 ;;
    esac
done

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv with $($PY --version 2>&1)" >&2
    "$PY" -m venv .venv
fi
pip_install() {
    .venv/bin/python -m pip install --quiet --disable-pip-version-check "$@"
}
if ! .venv/bin/python -c 'import PIL, numpy, ittapi' 2>/dev/null; then
    echo "setup: installing Pillow, numpy and ittapi into .venv" >&2
    pip_install pillow numpy ittapi
fi
# pandas: the tests read `lotus trace run --format original` logs with the
# original study's own parser (pandas read_csv).
if [ "$want_torch" = 1 ] && ! .venv/bin/python -c 'import pandas' 2>/dev/null; then
    echo "setup: installing pandas into .venv (the study's log parser, for the tests)" >&2
    pip_install pandas
fi
# Chromium (Debian's package): the tests open `lotus report`'s page in it
# headless. Installed as root with apt-get where missing; elsewhere the
# report test says it is skipped and why.
if [ "$want_torch" = 1 ] && ! command -v chromium >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "setup: installing chromium (apt-get) for the report test" >&2
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } ||
            echo "setup: warning: chromium could not be installed; the report test will be skipped" >&2
    else
        echo "setup: warning: chromium is missing and this is not root with apt-get; the report test will be skipped" >&2
    fi
fi
if [ "$want_torch" = 1 ] && ! .venv/bin/python -c 'import torch, torchvision' 2>/dev/null; then
    echo "setup: installing ${TORCH_PINS[*]} into .venv (about 5 GB with its CUDA libraries; pip's cache is reused)" >&2
    pip_install "${TORCH_PINS[@]}"
fi
# Augmentation libraries other than torchvision: the tracer's hooks for
# albumentations (with OpenCV's decoder) and kornia are tested on pipelines
# written with them (tests/trace_pipelines.rs, fixtures/pipelines/).
if [ "$want_torch" = 1 ] && ! .venv/bin/python -c 'import albumentations, cv2, kornia' 2>/dev/null; then
    echo "setup: installing ${AUG_PINS[*]} into .venv (the pipelines of the tracer's tests)" >&2
    pip_install "${AUG_PINS[@]}"
fi
if [ "${LOTUS_SKIP_BUILD:-0}" != 1 ]; then
    cargo build --release --quiet
fi
