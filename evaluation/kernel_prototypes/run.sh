#!/usr/bin/env bash
# The next kernel layout, measured before it is built into anypair/kernels (needs gcc and an
# AVX-512 VNNI CPU; ~5 s): Q4_K with 16 weight rows interleaved, one Q4_K 8960x1536 matrix in cache,
# 2 threads, M = 1..16 activation rows, checked bitwise against its scalar reference first.
# Compare with the engine's current kernels on the same shape: see evaluation/README.md.
set -euo pipefail
cd "$(dirname "$0")"
grep -q avx512_vnni /proc/cpuinfo || { echo "this prototype needs AVX-512 VNNI (not on this CPU)"; exit 0; }
out=$(mktemp -d)
gcc -O3 -std=c11 -ffp-contract=off -mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512vnni -fopenmp \
    q4k_interleaved.c -o "$out/q4k_interleaved"
"$out/q4k_interleaved"
