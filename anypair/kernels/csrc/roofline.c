// The machine's two ceilings, measured with the kernels' own threads (`anypair bench` prints a step's
// achieved figures against them): how fast the cores read memory, and how many int8 multiply-adds
// per second the instructions the linear kernels use can issue.
//
// Neither result feeds any numerics: they are yardsticks. Both run on the OpenMP pool the kernels
// use, so "2 threads" means the same two threads a forward runs on.
#include <omp.h>
#include <stdint.h>

#include "ap_api.h"

// Read `bytes` of `buffer` (64-byte aligned, bytes % 256 == 0) split in equal contiguous parts over
// `nthreads` threads, as a streaming linear kernel reads its weights; returns a checksum so that the
// reads cannot be optimised away. Time it from the caller.
uint64_t ap_stream_read(const uint8_t *buffer, size_t bytes, int nthreads) {
    uint64_t total = 0;
    #pragma omp parallel num_threads(nthreads > 0 ? nthreads : omp_get_max_threads()) reduction(^ : total)
    {
        const int t = omp_get_thread_num(), n = omp_get_num_threads();
        const size_t part = bytes / 256 / (size_t)n * 256, lo = part * (size_t)t, hi = t == n - 1 ? bytes : lo + part;
#ifdef AP_AVX2
        __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
        for (size_t i = lo; i + 128 <= hi; i += 128) {
            a0 = _mm256_xor_si256(a0, _mm256_load_si256((const __m256i *)(buffer + i)));
            a1 = _mm256_xor_si256(a1, _mm256_load_si256((const __m256i *)(buffer + i + 32)));
            a2 = _mm256_xor_si256(a2, _mm256_load_si256((const __m256i *)(buffer + i + 64)));
            a3 = _mm256_xor_si256(a3, _mm256_load_si256((const __m256i *)(buffer + i + 96)));
        }
        __m256i a = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
        uint64_t lanes[4];
        _mm256_storeu_si256((__m256i *)lanes, a);
        total ^= lanes[0] ^ lanes[1] ^ lanes[2] ^ lanes[3];
#else
        const uint64_t *w = (const uint64_t *)(buffer + lo);
        uint64_t acc = 0;
        for (size_t i = 0; i < (hi - lo) / 8; i++) acc ^= w[i];
        total ^= acc;
#endif
    }
    return total;
}

// Issue `iterations` x 16 independent int8 multiply-add instructions per thread on registers (no
// memory): AVX-512 VNNI vpdpbusd on zmm where compiled (64 products each), else AVX2's maddubs +
// madd pair (32 products per pair, the pair the AVX2 kernels use), else nothing. Returns the
// products one iteration of one thread performs (0 on the portable build), so products per
// second = returned x iterations x threads / seconds.
long ap_int8_peak(long iterations, int nthreads, int use_avx2, int32_t *sink) {
    long per_iteration = 0;
#if defined(AP_AVX512)
    if (!use_avx2) {
        per_iteration = 16 * 64;
        #pragma omp parallel num_threads(nthreads > 0 ? nthreads : omp_get_max_threads())
        {
            // vpdpbusd accumulates into its destination: 16 chains cannot share a product
            __m512i acc[16], u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
            for (int i = 0; i < 16; i++) acc[i] = _mm512_set1_epi32(i);
            for (long it = 0; it < iterations; it++) {
                for (int i = 0; i < 16; i++) acc[i] = _mm512_dpbusd_epi32(acc[i], u, s);
                __asm__ volatile("" : "+v"(u), "+v"(s));
            }
            __m512i a = acc[0];
            for (int i = 1; i < 16; i++) a = _mm512_add_epi32(a, acc[i]);
            sink[omp_get_thread_num()] = _mm512_reduce_add_epi32(a);
        }
        return per_iteration;
    }
#endif
#if defined(AP_AVX2)
    per_iteration = 8 * 32;
    #pragma omp parallel num_threads(nthreads > 0 ? nthreads : omp_get_max_threads())
    {
        // 8 independent chains, each on its own inputs (inputs shared between chains would let the
        // compiler compute one product for all of them)
        __m256i acc[8], u[8], s = _mm256_set1_epi8(-2), ones = _mm256_set1_epi16(1);
        for (int i = 0; i < 8; i++) { acc[i] = _mm256_set1_epi32(i); u[i] = _mm256_set1_epi8((char)(3 + i)); }
        for (long it = 0; it < iterations; it++) {
            for (int i = 0; i < 8; i++)
                acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(_mm256_maddubs_epi16(u[i], s), ones));
            __asm__ volatile("" : "+x"(u[0]), "+x"(u[1]), "+x"(u[2]), "+x"(u[3]), "+x"(u[4]), "+x"(u[5]), "+x"(u[6]), "+x"(u[7]));
        }
        __m256i a = acc[0];
        for (int i = 1; i < 8; i++) a = _mm256_add_epi32(a, acc[i]);
        sink[omp_get_thread_num()] = ap_hsum_i32_avx2(a);
    }
#else
    (void)iterations; (void)nthreads; (void)sink;
#endif
    (void)use_avx2;
    return per_iteration;
}
