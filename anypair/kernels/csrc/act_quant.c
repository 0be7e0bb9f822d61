// Activation rows to int8 per block (llama.cpp's q8_K / q8_0 idea), row by row: a row's
// quantization never looks at another row, so it is the same alone or in a batch.
// Scalar reference first, then the AVX2 path, which must agree with it bitwise.
#include <math.h>

#include "ap_common.h"

void ap_quantize_rows_ref(const float *x, int M, int K, int block, int8_t *q, float *d, int16_t *s16, int16_t *s32) {
    for (int r = 0; r < M; r++) {
        const float *xr = x + (size_t)r * K;
        int8_t *qr = q + (size_t)r * K;
        for (int b = 0; b < K / block; b++) {
            const float *v = xr + b * block;
            float amax = 0.0f;
            for (int i = 0; i < block; i++) amax = fmaxf(amax, fabsf(v[i]));
            float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
            d[(size_t)r * (K / block) + b] = amax / 127.0f;
            for (int i = 0; i < block; i++) qr[b * block + i] = (int8_t)nearbyintf(v[i] * inv);
        }
        for (int g = 0; g < K / 16; g++) {
            int s = 0;
            for (int i = 0; i < 16; i++) s += qr[g * 16 + i];
            s16[(size_t)r * (K / 16) + g] = (int16_t)s;
        }
        for (int g = 0; g < K / 32; g++)
            s32[(size_t)r * (K / 32) + g] = (int16_t)(s16[(size_t)r * (K / 16) + 2 * g] + s16[(size_t)r * (K / 16) + 2 * g + 1]);
    }
}

#ifdef AP_AVX2
void ap_quantize_rows_avx2(const float *x, int M, int K, int block, int8_t *q, float *d, int16_t *s16, int16_t *s32) {
    const __m256 sign_off = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int r = 0; r < M; r++) {
        const float *xr = x + (size_t)r * K;
        int8_t *qr = q + (size_t)r * K;
        for (int b = 0; b < K / block; b++) {
            const float *v = xr + b * block;
            __m256 vmax = _mm256_setzero_ps();
            for (int i = 0; i < block; i += 8) vmax = _mm256_max_ps(vmax, _mm256_and_ps(_mm256_loadu_ps(v + i), sign_off));
            __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
            m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
            float amax = _mm_cvtss_f32(m4);  // max is exact in any order
            float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
            d[(size_t)r * (K / block) + b] = amax / 127.0f;
            const __m256 vinv = _mm256_set1_ps(inv);
            for (int i = 0; i < block; i += 32) {
                __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(v + i), vinv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
                __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(v + i + 8), vinv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
                __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(v + i + 16), vinv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
                __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(v + i + 24), vinv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
                // pack 32 int32 to 32 int8 in element order (packs interleave 128-bit lanes: permute back)
                __m256i p01 = _mm256_packs_epi32(i0, i1), p23 = _mm256_packs_epi32(i2, i3);
                __m256i p = _mm256_packs_epi16(p01, p23);
                p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
                _mm256_storeu_si256((__m256i *)(qr + b * block + i), p);
            }
        }
        const __m256i ones = _mm256_set1_epi16(1);
        for (int g = 0; g < K / 16; g++) {  // 16 int8 widened to int16, summed exactly
            __m256i w = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(qr + g * 16)));
            s16[(size_t)r * (K / 16) + g] = (int16_t)ap_hsum_i32_avx2(_mm256_madd_epi16(w, ones));
        }
        for (int g = 0; g < K / 32; g++)
            s32[(size_t)r * (K / 32) + g] = (int16_t)(s16[(size_t)r * (K / 16) + 2 * g] + s16[(size_t)r * (K / 16) + 2 * g + 1]);
    }
}
#endif
