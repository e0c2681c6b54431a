#!/usr/bin/env bash
# One run of every GPU check of issue 32 on a CUDA machine, everything written under $OUT:
#   gpu.txt          the GPU's name, driver, torch, date
#   tests.txt        pytest tests/gpu (and the extract/explain tests on this machine)
#   bench.json       dmlviewer bench explain / extract / train-step --device cuda (this tree)
#   before.json      bench explain / extract --device cuda of the tree in $BEFORE (if given)
#   profile.txt      torch.profiler of pair preparation (resnet50) and cProfile of extraction's
#                    main process; the loader alone at several worker counts; nvJPEG decoding
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

step "GPU tests"
timeout 240 $PY -m pytest -q -p no:cacheprovider tests/gpu -x -o addopts="" 2>&1 | tail -25 | tee "$OUT/tests.txt"

step "bench explain / extract / train-step on cuda"
: >"$OUT/bench.json"
for name in explain extract train-step; do
  timeout 150 $PY -m dmlviewer bench "$name" --json --device cuda >>"$OUT/bench.json" 2>>"$OUT/bench.err" \
    || echo "bench $name failed: $?" | tee -a "$OUT/bench.err"
done
$PY - "$OUT/bench.json" <<'EOF'
import json, sys
text = open(sys.argv[1]).read()
dec, pos, rows = json.JSONDecoder(), 0, []
while pos < len(text.strip()):
    obj, end = dec.raw_decode(text, pos)
    rows.append(obj); pos = end
    while pos < len(text) and text[pos].isspace(): pos += 1
for r in rows:
    if r["benchmark"] == "explain":
        for p in r["prepare"]:
            print("explain", p["model"], p["image"], "bare", p["bare_forward_ms"], "prep", p["prepare_ms"], "ratio", p["ratio"], "w/pre", p["ratio_with_preprocessing"])
    else:
        print(r["benchmark"], {k: v for k, v in r.items() if k not in ("machine",)})
EOF

if [ -n "${BEFORE:-}" ]; then
  step "before: bench explain / extract on cuda ($BEFORE)"
  : >"$OUT/before.json"
  for name in explain extract; do
    (cd "$BEFORE" && PYTHONPATH=$BEFORE${PYTHONPATH#$HERE} timeout 120 $PY -m dmlviewer bench "$name" --json --device cuda) \
      >>"$OUT/before.json" 2>>"$OUT/bench.err" || echo "before $name failed" | tee -a "$OUT/bench.err"
  done
  grep -E '"(ratio|prepare_ms|bare_forward_ms|ours_images_per_s|bare_images_per_s)"' "$OUT/before.json" | tr -s ' ' | head -40
fi

step "profiles"
timeout 150 $PY packaging/gpu_profile.py 2>&1 | tee "$OUT/profile.txt" | tail -60
step "done"
