#!/usr/bin/env bash
# One session on a lent GPU machine, as one prepared script (the lease is minutes long).
# STEPS picks, in order, from:
#   tests    the CUDA tests (tests/test_cuda.py, `pytest -m gpu`; skipped without a GPU);
#   packing  benchmarks/rnn_packing.py: the recurrent layers' packed cuDNN weights vs the
#            assembled list vs nn.LSTM / nn.GRU (docs/perf-notes-gpu.md §28);
#   stacked  benchmarks/stacked_projections.py: self-attention's q, k, v as one stacked
#            product vs three, in training (kernels per step; perf-notes-gpu.md §31);
#   loss     benchmarks/step_levers.py --lever loss: the softmax-once label-smoothed loss vs
#            F.cross_entropy in the small bf16 training step (docs/perf-notes-training.md §32),
#            then the loss alone (--micro) in bf16 and fp32;
#   profile  benchmarks/profile_peers.py: kernels and operators per training step, seqlab vs
#            nn vs HF, small bf16;
#   peers    issue 11's benchmarks on the GPU: benchmarks/peers.py --device cuda (every
#            section, seqlab vs nn.Transformer vs HF Marian, fp32 and bf16);
#   compiled peers.py's decode section with seqlab's compiled step (--compiled-decode), bf16;
#   amx      on the host CPU where it has AMX: benchmarks/peers.py --quick --threads 2 pinned
#            to two cores (issue 11's CPU targets on an AMX machine like PEERS.md's), then
#            step_levers.py --lever attention (perf-notes-training.md §37), amx.log;
#   ptb      issue 5's PTB "longer run": the 2 x 650 tied LSTM (configs/ptb-lstm-large.yaml)
#            for PTB_MINUTES on the GPU, the cosine fitted to that budget, fp32.
# Default STEPS="tests packing stacked loss profile peers compiled" (the PTB run was done 2026-11-26);
# on a lent H100, 2026-11-27, they took 369 s on the machine (about 6.5 minutes with its start).
# Writes everything small to $OUT (default runs/gpu; at most eight files come back from a
# lent machine): gpu.txt, pytest-gpu.log, levers.log, profile.txt, peers.log, results.md
# (the section "## Performance vs peers on a GPU"), peers-cuda.json, compiled.log (or, with
# ptb: lm.log, lm.md, metrics.jsonl); packing, stacked and loss write levers.log.
#   OUT=runs/gpu DATA=../shared/data bash benchmarks/gpu_session.sh
# Through the device tool (../shared does not travel), for the ptb step: once, here,
#   echo /.gpu/ >> .git/info/exclude; mkdir -p .gpu/data; cp -r ../shared/data/ptb .gpu/data/
# then run `OUT=$OUT DATA=.gpu/data STEPS=ptb bash benchmarks/gpu_session.sh` with carry
# [".gpu"] (2026-11-26 on an H200: about 6.5 minutes of device time, start included).
set -u
OUT=${OUT:-runs/gpu}
DATA=${DATA:-../shared/data}
PY=${PY:-python3}
STEPS=${STEPS:-tests packing stacked loss profile peers compiled}
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

step() {  # step NAME SECONDS LOG COMMAND...: run with a time limit, append to LOG, report
  local name=$1 limit=$2 log=$3 start rc
  shift 3
  start=$(date +%s)
  timeout "$limit" "$@" >>"$log" 2>&1
  rc=$?
  tail -n "${TAIL:-25}" "$log"
  echo "[gpu_session] $name: rc $rc, $(($(date +%s) - start)) s"
}

for s in $STEPS; do
  case $s in
    tests) TAIL=15 step tests 180 "$OUT/pytest-gpu.log" $PY -m pytest -q -m gpu tests/test_cuda.py ;;
    packing) TAIL=8 step packing 120 "$OUT/levers.log" $PY benchmarks/rnn_packing.py --device cuda ;;
    stacked) TAIL=7 step stacked 150 "$OUT/levers.log" $PY benchmarks/stacked_projections.py \
      --device cuda --steps 16 --reps 7 --threads 16 ;;
    loss)
      TAIL=6 step loss 120 "$OUT/levers.log" $PY benchmarks/step_levers.py --lever loss \
        --device cuda --steps 16 --reps 7 --threads 16
      for prec in bf16 fp32; do
        TAIL=1 step "loss alone $prec" 60 "$OUT/levers.log" $PY benchmarks/step_levers.py \
          --micro --device cuda --precision "$prec" --reps 9
      done
      ;;
    profile) TAIL=12 step profile 150 /tmp/profile.log $PY benchmarks/profile_peers.py \
      --device cuda --size small --precision bf16 --steps 16 --rows 12 --out "$OUT/profile.txt" ;;
    peers) TAIL=60 step peers "$PEERS_S" "$OUT/peers.log" $PY benchmarks/peers.py --device cuda --train-reps 7 \
      --out "$OUT/results.md" --json "$OUT/peers-cuda.json" ;;
    compiled) TAIL=20 step compiled 150 "$OUT/compiled.log" $PY benchmarks/peers.py --device cuda \
      --sections decode --impls seqlab,hf --precisions bf16 --compiled-decode \
      --out /tmp/compiled.md --json /tmp/compiled.json ;;
    amx)  # the host CPU, 2 cores as issue 11's machine, where it has AMX (else skipped)
      if grep -q amx_bf16 /proc/cpuinfo; then
        TAIL=40 step amx 200 "$OUT/amx.log" taskset -c 0,1 $PY benchmarks/peers.py --quick \
          --threads 2 --out /tmp/amx.md --json /tmp/amx.json
        TAIL=6 step "amx attention" 120 "$OUT/amx.log" taskset -c 0,1 $PY \
          benchmarks/step_levers.py --lever attention --threads 2 --reps 9
        { lscpu | grep "Model name"; grep -o -E "amx[a-z_0-9]*|avx512_bf16" /proc/cpuinfo | sort -u; } \
          >>"$OUT/amx.log"
      else
        echo "[gpu_session] amx: the host CPU has no amx_bf16, skipped" | tee -a "$OUT/gpu.txt"
      fi
      ;;
    ptb)
      step ptb $((${PTB_MINUTES%.*} * 60 + 150)) "$OUT/lm.log" $PY benchmarks/lm.py \
        --presets ptb-lstm-large --data-dir "$DATA" --minutes "$PTB_MINUTES" \
        --runs-dir /tmp/gpu-runs --out "$OUT/lm.md" --verbose train.device=cuda \
        train.precision=fp32 schedule.warmup=100
      cp /tmp/gpu-runs/bench-ptb-lstm-large/metrics.jsonl "$OUT/" 2>/dev/null
      grep -E '"event": "(valid|final|test)' "$OUT/metrics.jsonl" 2>/dev/null | cut -c1-240 | tail -8
      ;;
    *) echo "[gpu_session] unknown step $s (tests packing stacked loss profile peers compiled amx ptb)" ;;
  esac
done
