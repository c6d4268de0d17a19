#!/usr/bin/env bash
# Produces results/mup/ (docs/mup.md, "The transfer result"): the two learning-rate transfer
# sweeps (AdamW, Muon), the coordinate check, then the figures and summary.md drawn from the
# sweeps' Optuna studies by scripts/mup_transfer.py. Run from the repository root; one thread
# per process, as measured. The studies and MLflow runs stay in results/generated/mup/ (git
# ignores it); a re-run tops the studies up, so delete that folder to start again.
set -euo pipefail
export OMP_NUM_THREADS=1
out=results/mup
work=results/generated/mup
mkdir -p "$out" "$work"
timings="$work/timings.txt"
: > "$timings"

timed() {  # timed NAME COMMAND...: run it and append "NAME SECONDS" to the timings
    local name=$1 start=$SECONDS
    shift
    "$@"
    echo "$name $((SECONDS - start))" >> "$timings"
}

sweeps() {  # the two sweeps side by side, one process each (a study's own workers could
    # draw one grid point twice: Optuna's GridSampler picks at random among unvisited points)
    python -m minimind sweep experiments/mup/transfer_adamw.yaml & local adamw=$!
    python -m minimind sweep experiments/mup/transfer_muon.yaml & local muon=$!
    wait "$adamw" && wait "$muon"
}

timed "sweeps transfer_adamw + transfer_muon, side by side" sweeps
timed "coordcheck" python -m minimind coordcheck experiments/mup/coordcheck.yaml \
    --widths 32,64,128,256,512 --seeds 0,1 --out "$out"
python scripts/mup_transfer.py --storage "sqlite:///$work/optuna.db" --timings "$timings" \
    --out "$out"
