#!/usr/bin/env bash
# The peers' CNN workloads (peer_workloads.py: pfl-research CIFAR-10, FedJAX EMNIST-style
# FEMNIST) on one GPU: ours against Flower's simulation with its clients and evaluation on
# the same GPU. Flower runs twice per workload, with Ray num_gpus 1 per client (Flower's
# tutorial setting: one client at a time) and 1 / CPUs (every CPU's actor shares the GPU);
# the faster of the two is the peer.
#
# Where the GPU machine has no venv with flwr[simulation], FLOWER_SITE names a .tar.xz of
# flwr[simulation] and its dependencies unpacked for the machine's Python (made where pip
# works by `bash benchmarks/pack_flower_site.sh`); it is unpacked into /tmp and put on the
# Flower interpreter's PYTHONPATH. JAX is held to a quarter of the GPU's memory so that
# the Flower actors find room beside it.
#
#   OUT=/tmp/gpu FEDJAX_APPEAL_DATA=/path/to/data FLOWER_SITE=/path/to/flower_site.tar.xz \
#       bash benchmarks/gpu_peer_workloads.sh
#
# Results: the section appended to benchmarks/RESULTS.md (copied to $OUT), the JSON and a log
# under $OUT, nvidia-smi's utilisation every 200 ms in $OUT/gpu_util.csv. ROUNDS (20) and
# CLIENT_GPUS (peer_workloads.py --client-gpus) change the run.
set -u
cd "$(dirname "$0")/.."
out=${OUT:-benchmarks/results}
py=${PYTHON:-python3}
rounds=${ROUNDS:-20}
mkdir -p "$out"
exec > >(tee "$out/log.txt") 2>&1
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.25}

flower=(--venv benchmarks/.flower_venv)
if [ -n "${FLOWER_SITE:-}" ]; then
    site=/tmp/flower_site
    mkdir -p "$site" && tar -xJf "$FLOWER_SITE" -C "$site" || exit 1
    flower=(--flower-python "$(command -v "$py")" --flower-path "$site")
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
"$py" -c "import jax, torch; print('jax', jax.__version__, jax.devices(), '| torch',
torch.__version__, torch.cuda.is_available())"
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader,nounits \
    -lms 200 >"$out/gpu_util.csv" 2>/dev/null &
smi=$!

echo "=== start $(date +%s.%N)"
timeout "${LIMIT_S:-480}" "$py" benchmarks/peer_workloads.py --rounds "$rounds" \
    "${flower[@]}" ${CLIENT_GPUS:+--client-gpus "$CLIENT_GPUS"} \
    --out "$out/peer_workloads_gpu.json"
rc=$?
echo "=== end $(date +%s.%N) rc $rc"
kill "$smi" 2>/dev/null
cp benchmarks/RESULTS.md "$out/RESULTS.md"
exit $rc
