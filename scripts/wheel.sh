#!/usr/bin/env bash
# Builds the lotus-profiler wheel that installs on any x86_64 Linux with
# glibc 2.17 or later (tag manylinux2014 / manylinux_2_17: CentOS 7, RHEL 8+,
# Debian 8+, Ubuntu 14.04+) and any CPython from 3.8: the `lotus` binary is
# linked by zig against glibc 2.17's symbols (maturin --zig), with no
# container and no system package, and the wheel holds no Python extension
# (maturin's `bin` bindings), so its tag is py3-none.
#
#     bash scripts/wheel.sh [OUT_DIR]     # default: target/wheels
#
# maturin and zig (PyPI's `ziglang`) are installed, at the versions pinned
# below, into a private venv under target/wheel-tools (made once, kept; a
# half-made one is made again). Needs PyPI the first time, a Rust toolchain
# and a Python 3 (LOTUS_WHEEL_PYTHON, else python3). Prints the wheel's path.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-target/wheels}"
tools="$PWD/target/wheel-tools"
python="${LOTUS_WHEEL_PYTHON:-python3}"
pins=("maturin==1.16.0" "ziglang==0.17.1")

if ! "$tools/bin/python" -c "import ziglang" 2>/dev/null || [ ! -x "$tools/bin/maturin" ] ||
    [ "$(cat "$tools/pins" 2>/dev/null)" != "${pins[*]}" ]; then
    echo "wheel: installing ${pins[*]} into $tools (once)" >&2
    rm -rf "$tools"
    "$python" -m venv "$tools"
    if ! "$tools/bin/python" -m pip install --quiet "${pins[@]}"; then
        rm -rf "$tools"
        echo "wheel: cannot install ${pins[*]} from PyPI (no network?)" >&2
        exit 1
    fi
    echo "${pins[*]}" >"$tools/pins"
fi

mkdir -p "$out"
before=$(date +%s)
# cargo's own settings of the caller (a test's CARGO_TARGET_DIR, RUSTFLAGS)
# are not the wheel's; maturin finds zig through the venv's PATH.
env -u CARGO_TARGET_DIR -u RUSTFLAGS PATH="$tools/bin:$PATH" \
    maturin build --release --zig --compatibility manylinux2014 --out "$out" >&2
wheel=$(ls -t "$out"/lotus_profiler-*-manylinux*.whl | head -n 1)
echo "wheel: built in $(($(date +%s) - before)) s: $wheel" >&2
echo "$wheel"
