#!/usr/bin/env bash
# The GPU rows of benchmarks/RESULTS.md in one go, each benchmark in the automatic layout:
#
#   1. gpu_round_throughput.py, FMNIST MLP cohorts 10 / 100 / 1000 / 10000, with the PyTorch
#      loop and torch.func.vmap peers on the same GPU up to cohort 100 (the loop trains one
#      client after another: about 7 s per round at cohort 100 on an H100, 10x that at 1000);
#   2. sweep_throughput.py, the 45-config x 3-seed grid against one run at a time;
#   3. selection_speed.py --scale, stochastic greedy with model-sized features;
#   4. gpu_round_throughput.py, CIFAR-10 cnn cohorts 100 / 1000, XLA's convolution against
#      the automatic one (im2col patches on GPU, core/conv.py), and the stacked PyTorch CNN
#      (torch_cnn_peer.py, with and without a CUDA graph);
#   5. gpu_round_throughput.py --precisions default,fp32,bf16 at cohorts 100 / 1000;
#   6. profile_round.py: kernels and bytes per local step against the memory bound, with
#      jax.profiler traces in $OUT/traces;
#   7. plain_command.py at cohorts 100 / 1000 against the plain JAX program and the
#      strongest PyTorch programs (torch.func.vmap, batched weights, batched + CUDA graph),
#      interleaved: the top table of RESULTS.md.
#
# On an H100 steps 1-4 took about 80, 100, 60 and 90 s; 5-7 have not run on a GPU yet.
#
# Each step has its own time limit (seconds, below), so one slow step cannot take the others
# with it. While they run, nvidia-smi samples the GPU's utilisation every 200 ms into
# $OUT/gpu_util.csv; at the end the mean utilisation of each step is printed from it.
#
#   OUT=/tmp/gpu FMNIST_DIR=/usr/share/datasets/fashion-mnist \
#       FEDJAX_APPEAL_DATA=/path/to/data bash benchmarks/gpu_suite.sh
#
# STEPS="precision profile peers" runs only the named steps (fmnist, precision, profile,
# peers, sweep, selection, cifar): those three are the round against the memory bound and
# the strongest peers, in about 8 minutes.
#
# Results: each script appends its section to benchmarks/RESULTS.md and writes its JSON
# under $OUT (default benchmarks/results; selection_speed.py writes
# benchmarks/results/selection_scale.json, copied there); a copy of RESULTS.md goes to $OUT after each step.
set -u
cd "$(dirname "$0")/.."
out=${OUT:-benchmarks/results}
py=${PYTHON:-python3}
fmnist=${FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
mkdir -p "$out"
exec > >(tee "$out/log.txt") 2>&1
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
"$py" -c "import jax, torch; print('jax', jax.__version__, jax.devices(), '| torch',
torch.__version__, torch.cuda.is_available())"
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader,nounits \
    -lms 200 >"$out/gpu_util.csv" 2>/dev/null &
smi=$!

step() {  # step NAME LIMIT_S ARGS...; skipped unless NAME is in $STEPS (when set)
    local name=$1 limit=$2
    shift 2
    if [ -n "${STEPS:-}" ] && [[ " $STEPS " != *" $name "* ]]; then
        echo "=== step $name skipped (STEPS=$STEPS)"
        return 0
    fi
    echo "=== step $name start $(date +%s.%N)"
    timeout "$limit" "$py" "$@"
    local rc=$?
    echo "=== step $name end $(date +%s.%N) rc $rc"
    cp benchmarks/RESULTS.md "$out/RESULTS.md"
}

step fmnist 150 benchmarks/gpu_round_throughput.py --fmnist-dir "$fmnist" \
    --fmnist-cohorts 10,100,1000,10000 --cifar-cohorts '' --repeats 5 \
    --torch-max-cohort 100 --torch-repeats 3 --out "$out/gpu_round_throughput.json"
step precision 120 benchmarks/gpu_round_throughput.py --fmnist-dir "$fmnist" \
    --fmnist-cohorts 100,1000 --cifar-cohorts '' --precisions default,fp32,bf16 --repeats 5 \
    --no-torch --no-matmul-peak --out "$out/gpu_round_precision.json"
step profile 120 benchmarks/profile_round.py --fmnist-dir "$fmnist" --cohorts 100,1000 \
    --precisions default,bf16 --repeats 5 --trace "$out/traces" --out "$out/profile_round.json"
step peers 240 benchmarks/plain_command.py --fmnist-dir "$fmnist" --cohorts 100,1000 \
    --repeats 3 --torch-variants vmap,batched,graph --out "$out/plain_command.json"
step sweep 130 benchmarks/sweep_throughput.py --fmnist-dir "$fmnist" --subset 2 \
    --quiet --out "$out/sweep_throughput.json"
step selection 80 benchmarks/selection_speed.py --scale --scale-max-flops 3e13
cp benchmarks/results/selection_scale.json "$out/" 2>/dev/null
step cifar 150 benchmarks/gpu_round_throughput.py --fmnist-cohorts '' \
    --cifar-cohorts 100,1000 --conv-impls xla,auto --cifar-repeats 2 --no-matmul-peak \
    --out "$out/gpu_round_throughput_cifar.json"

kill "$smi" 2>/dev/null
"$py" - "$out/gpu_util.csv" "$out/log.txt" <<'EOF'
"""Mean GPU utilisation of each step, from the nvidia-smi samples and the step markers."""
import re
import sys
from datetime import datetime

samples = []
for line in open(sys.argv[1]):
    parts = [p.strip() for p in line.split(",")]
    try:
        t = datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        samples.append((t, float(parts[1]), float(parts[2])))
    except (ValueError, IndexError):
        continue
marks = {}
try:
    log = open(sys.argv[2]).read()
except OSError:
    log = ""
for name, what, t in re.findall(r"=== step (\w+) (start|end) ([\d.]+)", log):
    marks.setdefault(name, {})[what] = float(t)
for name, m in marks.items():
    if "start" not in m or "end" not in m:
        continue
    inside = [s for s in samples if m["start"] <= s[0] <= m["end"]]
    if inside:
        u = [s[1] for s in inside]
        busy = sum(1 for v in u if v > 0) / len(u)
        print(f"utilisation {name}: mean {sum(u) / len(u):.1f}% over {len(u)} samples, "
              f"{100 * busy:.0f}% of samples busy, max memory {max(s[2] for s in inside):.0f} "
              f"MiB, {m['end'] - m['start']:.0f} s")
EOF
