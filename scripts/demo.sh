#!/usr/bin/env bash
# The main job on the built-in example: map the image-classification ops of
# the original Lotus study from their VTune reports (fixtures/reports).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mkdir -p out
./target/release/lotus map --backend vtune --from-reports fixtures/reports/vtune/hotspots --top 8
./target/release/lotus map --backend vtune --from-reports fixtures/reports/vtune/hotspots --out out/mapping.json
./target/release/lotus map --backend vtune --from-reports fixtures/reports/vtune/hotspots --format lotus --out out/mapping_funcs.json
