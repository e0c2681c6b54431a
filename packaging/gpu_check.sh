#!/usr/bin/env bash
# One run of every GPU check of issue 32 on a CUDA machine, everything written under $OUT:
#   gpu.txt          the GPU's name, driver, torch, date
#   tests.txt        pytest tests/gpu (and the extract/explain tests on this machine)
#   bench.json       dmlviewer bench explain / extract / train-step --device cuda (this tree)
#   before.json      bench extract --device cuda of the tree in $BEFORE (if given)
#   profile.txt      packaging/gpu_profile.py: pair preparation (torch.profiler), extraction at
#                    several worker counts, the loader alone, the main process (cProfile), nvJPEG
#   profile_before.txt  the pair-preparation part for the tree in $BEFORE
# Usage (from the repository root): OUT=/tmp/out [BEFORE=/path/to/old/tree] packaging/gpu_check.sh
# It needs torch with CUDA, torchvision, h5py, opencv, timm, pytest; other Python packages the
# project needs can be given as wheels in $WHEELS (installed to a temporary folder).
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

step "profiles"
timeout 120 $PY packaging/gpu_profile.py 2>&1 | tee "$OUT/profile.txt" | tail -70
if [ -n "${BEFORE:-}" ]; then
  step "before: pair preparation ($BEFORE)"
  PYTHONPATH=$BEFORE${PYTHONPATH#$HERE} timeout 40 $PY packaging/gpu_profile.py pairs 2>&1 | tee "$OUT/profile_before.txt" | grep "^pair\|per pair"
fi

step "bench explain / extract / train-step on cuda"
: >"$OUT/bench.json"
for spec in "150 explain" "120 extract" "60 train-step"; do
  set -- $spec
  timeout "$1" $PY -m dmlviewer bench "${@:2}" --json --device cuda >>"$OUT/bench.json" 2>>"$OUT/bench.err" \
    || echo "bench $2 failed: $?" | tee -a "$OUT/bench.err"
done
$PY - "$OUT/bench.json" <<'EOF2'
import json, sys
text = open(sys.argv[1]).read()
dec, pos, rows = json.JSONDecoder(), 0, []
while text[pos:].strip():
    while text[pos].isspace():
        pos += 1
    obj, pos = dec.raw_decode(text, pos)
    rows.append(obj)
for r in rows:
    if r["benchmark"] == "explain":
        for p in r["prepare"]:
            print("explain", p["model"], p["image"], "bare", p["bare_forward_ms"], "prep", p["prepare_ms"],
                  "ratio", p["ratio"], "w/pre", p["ratio_with_preprocessing"])
    else:
        print(r["benchmark"], {k: v for k, v in r.items() if k != "machine"})
EOF2
if [ -n "${BEFORE:-}" ]; then
  step "before: bench extract on cuda ($BEFORE)"
  (cd "$BEFORE" && PYTHONPATH=$BEFORE${PYTHONPATH#$HERE} timeout 60 $PY -m dmlviewer bench extract --json --device cuda) \
    >"$OUT/before.json" 2>>"$OUT/bench.err" || echo "before extract failed" | tee -a "$OUT/bench.err"
  grep -E '"(ratio|ours_images_per_s|bare_images_per_s|num_workers|images)"' "$OUT/before.json"
fi

step "GPU tests"
timeout 180 $PY -m pytest -q -p no:cacheprovider tests/gpu -o addopts="" 2>&1 | tail -25 | tee "$OUT/tests.txt"

step "bench metrics on cuda (60,000 rows)"
timeout 100 $PY -m dmlviewer bench metrics --size 60000 --json --device cuda >"$OUT/metrics.json" 2>>"$OUT/bench.err" \
  || echo "bench metrics failed: $?"
grep -E '"(ratio|ours_s|theirs_s|seconds|size|n)"' "$OUT/metrics.json" | head
step "done"
