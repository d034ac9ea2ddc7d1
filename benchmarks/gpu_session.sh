#!/usr/bin/env bash
# The GPU measurements of the warm-run and determinism work, as one script for a session on
# a lent GPU (about 10 minutes on one H100/H200): seeded runs in three fresh processes with
# and without deterministic kernels, then the README's FedAvg command and the tour, cold
# and warm. Tables are appended to benchmarks/RESULTS.md and copied to $OUT when it is set.
#
#   FEDJAX_APPEAL_DATA=/path/to/npz FMNIST_DIR=/path/to/fashion-mnist bash benchmarks/gpu_session.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
if [ -n "${FMNIST_DIR:-}" ]; then  # the tour and the run read Fashion-MNIST from here
  mkdir -p /usr/share/datasets 2>/dev/null && ln -sfn "$FMNIST_DIR" /usr/share/datasets/fashion-mnist || true
fi
$PY -c "import jax; print(jax.devices())"
timeout 300 $PY benchmarks/determinism_check.py --processes 3 --cohort 100 --rounds 50
timeout 400 $PY benchmarks/command_wallclock.py --commands run,tour --repeats 1
if [ -n "${OUT:-}" ]; then cp benchmarks/RESULTS.md "$OUT/"; fi
