#!/usr/bin/env bash
# The main job on the built-in example, as a user runs it on a training
# script: trace and sample every process of a DataLoader-like pipeline
# (fixtures/trace/kernel_pipeline.py: two worker processes whose ops `Dot`
# and `PoolBlur` run C kernels, the second on a two-thread intra-op pool; no
# torch needed), then credit each sample to the op that was running
# (`lotus attribute`) and write the one-page report. Then the original
# Lotus method: map the fixture ops (JPEG load, crop and resize, flip,
# to-tensor, normalize, collate on Pillow and numpy, and a C library of
# known functions) to the native functions they run, each alone, live,
# through Linux perf, and the same from the Lotus study's VTune reports.
# No `perf` binary and no vendor tool is needed. Everything goes to out/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
lotus=./target/release/lotus
mkdir -p out
chmod go-w out  # a trace folder must be one no other user can write
# The pipeline's own per-op timers (its --report-dir) are for the tests;
# here they are only written.
mkdir -p out/kernel_pipeline_timers
echo "demo: lotus trace run --sample on fixtures/trace/kernel_pipeline.py" >&2
"$lotus" trace run --sample --clean --out out/trace -- \
    .venv/bin/python fixtures/trace/kernel_pipeline.py \
    --report-dir out/kernel_pipeline_timers --workers 2 --batches 8
"$lotus" attribute out/trace --top 2
"$lotus" report --trace out/trace --out out/report.html
echo "demo: lotus map --backend perf fixtures/ops/*.py" >&2
"$lotus" map --backend perf --python .venv/bin/python fixtures/ops/*.py --top 6 --out out/mapping.json
"$lotus" show out/mapping.json --top 6
"$lotus" map --backend vtune --from-reports fixtures/reports/vtune/hotspots --format lotus --out out/vtune_mapping_funcs.json
echo "demo: done in $SECONDS s: out/trace (open out/report.html), out/mapping.json, out/vtune_mapping_funcs.json" >&2
echo "demo: lotus is ./target/release/lotus; to run it as \`lotus\` (as the README's commands do): export PATH=\"$PWD/target/release:\$PATH\"" >&2
