#!/usr/bin/env bash
# One session on a lent GPU machine, as one prepared script (the lease is minutes long):
#   0. the CUDA tests (tests/test_cuda.py, `pytest -m gpu`; skipped on machines without a GPU);
#   1. issue 11's benchmarks on the GPU: benchmarks/peers.py --device cuda (every section,
#      seqlab vs nn.Transformer vs HF Marian, fp32 and bf16, beside the CPU numbers);
#   2. issue 5's PTB "longer run": the 2 x 650 tied LSTM (configs/ptb-lstm-large.yaml) for
#      PTB_MINUTES of training on the GPU, the cosine schedule fitted to that budget
#      (schedule.warmup=100: the fit measures the speed over the warm-up), fp32 (at batch 20
#      the GPU is latency-bound, so bf16 would buy nothing and cost precision).
# Writes everything small to $OUT (default runs/gpu): gpu.txt, pytest-gpu.log, peers.log,
# results.md (the section "## Performance vs peers on a GPU"), peers-cuda.json, lm.log, lm.md,
# metrics.jsonl (eight files, the most a lent machine sends back).
#   OUT=runs/gpu DATA=../shared/data bash benchmarks/gpu_session.sh
# Through the device tool (../shared does not travel): once, here,
#   echo /.gpu/ >> .git/info/exclude; mkdir -p .gpu/data; cp -r ../shared/data/ptb .gpu/data/
# then run `OUT=$OUT DATA=.gpu/data bash benchmarks/gpu_session.sh` with carry [".gpu"]
# (2026-11-26 on an H200: about 6.5 minutes of device time, start included).
set -u
OUT=${OUT:-runs/gpu}
DATA=${DATA:-../shared/data}
PY=${PY:-python3}
PEERS_S=${PEERS_S:-240}
PTB_MINUTES=${PTB_MINUTES:-4.5}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1

{
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  $PY -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda,
'cudnn', torch.backends.cudnn.version(), 'transformers', transformers.__version__)"
  nproc
} 2>&1 | tee "$OUT/gpu.txt"

start=$(date +%s)
timeout 180 $PY -m pytest -q -m gpu tests/test_cuda.py 2>&1 | tee "$OUT/pytest-gpu.log" | tail -15
echo "[gpu_session] pytest -m gpu: rc ${PIPESTATUS[0]}, $(($(date +%s) - start)) s"

start=$(date +%s)
timeout "$PEERS_S" $PY benchmarks/peers.py --device cuda --out "$OUT/results.md" \
  --json "$OUT/peers-cuda.json" 2>&1 | tee "$OUT/peers.log" | tail -60
echo "[gpu_session] peers: rc ${PIPESTATUS[0]}, $(($(date +%s) - start)) s"

start=$(date +%s)
timeout $((${PTB_MINUTES%.*} * 60 + 150)) $PY benchmarks/lm.py --presets ptb-lstm-large \
  --data-dir "$DATA" --minutes "$PTB_MINUTES" --runs-dir /tmp/gpu-runs --out "$OUT/lm.md" \
  --verbose train.device=cuda train.precision=fp32 schedule.warmup=100 \
  >"$OUT/lm.log" 2>&1
echo "[gpu_session] ptb: rc $?, $(($(date +%s) - start)) s"
cp /tmp/gpu-runs/bench-ptb-lstm-large/metrics.jsonl "$OUT/" 2>/dev/null
grep -E '"event": "(valid|final|test)' "$OUT/metrics.jsonl" 2>/dev/null | cut -c1-240 | tail -8
tail -c 2500 "$OUT/lm.log"
