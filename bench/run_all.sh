#!/usr/bin/env bash
# Every benchmark, then the plots and the tables in docs/benchmarks/results.md. One command:
#   bash bench/run_all.sh                  full run (3 repetitions each; about 60 min on an idle 2-core machine; net needs root)
#   BENCH_QUICK=1 bash bench/run_all.sh    1 repetition (metrics: 3), fewer requests (provisional numbers; about 10-14 min)
# Also: BENCH_REPS=N (repetitions), BENCH_ONLY="contention train input net sweep server metrics search copier objectstore aggregator combine progress tasks own" (a subset; net needs root),
# BENCH_COPIER_MB (copier input size, default 1024), BENCH_OBJECTSTORE_MB (the table the copier reads from SeaweedFS, default 1024), BENCH_TMP (scratch dir, default $TMPDIR or /tmp),
# BENCH_KEEP=1 (keep the scratch dirs), BENCH_BUSY_CPU (cores that other processes may use on average
# during a benchmark before its results count as provisional, 0.1).
# Run it on an otherwise idle machine: every result records what other processes used meanwhile.
set -euo pipefail
cd "$(dirname "$0")"
PY=${BENCH_PYTHON:-../.venv/bin/python}   # the venv (make venv); BENCH_PYTHON overrides
ONLY=${BENCH_ONLY:-contention train input net sweep server metrics search copier objectstore aggregator combine progress tasks own}
mkdir -p results plots logs
declare -A SCRIPT=([train]=train_scaling.py [input]=input_pipeline.py [net]=network_shaped.py [sweep]=batch_sweep.py [server]=server_bench.py [metrics]=metrics_bench.py [search]=search_bench.py [copier]=copier_bench.py [objectstore]=copier_objectstore.py [aggregator]=aggregator_bench.py [combine]=combine_bench.py [progress]=progress_overhead.py [contention]=contention.py [tasks]=task_interface.py [own]=own_model.py)
for name in $ONLY; do
  started=$(date +%s)
  echo "== $name (log: bench/logs/$name.log)"
  "$PY" "${SCRIPT[$name]}" 2>&1 | tee "logs/$name.log"
  echo "== $name: $(( $(date +%s) - started ))s"
done
"$PY" plots.py
"$PY" report.py > /dev/null
echo "== tables: docs/benchmarks/results.md; plots: bench/plots/; raw: bench/results/"
