#!/usr/bin/env bash
# Runs every test on a fresh machine: installs what the tests need (a
# Python virtual environment with Pillow and numpy in .venv), then the whole
# workspace's tests. Exits non-zero when any test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
LOTUS_SKIP_BUILD=1 bash scripts/setup.sh
export LOTUS_PYTHON="$PWD/.venv/bin/python"
cargo test --workspace --all-targets --no-fail-fast
cargo test --workspace --doc
