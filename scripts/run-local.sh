#!/usr/bin/env bash
# Run the whole disttrain pipeline on one machine, one process per stage:
#   copier -> WORKERS trainer processes -> aggregator -> server (foreground).
# The same programs the containers run; the "shared volume" is a local folder.
# Configuration comes from the environment (the Makefile passes its variables).
set -euo pipefail

TASK=${TASK:-movie-reviews}        # movie-reviews | digits | faces, or set SOURCE directly
WORKERS=${WORKERS:-2}
EPOCHS=${EPOCHS:-}                 # default per task: movie-reviews 5, digits 20, faces 30
BATCH=${BATCH:-}                   # default per task: 64, faces 32 (people x 2 views)
STRATEGY=${STRATEGY:-}            # average | multiworker | localsgd | parameterserver; default per task: average, faces multiworker
SEED=${SEED:-42}
HOST=${HOST:-127.0.0.1}
PORT=${PORT:-8080}
WORKDIR=${WORKDIR:-workdir/demo}
SERVE=${SERVE:-1}                  # 0: stop after the aggregator
BIN=${BIN:-.venv/bin}
TRAINER_PORT=${TRAINER_PORT:-23456}  # multiworker, localsgd: worker i listens on TRAINER_PORT + i
SYNC_EVERY=${SYNC_EVERY:-}         # localsgd: steps between two weight averages (default: the trainer's)
PS=${PS:-1}                        # parameterserver: parameter servers (tasks: 1 chief + PS + WORKERS)
COMBINE=${COMBINE:-average}        # average | ensemble | best: which model the aggregator publishes (strategy average)
VALIDATION=${VALIDATION:-}         # average: the trainers' --validation-fraction (default 0.1 with COMBINE=best, else none)
AGGREGATOR_ARGS=${AGGREGATOR_ARGS:-}  # more aggregator flags, e.g. --exports none
# the aggregator's quality gate (empty: its defaults): accuracy points, and percent of RMSE for a regression
MAX_DROP_VS_BEST_WORKER=${MAX_DROP_VS_BEST_WORKER:-} MAX_REGRESSION=${MAX_REGRESSION:-} MIN_GAIN_VS_TRIVIAL=${MIN_GAIN_VS_TRIVIAL:-}
MAX_RELATIVE_DROP_VS_BEST_WORKER=${MAX_RELATIVE_DROP_VS_BEST_WORKER:-} MAX_RELATIVE_REGRESSION=${MAX_RELATIVE_REGRESSION:-}
MIN_RELATIVE_GAIN_VS_TRIVIAL=${MIN_RELATIVE_GAIN_VS_TRIVIAL:-}
FORCE=${FORCE:-}                   # 1: publish even a model the gate refuses (recorded in report.json)
SWEEP=${SWEEP:-0}                  # 1: an Optuna sweep after the copier; the trainers take its best.json (make sweep)
TRIALS=${TRIALS:-12}               # sweep: trials in total
PARALLEL=${PARALLEL:-2}            # sweep: disttrain-sweep processes on the one study
SWEEP_ARGS=${SWEEP_ARGS:-}         # sweep: more flags, e.g. "--epochs 2:4 --learning-rate 1e-3:1e-2"
# your own data and model (docs: "Train your own model")
SOURCE=${SOURCE:-}                 # e.g. table:my.csv (CSV or Parquet), npz:arrays.npz, images:DIR, csv:reviews.csv
LABEL_COLUMN=${LABEL_COLUMN:-}     # table: the label column (copier default: label)
PROBLEM=${PROBLEM:-}               # table, npz: classification (copier default) | regression
MODEL_FILE=${MODEL_FILE:-}         # a .keras file (model.save()): every worker starts from it
MODEL_MODULE=${MODEL_MODULE:-}     # MODULE[:FUNCTION]: build(spec) returns the model, or the custom layers of MODEL_FILE;
                                   # the current directory is on PYTHONPATH, so ./mymodels.py is MODEL_MODULE=mymodels

# a table is small and quick to go over: more epochs, smaller batches (before the TASK defaults)
case "$SOURCE" in table:*|npz:*) EPOCHS=${EPOCHS:-30}; BATCH=${BATCH:-32} ;; esac
case "$TASK" in
  movie-reviews) SOURCE=${SOURCE:-sample:movie-reviews}; EPOCHS=${EPOCHS:-5}; BATCH=${BATCH:-64} ;;
  digits)        SOURCE=${SOURCE:-sample:digits}; EPOCHS=${EPOCHS:-20}; BATCH=${BATCH:-64} ;;
  # faces: multiworker, because the average of two embedding models is worse than either (the
  # aggregator's quality gate refuses it: 0.842 vs the best worker's 1.000 retrieval, 30 epochs)
  faces)         SOURCE=${SOURCE:-sample:faces}; EPOCHS=${EPOCHS:-30}; BATCH=${BATCH:-32}; STRATEGY=${STRATEGY:-multiworker} ;;
  *) [ -n "${SOURCE:-}" ] || { echo "unknown TASK=$TASK (movie-reviews | digits | faces), or set SOURCE=" >&2; exit 2; }
     EPOCHS=${EPOCHS:-5}; BATCH=${BATCH:-64} ;;
esac
STRATEGY=${STRATEGY:-average}
if [ "$COMBINE" = best ]; then VALIDATION=${VALIDATION:-0.1}; fi  # best ranks the workers on their validation split

# A fresh run: old markers must not satisfy this run's stages.
rm -rf "$WORKDIR/data" "$WORKDIR/train" "$WORKDIR/final" "$WORKDIR/sweep" "$WORKDIR/tensorboard"
mkdir -p "$WORKDIR/logs"
started=$(date +%s)

COPIER_ARGS=() MODEL_ARGS=() MODULE_ARGS=()
[ -n "$LABEL_COLUMN" ] && COPIER_ARGS+=(--label-column "$LABEL_COLUMN")
[ -n "$PROBLEM" ] && COPIER_ARGS+=(--problem "$PROBLEM")
[ -n "$MODEL_FILE" ] && MODEL_ARGS+=(--model-file "$MODEL_FILE")
if [ -n "$MODEL_MODULE" ]; then
  MODULE_ARGS+=(--model-module "$MODEL_MODULE")
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # the trainer, aggregator and server import it
fi

echo "== copier: $SOURCE -> $WORKERS shards"
"$BIN/disttrain-copier" --source "$SOURCE" --n-shards "$WORKERS" --workdir "$WORKDIR" "${COPIER_ARGS[@]}"

# Wait for every process; when one fails, stop the others and exit naming what failed.
wait_all() {
  local what=$1 pid
  shift
  for pid in "$@"; do
    wait "$pid" || { echo "$what failed; see $WORKDIR/logs" >&2; kill "$@" 2>/dev/null || true; exit 1; }
  done
}

PARAMS_ARGS=()
if [ "$SWEEP" = 1 ]; then
  # localsgd: trials are groups of 2 trainers, and H (--sync-every) is searched too
  [ "$STRATEGY" = localsgd ] && SWEEP_ARGS="--strategy localsgd $SWEEP_ARGS"
  echo "== sweep: $TRIALS trials, $PARALLEL processes on one Optuna study (logs in $WORKDIR/logs/sweep-N.log)"
  sweep_started=$(date +%s) pids=()
  for ((i = 0; i < PARALLEL; i++)); do
    # shellcheck disable=SC2086  # SWEEP_ARGS: several words
    "$BIN/disttrain-sweep" --workdir "$WORKDIR" --trials "$TRIALS" --process-index "$i" --seed "$SEED" $SWEEP_ARGS \
      > >(tee "$WORKDIR/logs/sweep-$i.log" | grep --line-buffered -v " epoch ") 2>&1 &
    pids+=($!)
  done
  wait_all "a sweep process" "${pids[@]}"
  echo "sweep wall time: $(( $(date +%s) - sweep_started ))s; $WORKDIR/sweep/best.json, trials.csv, history.png, importances.png, parallel.png"
  PARAMS_ARGS=(--params-from "$WORKDIR/sweep/best.json")
fi

echo "== trainer: $WORKERS workers, $STRATEGY, $([ "$SWEEP" = 1 ] && echo "the sweep's parameters" || echo "$EPOCHS epochs, batch $BATCH") (logs in $WORKDIR/logs)"
TASKS=$WORKERS PS_ARGS=()
if [ "$STRATEGY" = parameterserver ]; then TASKS=$((1 + PS + WORKERS)) PS_ARGS=(--ps "$PS"); fi
pids=()
for ((i = 0; i < TASKS; i++)); do
  # The whole output goes to the log file; our progress and error lines come through.
  "$BIN/disttrain-trainer" --workdir "$WORKDIR" --worker-index "$i" --workers "$WORKERS" --epochs "$EPOCHS" \
    --batch "$BATCH" --strategy "$STRATEGY" --seed "$SEED" --port "$TRAINER_PORT" ${SYNC_EVERY:+--sync-every "$SYNC_EVERY"} \
    ${VALIDATION:+--validation-fraction "$VALIDATION"} \
    "${PS_ARGS[@]}" "${PARAMS_ARGS[@]}" "${MODEL_ARGS[@]}" "${MODULE_ARGS[@]}" > >(tee "$WORKDIR/logs/worker-$i.log" | grep --line-buffered -E "^(worker|ps|chief|trainer:|error:|disttrain-trainer: error:) ") 2>&1 &
  pids+=($!)
done
wait_all "a trainer" "${pids[@]}"

echo "== aggregator"
GATE_ARGS=()
[ -n "$MAX_DROP_VS_BEST_WORKER" ] && GATE_ARGS+=(--max-drop-vs-best-worker "$MAX_DROP_VS_BEST_WORKER")
[ -n "$MAX_REGRESSION" ] && GATE_ARGS+=(--max-regression "$MAX_REGRESSION")
[ -n "$MIN_GAIN_VS_TRIVIAL" ] && GATE_ARGS+=(--min-gain-vs-trivial "$MIN_GAIN_VS_TRIVIAL")
[ -n "$MAX_RELATIVE_DROP_VS_BEST_WORKER" ] && GATE_ARGS+=(--max-relative-drop-vs-best-worker "$MAX_RELATIVE_DROP_VS_BEST_WORKER")
[ -n "$MAX_RELATIVE_REGRESSION" ] && GATE_ARGS+=(--max-relative-regression "$MAX_RELATIVE_REGRESSION")
[ -n "$MIN_RELATIVE_GAIN_VS_TRIVIAL" ] && GATE_ARGS+=(--min-relative-gain-vs-trivial "$MIN_RELATIVE_GAIN_VS_TRIVIAL")
case "$FORCE" in ""|0) ;; *) GATE_ARGS+=(--force) ;; esac
# shellcheck disable=SC2086  # AGGREGATOR_ARGS: several words
"$BIN/disttrain-aggregator" --workdir "$WORKDIR" --expect "$WORKERS" --combine "$COMBINE" "${MODULE_ARGS[@]}" "${GATE_ARGS[@]}" $AGGREGATOR_ARGS 2> "$WORKDIR/logs/aggregator.err" || {
  echo "the aggregator failed: $(grep -m1 '^error:' "$WORKDIR/logs/aggregator.err" || tail -n 1 "$WORKDIR/logs/aggregator.err") (all of it: $WORKDIR/logs/aggregator.err)" >&2
  exit 1
}
echo "pipeline wall time: $(( $(date +%s) - started ))s; report: $WORKDIR/final/report.json, plots: $WORKDIR/final/report.png"

if [ "$SERVE" = 1 ]; then
  server_args=(--workdir "$WORKDIR" --host "$HOST" --port "$PORT" "${MODULE_ARGS[@]}")
  if [ "$TASK" = faces ]; then
    # a gallery to search: 10 photos of sample people (the test suite's photo maker) and the astronaut
    "$BIN/python" tests/server/face_photos.py "$WORKDIR/people" 10
    server_args+=(--gallery-seed "$WORKDIR/people")
  fi
  echo "== server: open http://$HOST:$PORT/ (Ctrl-C to stop)"
  exec "$BIN/disttrain-server" "${server_args[@]}"
fi
