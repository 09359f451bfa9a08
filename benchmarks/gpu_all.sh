#!/usr/bin/env bash
# One call on a GPU machine (H100/H200, 16 cores) answers every open GPU question, in at most 540 s:
#
#   OUT=/some/dir bash benchmarks/gpu_all.sh          # a CUDA machine: plain python3 with torch+CUDA, typer, rich, psutil
#   GPU_ALL_DRY=1 OUT=/tmp/dry bash benchmarks/gpu_all.sh   # the same steps on the CPU, shorter: to test this script
#   ONLY='scan|spreads' OUT=... bash benchmarks/gpu_all.sh  # the steps whose names match
#
# The checkout runs as it is (PYTHONPATH=., no install). Each step has its own time limit (`timeout`),
# so a hang loses that step only; the Python steps also stop themselves before it (the scan is
# interrupted as Ctrl-C does and saves; race_coverage.py starts no race past its deadline), and
# every figure is written under $OUT as it comes: log.txt (all text) and seven JSON files.
#
#   step               limit  answers                                                    file
#   machine             15 s  nvidia-smi, nproc, Python, torch and CUDA versions          log.txt
#   verify              60 s  `doctor --verify`: the GPU path loadtune's figures rest on  verify.json
#   scan               180 s  the README example's default scan (its quick-start flags,   scan_images.json,
#                             no budget), timed wall clock: the pick, its gain over       gpu_scan.json
#                             PyTorch's defaults and interval, each leg's turn-pair
#                             half-widths, every trial's per-block spread (gpu_scan.py)
#   coverage_workers   share  race_coverage.py: does the race's ratio interval hold what  coverage_workers.json
#   coverage_transfer  share  plain loops of the two configs give on the GPU? w8 against  coverage_transfer.json
#   coverage_defaults  share  w4, non_blocking against stream at the pick, the pick       coverage_defaults.json
#                             against PyTorch's defaults: 5 races of 2 legs each asked,
#                             as many as fit, with 2 short long-run rounds first
#   autotune            80 s  loadtune.autotune on the README example's dataset with a    autotune.json
#                             GPU step, against the best fixed config of long runs
#   spreads             10 s  the trials' per-block spreads, from the scan's JSON         log.txt
#
# "share": what the steps before left of the 540 s, less the last two steps' limits, split evenly
# between the coverage steps still to run (about 65 s each; more where the steps before ended early);
# each starts no race or long round past 15 s before its limit. The limits add up to 540 s.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
O=${OUT:-/tmp/loadtune-gpu}
mkdir -p "$O"
LOG=$O/log.txt
PY=${PYTHON:-python3}

if [[ -n "${GPU_ALL_DRY:-}" ]]; then  # the CPU, shorter runs: every step and file, nothing measured that matters
    TOTAL=480 DEVICE=cpu SCAN_LIMIT=140 SCAN_TIMEOUT=110
    SCAN_FLAGS="--workers 0,1,2 --prefetch 2 --no-persistent --warmup 0.2 --block-time 0.2 --device cpu"
    COVER="--device cpu --legs 2 --block-time 0.2 --races 2 --long-rounds 2 --long-s 1 --warm-s 0.5"
    TUNE="--device cpu --archetypes images --length 320 --repeats 1 --long-rounds 1 --check-rounds 1 --long-s 1"
    TUNE_LIMIT=100
else
    TOTAL=540 DEVICE=cuda SCAN_LIMIT=180 SCAN_TIMEOUT=150
    SCAN_FLAGS="--workers 0,1,2,4 --prefetch 2 --no-persistent"  # the README's quick start
    COVER="--device cuda --legs 2 --block-time 0.2 --races 5 --long-rounds 2 --long-s 2 --warm-s 1"
    TUNE="--device cuda --archetypes images --length 2000 --repeats 1 --long-rounds 1 --check-rounds 2 --long-s 2"
    TUNE_LIMIT=80
fi
SPREADS_LIMIT=10
COVERAGE_STEPS=3

wanted() { [[ -z "${ONLY:-}" || "$1" =~ $ONLY ]]; }  # ONLY='regex': the steps whose names match

step() {  # step SECONDS NAME COMMAND...
    local limit=$1 name=$2; shift 2
    wanted "$name" || return 0
    echo "=== $name ($(date -u +%T), limit ${limit}s)" >>"$LOG"
    local t0=$SECONDS
    timeout -k 10 "$limit" "$@" >>"$LOG" 2>&1
    echo "=== $name: rc=$? in $((SECONDS - t0))s" >>"$LOG"
}

coverage() {  # coverage NAME PAIR: the races of one pair against plain loops, in its share of the time left
    local name=$1 key=$2
    wanted "$name" || return 0
    local left=$((TOTAL - SECONDS - TUNE_LIMIT - SPREADS_LIMIT))
    local share=$((left / COVERAGE_STEPS))
    COVERAGE_STEPS=$((COVERAGE_STEPS - 1))
    if ((share < 30)); then
        echo "=== $name: skipped, ${left}s left" >>"$LOG"
        return 0
    fi
    local pair
    pair=$($PY benchmarks/gpu_scan.py --pair "$key" --out "$O/gpu_scan.json" 2>>"$LOG")
    step "$share" "$name" $PY benchmarks/race_coverage.py --spec ../examples/images.py --batch 32 $COVER \
        --pair "$pair" --deadline-s $((share - 15)) --out "$O/$name.json"
}

echo "=== start $(date -u +%T), device $DEVICE, at most ${TOTAL}s" >>"$LOG"
step 15 machine bash -c 'nvidia-smi || true; nproc; "$1" -c "import sys, torch; print(sys.version); print(torch.__version__,
    torch.version.cuda, torch.cuda.get_device_name() if torch.cuda.is_available() else \"no CUDA device\")"' facts "$PY"
step 60 verify $PY -m loadtune doctor --verify --json "$O/verify.json"
step "$SCAN_LIMIT" scan $PY benchmarks/gpu_scan.py --flags "$SCAN_FLAGS" --timeout "$SCAN_TIMEOUT" \
    --scan "$O/scan_images.json" --out "$O/gpu_scan.json"
coverage coverage_workers workers
coverage coverage_transfer transfer
coverage coverage_defaults defaults
step "$TUNE_LIMIT" autotune $PY benchmarks/autotune.py $TUNE --out "$O/autotune.json"
[[ -f "$O/scan_images.json" ]] && step "$SPREADS_LIMIT" spreads $PY benchmarks/gpu_scan.py --spreads "$O/scan_images.json"
echo "=== done $(date -u +%T) in ${SECONDS}s" >>"$LOG"
