#!/bin/sh
# What a default build carries (issue 23, rows 7 and 7b), checked where nvcc is (CI has it):
#  - a fresh configure with no options builds for the documented GPUs (CMAKE_CUDA_ARCHITECTURES
#    80;89;90), not the compiler's own default;
#  - the llmq binary needs no CUDA library to start (the runtime is linked statically, cuBLAS is
#    loaded when first used): the same binary and .deb run on hosts without CUDA.
# Usage: build_config_test.sh SOURCE_ROOT LLMQ_BINARY SCRATCH. Exits 77 (skipped) without nvcc.
set -eu
src=$1 llmq=$2 scratch=$3
nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
if [ -z "$nvcc" ]; then
  echo "no nvcc: the CUDA build is not made here"
  exit 77
fi
bad=0
rm -rf "$scratch" && mkdir -p "$scratch"
# Configure only (seconds): what a plain `cmake -S . -B build` chooses.
if ! CUDACXX="$nvcc" cmake -S "$src" -B "$scratch" -DLLMQ_TESTS=OFF -DLLMQ_BENCH=OFF \
    >"$scratch/configure.log" 2>&1; then
  cat "$scratch/configure.log"
  exit 1
fi
grep -q '^LLMQ_CUDA:BOOL=ON' "$scratch/CMakeCache.txt" || {
  echo "FAIL: nvcc is here but the default configure left LLMQ_CUDA off"
  bad=1
}
archs=$(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:STRING=//p' "$scratch/CMakeCache.txt")
if [ "$archs" != "80;89;90" ]; then
  echo "FAIL: a default build is for CUDA architectures '$archs', not 80;89;90"
  bad=1
fi
if ldd "$llmq" | grep -E 'libcuda(rt)?\.so|libcublas'; then
  echo "FAIL: $llmq needs the CUDA libraries above to start"
  bad=1
fi
rm -rf "$scratch"
[ $bad -eq 0 ] && echo "ok: default CUDA architectures $archs; llmq starts without CUDA libraries"
exit $bad
