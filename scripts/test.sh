#!/usr/bin/env bash
# Runs every test on a fresh machine: installs what the tests need (a
# Python virtual environment in .venv with Pillow, numpy, ittapi, torch,
# torchvision, albumentations, OpenCV, kornia, Hugging Face datasets and
# timm, and a Python 3.12+ one in .venv312; see scripts/setup.sh),
# then the whole workspace's tests (one integration test binary per crate:
# lotus-cli's end-to-end tests are the `e2e` binary, tests/main.rs).
# LOTUS_REQUIRE_TORCH=1, LOTUS_REQUIRE_PIPELINE_PACKAGES=1,
# LOTUS_REQUIRE_PYTHON312=1 (pyenv's 3.12 or 3.13, or .venv312) and
# LOTUS_REQUIRE_PYENV=1 (pyenv's 3.8, 3.9, 3.10 and 3.13) make the tests
# that need them fail, not skip, where they cannot be imported. Exits
# non-zero when any test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
LOTUS_SKIP_BUILD=1 bash scripts/setup.sh --torch
export LOTUS_PYTHON="$PWD/.venv/bin/python"
export LOTUS_REQUIRE_TORCH=1
export LOTUS_REQUIRE_PIPELINE_PACKAGES=1
export LOTUS_REQUIRE_PYTHON312=1
# The portable wheel's test installs it into pyenv's 3.8 and 3.13; the
# Python-frames test runs on pyenv's 3.9 and 3.10.
export LOTUS_REQUIRE_PYENV=1
# Snapshots (tests/snapshots/) are checked, never written: a changed output
# fails, whatever INSTA_UPDATE or INSTA_FORCE_PASS the caller's shell holds
# (docs/src/development.md says how to update them).
export INSTA_UPDATE=no
unset INSTA_FORCE_PASS
# The tracer's own unit tests and its linter (Python; the Rust side is
# tested end to end below). A failure fails the run, after the Rust tests.
tracer_status=0
PYTHONPATH=lotus-tracer/python PYTHONDONTWRITEBYTECODE=1 \
    .venv/bin/python -m unittest discover -s lotus-tracer/python/tests || tracer_status=1
.venv/bin/ruff check --no-cache lotus-tracer/python || tracer_status=1
cargo test --workspace --all-targets --no-fail-fast
cargo test --workspace --doc
# lotus-map's doctests again on their own: the workspace run has its
# harness-protocol feature on (lotus-cli's tests ask for it), which
# skips the checks that the harness's protocol is not its API.
cargo test -p lotus-map --doc
if [ "$tracer_status" != 0 ]; then
    echo "test: the tracer's unit tests or its linter failed (above)" >&2
    exit 1
fi
