#!/usr/bin/env bash
# One run of every GPU check of issue 32 on a CUDA machine, most telling first (its steps' time-outs
# add up to 9 minutes with PROFILE=1, to fit one 10-minute device call),
# everything written under $OUT:
#   gpu.txt          the GPU's name, driver, torch, date
#   tests.txt        pytest tests/gpu: CUDA paths, pair graphs replayed (core.explain.cuda_graph),
#                    JPEGs decoded on the device
#   bench.json       dmlviewer bench explain / extract / train-step --device cuda (this tree);
#                    explain times each pair eagerly and with its graph replayed, extract each
#                    decoder; packaging/bench_summary.py prints the rows
#   metrics.json     bench metrics on 60,000 rows
#   profile.txt      with PROFILE=1: packaging/gpu_profile.py (torch.profiler of a pair,
#                    extraction at several worker counts, the loader alone, nvJPEG)
#   before.json      with BEFORE=/path/to/old/tree: bench explain and extract of that tree
# Usage (from the repository root): OUT=/tmp/out [WHEELS=.whl] [PROFILE=1] [BEFORE=...] packaging/gpu_check.sh
# It needs torch with CUDA, torchvision, h5py, opencv, timm, pytest; other Python packages the
# project needs (psygnal, pytorch-metric-learning) can be given as wheels in $WHEELS
# (installed to a temporary folder).
set -u
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 QT_QPA_PLATFORM=offscreen
PY=${PY:-python3}
if [ -n "${WHEELS:-}" ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl
  export PYTHONPATH=/tmp/site
fi
HERE=$(pwd)
export PYTHONPATH=$HERE${PYTHONPATH:+:$PYTHONPATH}
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; date -u +%F;
  $PY -c "import torch, torchvision; print('torch', torch.__version__, 'torchvision', torchvision.__version__)"; nproc; } \
  >"$OUT/gpu.txt" 2>&1
cat "$OUT/gpu.txt"

step() { echo "== $1 ($(date +%T))"; }

step "bench explain on cuda"
: >"$OUT/bench.json"
bench() {  # seconds, then the bench arguments
  local limit=$1; shift
  timeout "$limit" $PY -m dmlviewer bench "$@" --json --device cuda >>"$OUT/bench.json" 2>>"$OUT/bench.err" \
    || echo "bench $1 failed: $?" | tee -a "$OUT/bench.err"
}
bench 140 explain
$PY packaging/bench_summary.py "$OUT/bench.json"
grep -i "cuda graph\|eagerly" "$OUT/bench.err" | sort | uniq -c | head

step "GPU tests"
timeout 170 $PY -m pytest -q -p no:cacheprovider -rfE tests/gpu -o addopts="" --timeout 90 2>&1 | tee "$OUT/tests.txt" | tail -40

if [ -n "${PROFILE:-}" ]; then
  step "profile of a pair"
  timeout 70 $PY packaging/gpu_profile.py pairs cprofile >"$OUT/profile.txt" 2>&1; tail -60 "$OUT/profile.txt"
fi
step "bench extract / train-step on cuda"
bench 80 extract
bench 30 train-step
$PY packaging/bench_summary.py "$OUT/bench.json" | grep -v "^explain"
if [ -n "${PROFILE:-}" ]; then
  step "profile of extraction"
  timeout 70 $PY packaging/gpu_profile.py extract >>"$OUT/profile.txt" 2>&1; tail -25 "$OUT/profile.txt"
fi
if [ -n "${BEFORE:-}" ]; then
  step "before: bench explain / extract on cuda ($BEFORE)"
  (cd "$BEFORE" && PYTHONPATH=$BEFORE${PYTHONPATH#$HERE} timeout 200 $PY -m dmlviewer bench explain --json --device cuda \
    && PYTHONPATH=$BEFORE${PYTHONPATH#$HERE} timeout 100 $PY -m dmlviewer bench extract --json --device cuda) \
    >"$OUT/before.json" 2>>"$OUT/bench.err" || echo "before failed" | tee -a "$OUT/bench.err"
  $PY packaging/bench_summary.py "$OUT/before.json"
fi
step "bench metrics on cuda (60,000 rows)"
timeout 60 $PY -m dmlviewer bench metrics --size 60000 --json --device cuda >"$OUT/metrics.json" 2>>"$OUT/bench.err" \
  || echo "bench metrics failed: $?"
grep -E '"(ratio|ours_s|theirs_s|seconds|size|n)"' "$OUT/metrics.json" | head
step "done"
