#!/usr/bin/env bash
# Every GPU check in one call, for a session that is lent a CUDA machine for a few minutes.
#
#   OUT=/some/dir bash benchmarks/gpu_all.sh
#
# Runs the checkout as it is (PYTHONPATH=., no install): the machine's facts, `doctor`,
# `doctor --verify`, the tests marked cuda, the quick test subset with a GPU present, the GPU
# benchmarks (copy, overlap, forked workers beside CUDA, achieved rate) and a scan of the README's
# example. Each step has its own time limit, so whatever finished comes back even when a later step
# hangs; all text goes to $OUT/log.txt, figures to $OUT/*.json (at most eight files in all).
# ONLY='regex' runs the steps whose names match. The essential steps come first (about 8 minutes at
# most); give the call 600 s and the extras after them run as far as it lasts.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
O=${OUT:-/tmp/loadtune-gpu}
mkdir -p "$O"
LOG=$O/log.txt

step() {  # step SECONDS NAME COMMAND...
    local limit=$1 name=$2; shift 2
    [[ -n "${ONLY:-}" && ! "$name" =~ $ONLY ]] && return  # ONLY='regex': the steps whose names match
    echo "=== $name ($(date -u +%T), limit ${limit}s)" >>"$LOG"
    local t0=$SECONDS
    timeout "$limit" "$@" >>"$LOG" 2>&1
    echo "=== $name: rc=$? in $((SECONDS - t0))s" >>"$LOG"
}

step 20 machine bash -c 'nvidia-smi; nproc; python3 -c "import sys, torch; print(sys.version); print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"'
step 40 doctor python3 -m loadtune doctor
step 60 verify python3 -m loadtune doctor --verify --json "$O/verify.json"
step 150 "tests marked cuda" python3 -m pytest -m cuda -q -p no:cacheprovider -rs --ignore tests/test_layers.py tests
step 120 gpu_fork python3 benchmarks/gpu_fork.py --repeats 1 --epochs 10 --variants plain,persistent,cpu,garbage,start --out "$O/gpu_fork.json"
step 30 gpu_copy python3 benchmarks/gpu_copy.py --out "$O/gpu_copy.json"
step 30 gpu_overlap python3 benchmarks/gpu_overlap.py --out "$O/gpu_overlap.json"
# extras: what a 10-minute call leaves time for after the above (about 5 minutes of it on an H100)
step 150 "quick tests with a GPU present" python3 -m pytest -m "not slow" -q -p no:cacheprovider --ignore tests/test_layers.py tests
step 100 "scan of the README example" python3 -m loadtune scan examples/images.py --workers 0,1,2,4,8 --prefetch 2 \
    --budget 60 --json "$O/scan_images.json"
step 200 gpu_achieved python3 benchmarks/gpu_achieved.py --out "$O/gpu_achieved.json"
echo "=== done $(date -u +%T)" >>"$LOG"
