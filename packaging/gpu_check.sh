#!/usr/bin/env bash
# One prepared run of the GPU checks of issue 43 (extraction at the GPU's speed) on a CUDA
# machine, most telling first; its steps' time-outs add up to 10 minutes (one device call), and on
# a 16-core H200 the run is expected to take 5 to 7. Everything is written under $OUT
# (at most 8 files, as the device tool brings back):
#   gpu.txt       the GPU's name, memory, driver, date, torch and torchvision, the host's cores
#   tests.txt     pytest tests/gpu: CUDA paths, nvJPEG pixels and features against OpenCV's
#                 through the decode stage, the stage on its own stream, pair graphs replayed
#   bench.json    dmlviewer bench extract --device cuda for resnet18 (224 px, batch 64) and
#                 resnet50 (batch 128), the default workers (8 on 16 cores): ours against the
#                 bare forward on tensors in GPU memory, with --decode cpu and device in one run
#                 each (packaging/bench_summary.py prints the rows)
#   timings.json  packaging/gpu_profile.py wall weights: a 100,000-image extraction's wall time
#                 with each decoder (a synthetic dataset made here), and the pair graphs'
#                 weight check (cuda_graph._Weights) timed for a resnet50
#   qt.json       bench hover --device cuda and bench startup, offscreen, when PySide6 can be
#                 imported (give its wheels in $WHEELS); otherwise a line saying they did not run
#   errors.txt    the benchmarks' standard error
#   profile.txt   with PROFILE=1: packaging/gpu_profile.py's profiles of a pair and of extraction
#   before.json   with BEFORE=/path/to/old/tree: bench extract (resnet18) of that tree
# With ALL=1 it also runs bench explain, train-step and metrics (60,000 rows) into bench.json
# (about 4 more minutes: a second call).
# Usage (from the repository root): OUT=/tmp/out [WHEELS=.whl] [PROFILE=1] [BEFORE=...] [ALL=1] packaging/gpu_check.sh
# SIZES=tiny DEVICE=cpu runs every step at smoke-test sizes (small_cnn, a 600-image extraction)
# on a machine without a GPU, to check the script itself (its time-outs are the GPU's: slow steps
# may be cut there).
# It needs torch with CUDA, torchvision, h5py, opencv, timm, pytest; other Python packages the
# project needs (psygnal, pytorch-metric-learning, pyqtgraph, PySide6) can be given as wheels in
# $WHEELS (installed to a temporary folder).
set -u
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 QT_QPA_PLATFORM=offscreen
PY=${PY:-python3}
DEVICE=${DEVICE:-cuda}
if [ -n "${WHEELS:-}" ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl
  export PYTHONPATH=/tmp/site
fi
HERE=$(pwd)
export PYTHONPATH=$HERE${PYTHONPATH:+:$PYTHONPATH}
ERR="$OUT/errors.txt"
: >"$ERR"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1; date -u +%FT%TZ;
  $PY -c "import torch, torchvision; print('torch', torch.__version__, 'torchvision', torchvision.__version__)"
  echo "cores $(nproc)"; } >"$OUT/gpu.txt" 2>&1
cat "$OUT/gpu.txt"

step() { echo "== $1 ($(date +%T))"; }
if [ "${SIZES:-}" = tiny ]; then  # small_cnn everywhere: the script's steps, not figures
  QUICK=--quick; R18="--backbone small_cnn"; R50="--backbone small_cnn"
  WALL="--images 600 --distinct 100 --image-px 64 --backbone small_cnn"
else
  QUICK=; R18="--backbone resnet18"; R50="--backbone resnet50"; WALL="--images 100000 --distinct 1000 --image-px 256"
fi

: >"$OUT/bench.json"
bench() {  # seconds, then the bench arguments
  local limit=$1; shift
  timeout "$limit" $PY -m dmlviewer bench "$@" --json --device "$DEVICE" >>"$OUT/bench.json" 2>>"$ERR" \
    || echo "bench $* failed: $?" | tee -a "$ERR"
}

step "GPU tests"
if [ "$DEVICE" = cuda ]; then
  timeout 140 $PY -m pytest -q -p no:cacheprovider -rfE tests/gpu -o addopts="" --timeout 90 2>&1 \
    | tee "$OUT/tests.txt" | tail -30
else
  timeout 60 $PY -m pytest -q -p no:cacheprovider -rfE tests/gpu -o addopts="" 2>&1 | tee "$OUT/tests.txt" | tail -3
fi

step "bench extract: resnet18, batch 64"
bench 90 extract $QUICK $R18 --batch-size 64
step "bench extract: resnet50, batch 128"
bench 100 extract $QUICK $R50 --batch-size 128
$PY packaging/bench_summary.py "$OUT/bench.json"

step "a 100,000-image extraction's wall time; the pair graphs' weight check"
timeout 120 $PY packaging/gpu_profile.py wall weights --device "$DEVICE" $WALL >"$OUT/timings.json" 2>>"$ERR" \
  || echo "gpu_profile.py wall weights failed: $?" | tee -a "$ERR"
cat "$OUT/timings.json"

step "Qt benchmarks (hover, startup), offscreen"
if $PY -c "import PySide6, pyqtgraph, psygnal" 2>>"$ERR"; then
  : >"$OUT/qt.json"
  timeout 100 $PY -m dmlviewer bench hover $QUICK --json --device "$DEVICE" >>"$OUT/qt.json" 2>>"$ERR" \
    || echo "bench hover failed: $?" | tee -a "$ERR"
  timeout 50 $PY -m dmlviewer bench startup $QUICK --json >>"$OUT/qt.json" 2>>"$ERR" \
    || echo "bench startup failed: $?" | tee -a "$ERR"
  $PY packaging/bench_summary.py "$OUT/qt.json"
else
  echo '{"not_run": "PySide6, pyqtgraph or psygnal cannot be imported here (give their wheels in $WHEELS)"}' \
    | tee "$OUT/qt.json"
fi

if [ -n "${PROFILE:-}" ]; then
  step "profiles of a pair and of extraction"
  timeout 140 $PY packaging/gpu_profile.py pairs cprofile extract >"$OUT/profile.txt" 2>&1; tail -40 "$OUT/profile.txt"
fi
if [ -n "${BEFORE:-}" ]; then
  step "before: bench extract on $DEVICE ($BEFORE)"
  (cd "$BEFORE" && PYTHONPATH=$BEFORE${PYTHONPATH#$HERE} timeout 100 $PY -m dmlviewer bench extract $QUICK --json \
    --device "$DEVICE") >"$OUT/before.json" 2>>"$ERR" || echo "before failed" | tee -a "$ERR"
  $PY packaging/bench_summary.py "$OUT/before.json"
fi
if [ -n "${ALL:-}" ]; then
  step "bench explain / train-step / metrics (60,000 rows)"
  bench 140 explain $QUICK
  bench 30 train-step $QUICK
  bench 60 metrics --size 60000
  $PY packaging/bench_summary.py "$OUT/bench.json" | grep -v "^extract"
fi
step "done"
