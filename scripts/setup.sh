#!/usr/bin/env bash
# Sets up what lotus's examples and tests need on a fresh machine:
# a Python virtual environment in .venv (ignored by git) with Pillow, numpy
# and ittapi, and a release build of the `lotus` binary and its control
# library.
#
#   bash scripts/setup.sh           # the light set-up (the demo's)
#   bash scripts/setup.sh --torch   # also torch, torchvision, pandas, albumentations,
#                                   # Hugging Face datasets, timm,
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
AUG_PINS=(albumentations==2.0.8 opencv-python-headless==5.0.0.93 kornia==0.9.0 datasets==5.2.0 timm==1.0.31 tokenizers==0.23.3)
RAY_PINS=("ray[data]==2.60.0")
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
# protobuf and grpcio-tools: tests/export_pprof.rs reads `lotus export
# --format pprof` back with google/pprof's schema compiled at test time.
if [ "$want_torch" = 1 ] && ! .venv/bin/python -c 'import google.protobuf, grpc_tools' 2>/dev/null; then
    echo "setup: installing protobuf and grpcio-tools into .venv (the pprof export's reader, for the tests)" >&2
    pip_install protobuf grpcio-tools
fi
# ruff: the tracer's linter (lotus-tracer/python/ruff.toml), run by the tests.
RUFF_PIN=ruff==0.17.6
if [ "$want_torch" = 1 ] && ! .venv/bin/ruff --version 2>/dev/null | grep -q "${RUFF_PIN#ruff==}"; then
    echo "setup: installing $RUFF_PIN into .venv (the tracer's linter, for the tests)" >&2
    pip_install "$RUFF_PIN"
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
# albumentations (with OpenCV's decoder), kornia, Hugging Face datasets'
# set_transform and timm are tested on pipelines written with them
# (tests/trace_pipelines.rs, fixtures/pipelines/); Hugging Face tokenizers'
# rayon pool, in a collate_fn, is credited by cause.
if [ "$want_torch" = 1 ] && ! .venv/bin/python -c 'import albumentations, cv2, kornia, datasets, timm, tokenizers' 2>/dev/null; then
    echo "setup: installing ${AUG_PINS[*]} into .venv (the pipelines of the tracer's tests)" >&2
    pip_install "${AUG_PINS[@]}"
fi
# Ray Data, for the tracer's Ray hooks: a pipeline of three operators on
# a local Ray cluster of two nodes (tests/trace_ray.rs). About 250 MB.
if [ "$want_torch" = 1 ] && ! .venv/bin/python -c 'import ray.data' 2>/dev/null; then
    echo "setup: installing ${RAY_PINS[*]} into .venv (the Ray Data pipeline of the tracer's tests)" >&2
    pip_install "${RAY_PINS[@]}"
fi
# A Python 3.12+ venv, .venv312 (ignored by git), for the tracer's spans
# finer than a dataset's __getitem__ (sys.monitoring is 3.12's): numpy and
# the same torch, installed without its CUDA dependencies, which it finds
# in .venv instead (the NVIDIA wheels hold plain shared libraries, the same
# for every Python; a .pth file puts .venv312/cuda-from-venv, a link to
# .venv's `nvidia` folder, on its path). About 1.4 GB instead of 5.4.
# Where no Python 3.12 or 3.13 is found (pyenv's, or python3.12/python3.13
# on PATH), the tests that need it say they are skipped.
find_python312() {
    local p
    for p in "${LOTUS_PYTHON312_BASE:-}" "$HOME"/.pyenv/versions/3.12*/bin/python3 "$HOME"/.pyenv/versions/3.13*/bin/python3 \
        "$(command -v python3.12 || true)" "$(command -v python3.13 || true)"; do
        if [ -n "$p" ] && [ -x "$p" ]; then
            echo "$p"
            return 0
        fi
    done
    return 1
}
if [ "$want_torch" = 1 ] && ! .venv312/bin/python -c 'import torch, numpy' 2>/dev/null; then
    if py312=$(find_python312); then
        echo "setup: creating .venv312 with $($py312 --version 2>&1): numpy and ${TORCH_PINS[0]} (its CUDA libraries from .venv)" >&2
        [ -x .venv312/bin/python ] || "$py312" -m venv .venv312
        nvidia=$(.venv/bin/python -c 'import os, sysconfig; print(os.path.join(sysconfig.get_paths()["purelib"], "nvidia"))')
        mkdir -p .venv312/cuda-from-venv
        ln -sfn "$nvidia" .venv312/cuda-from-venv/nvidia
        site=$(.venv312/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
        echo "$PWD/.venv312/cuda-from-venv" > "$site/lotus-cuda-from-venv.pth"
        # pip's resolver complains of the CUDA wheels left out: its
        # messages are kept in .venv312/pip.log, shown if torch fails.
        { .venv312/bin/python -m pip install --quiet --disable-pip-version-check --no-deps "${TORCH_PINS[0]}" &&
            .venv312/bin/python -m pip install --quiet --disable-pip-version-check numpy filelock typing-extensions sympy networkx jinja2 fsspec 'setuptools>=77.0.3'; } 2>.venv312/pip.log || true
        if ! .venv312/bin/python -c 'import torch, numpy'; then
            cat .venv312/pip.log >&2
            echo "setup: warning: .venv312 cannot import torch; the Python 3.12 tests will fail (LOTUS_REQUIRE_PIPELINE_PACKAGES=1) or be skipped" >&2
        fi
    else
        echo "setup: warning: no Python 3.12 or 3.13 found (pyenv, PATH); the tests of finer spans are skipped" >&2
    fi
fi
if [ "${LOTUS_SKIP_BUILD:-0}" != 1 ]; then
    # Cargo's own progress shows (a first release build takes minutes on
    # two CPUs), and the time it took is said.
    echo "setup: building lotus (cargo build --release; a first build takes 5-10 minutes on two CPUs)" >&2
    built_at=$SECONDS
    cargo build --release
    echo "setup: built ./target/release/lotus in $((SECONDS - built_at)) s" >&2
fi
