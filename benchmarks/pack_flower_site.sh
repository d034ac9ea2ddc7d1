#!/usr/bin/env bash
# One .tar.xz of flwr[simulation] and the packages it needs, unpacked for another machine's
# Python, for gpu_peer_workloads.sh (FLOWER_SITE=...) where that machine has no package
# registry. The wheels of benchmarks/flower_site_requirements.txt are downloaded for
# PYVER (default 3.12) on x86-64 Linux, unzipped into one folder, Ray trimmed to what a
# simulation runs (no Java jars, no dashboard web client, no rllib / data / serve / tune /
# train / llm libraries) and its binaries stripped; then packed with xz (about 27 MB for
# the pinned list).
#
#   bash benchmarks/pack_flower_site.sh [OUT.tar.xz]      (default flower_site.tar.xz)
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-flower_site.tar.xz}")
pyver=${PYVER:-3.12}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
grep -v '^#' benchmarks/flower_site_requirements.txt >"$work/req.txt"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$work/whl" \
    -r "$work/req.txt"
mkdir "$work/site"
python3 - "$work/whl" "$work/site" <<'PY'
import os, sys, zipfile
from pathlib import Path
for whl in sorted(Path(sys.argv[1]).glob("*.whl")):
    with zipfile.ZipFile(whl) as z:
        for info in z.infolist():
            path = z.extract(info, sys.argv[2])
            if (info.external_attr >> 16) & 0o111:  # keep the executables' mode
                os.chmod(path, 0o755)
PY
ray=$work/site/ray
rm -rf "$ray/jars" "$ray/dashboard/client" "$ray/rllib" "$ray/data" "$ray/serve" "$ray/tune" \
    "$ray/train" "$ray/llm"
strip --strip-unneeded "$ray/_raylet.so" "$ray/core/src/ray/raylet/raylet" \
    "$ray/core/src/ray/gcs/gcs_server"
find "$work/site" -name __pycache__ -prune -exec rm -rf {} +
tar -C "$work/site" -cf - . | xz -9 -T0 >"$out"
echo "wrote $out ($(du -h "$out" | cut -f1))"
