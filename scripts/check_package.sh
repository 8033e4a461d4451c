#!/usr/bin/env bash
# Checks that every crate of the workspace can be packaged for crates.io:
# `cargo package` fails on a path dependency without a version or missing
# metadata; each .crate must then hold its README and both license texts.
# The crates depend on each other unpublished: `--workspace` packages them
# together against a local overlay, and `--no-verify` skips building each
# .crate alone (that would fetch the unpublished siblings from crates.io).
# Needs the crates.io index (network, or a warm cargo cache).
set -euo pipefail
cd "$(dirname "$0")/.."
crates=(lotus-sys lotus-protocol lotus-sort lotus-samples lotus-symbols lotus-core lotus-trace lotus-attribute lotus-tracer lotus-control lotus-vendor lotus-backend-perf lotus-backend-vtune lotus-backend-uprof lotus-map lotus-pyframes lotus-runner lotus-cli)
cargo package --workspace --no-verify --allow-dirty --quiet
version=$(cargo metadata --no-deps --format-version 1 |
    sed -n 's/.*"name":"lotus-core","version":"\([^"]*\)".*/\1/p')
for c in "${crates[@]}"; do
    crate="target/package/$c-$version.crate"
    listing=$(tar tzf "$crate")
    for f in Cargo.toml README.md LICENSE-MIT LICENSE-APACHE; do
        if ! grep -qx "$c-$version/$f" <<<"$listing"; then
            echo "check_package: $crate has no $f" >&2
            exit 1
        fi
    done
    # crates.io shows the README only when the manifest names it.
    if ! tar xzf "$crate" -O "$c-$version/Cargo.toml" | grep -q '^readme = "README.md"'; then
        echo "check_package: $c's manifest names no readme" >&2
        exit 1
    fi
done
# C users of the control library build against the header it ships.
# (The listing is read whole first: grep -q stops early, and with pipefail
# tar's SIGPIPE would fail the test.)
listing=$(tar tzf "target/package/lotus-control-$version.crate")
if ! grep -qx "lotus-control-$version/include/lotus.h" <<<"$listing"; then
    echo "check_package: the lotus-control crate has no include/lotus.h" >&2
    exit 1
fi
echo "check_package: ${#crates[@]} crates packaged with README and licenses (target/package/)"
