#!/bin/sh
# bench/gpu.sh - build hicache with CUDA and run bench-gpu on GPU 0 of this
# machine; its output also goes to bench/gpu-last.txt.  Arguments go to
# bench-gpu (--pages N, --reps R).  What it measures: bench/RESULTS.md.
# Exits 1 when there is no GPU, else with bench-gpu's status.
set -eu
cd "$(dirname "$0")/.."

if ! nvidia-smi -L >/dev/null 2>&1; then
	echo "gpu.sh: no GPU here (nvidia-smi -L failed): run it on a machine with an NVIDIA GPU and its driver" >&2
	exit 1
fi
if ! ./install-deps.sh; then
	echo "gpu.sh: install-deps.sh failed (no package mirror?); building with what is installed" >&2
fi
[ -x configure ] || autoreconf -fi
if ! grep -q '^#define HAVE_CUDA 1' config.h 2>/dev/null; then
	./configure --with-cuda
fi
make -j"$(nproc)"

status=$(mktemp)
trap 'rm -f "$status"' EXIT
# POSIX sh has no pipefail: bench-gpu's status goes through a file.
{
	rc=0
	./bench/bench-gpu "$@" 2>&1 || rc=$?
	echo "$rc" >"$status"
} | tee bench/gpu-last.txt
rc=$(cat "$status")
if [ "$rc" -ne 0 ] && grep -q 'no CUDA device' bench/gpu-last.txt; then
	echo "gpu.sh: nvidia-smi sees a GPU but CUDA does not (driver and runtime versions? CUDA_VISIBLE_DEVICES?)" >&2
	exit 1
fi
exit "$rc"
