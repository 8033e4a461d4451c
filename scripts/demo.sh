#!/usr/bin/env bash
# The main job on the built-in example: map the fixture ops (JPEG load, crop
# and resize, flip, to-tensor, normalize, collate on Pillow and numpy, and a
# C library of known functions) to the native functions they run, live,
# through Linux perf. Then the same from the Lotus study's VTune reports.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mkdir -p out
./target/release/lotus map --backend perf --python .venv/bin/python fixtures/ops/*.py --top 6 --out out/mapping.json
./target/release/lotus show out/mapping.json --top 6
./target/release/lotus map --backend vtune --from-reports fixtures/reports/vtune/hotspots --format lotus --out out/vtune_mapping_funcs.json
