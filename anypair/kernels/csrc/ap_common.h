// Shared definitions of anypair's quantized CPU kernels: GGUF block layouts, the activation
// format, and the fixed reduction order every path (scalar reference, AVX2) follows.
//
// Batch invariance is the point of these kernels. Every output y[r][n] is the dot product of
// weight row n and activation row r, computed by one function whose arithmetic does not depend on
// how many rows are in the call or on which thread runs it: integer partial sums are exact, and
// the float steps happen in a fixed order (8 lanes, lane i owns bytes 4i..4i+3 of each 32-element
// chunk, then one fixed reduction tree). The scalar reference mirrors that order, so the SIMD path
// and the reference agree bitwise, which tests/test_quant_kernels.py checks on real GGUF blocks.
#ifndef ANYPAIR_COMMON_H
#define ANYPAIR_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define AP_AVX2 1
#include <immintrin.h>
#endif
#if defined(AP_AVX2) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__)
#define AP_AVX512 1
#endif

// Which path a call runs (the `path` argument of ap_linear and ap_layers_forward): the best one
// compiled, the scalar reference, or the AVX2 path even where AVX-512 is compiled (tests compare all).
enum ap_path { AP_PATH_BEST = 0, AP_PATH_REFERENCE = 1, AP_PATH_AVX2 = 2 };

// ggml type ids (gguf's GGMLQuantizationType)
enum ap_type {
    AP_F32 = 0, AP_F16 = 1, AP_Q4_0 = 2, AP_Q4_1 = 3, AP_Q5_0 = 6, AP_Q8_0 = 8,
    AP_Q4_K = 12, AP_Q6_K = 14,
};

// GGUF blocks, byte for byte (ggml-common.h defines the same layouts)
typedef struct { uint16_t d; uint8_t qs[16]; } block_q4_0;                        // 18 B / 32
typedef struct { uint16_t d, m; uint8_t qs[16]; } block_q4_1;                     // 20 B / 32
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; } block_q5_0;         // 22 B / 32
typedef struct { uint16_t d; int8_t qs[32]; } block_q8_0;                         // 34 B / 32
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; } block_q4_K;   // 144 B / 256
typedef struct { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; } block_q6_K;  // 210 B / 256

// Activation rows quantized for the integer dot products: per row, per block of `block` elements
// (256 for the K-quants, 32 for the others) a scale d = amax/127 and int8 values round(x/d), with
// the int sums of every 16 and every 32 values (for the weights' offsets and minimums), and for
// 256-blocks 32 times the sum of each pair of values (Q6_K's offset of 32, taken once per row instead
// of once per weight row). Float weights (F32/F16) read the float rows `x` instead.
typedef struct {
    int M, K, block;
    const int8_t *q;      // [M][K]
    const float *d;       // [M][K/block]
    const int16_t *s16;   // [M][K/16]
    const int16_t *s32;   // [M][K/32]
    const float *x;       // [M][K]
    const int16_t *pair32;  // [M][K/2]: 32 * (q[2j] + q[2j+1]); 256-blocks only, else NULL
} ap_act;

// One weight matrix [N][K] in its GGUF type, rows contiguous (row_bytes each).
typedef struct {
    int type, N, K;
    size_t row_bytes;
    const uint8_t *data;
    const float *bias;  // [N] or NULL
} ap_weight;

// up to this many activation rows share one pass over a weight row (registers hold their sums):
// every path's dot function takes R = 1..AP_ROW_TILE rows (the AVX2 path in register tiles of 4)
#define AP_ROW_TILE 8

static inline float ap_h2f(uint16_t h) {
    // IEEE half to float, exact (no hardware needed)
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
    if (exp == 0) {
        if (mant == 0) bits = sign;
        else {  // subnormal: normalise
            exp = 127 - 15 + 1;
            while (!(mant & 0x400)) { mant <<= 1; exp--; }
            bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
        }
    } else if (exp == 31) bits = sign | 0x7f800000 | (mant << 13);
    else bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    float f; memcpy(&f, &bits, 4); return f;
}

static inline uint16_t ap_f2h(float f) {
    // float to IEEE half, round to nearest even (the same as F16C's _mm256_cvtps_ph with mode 0)
    uint32_t x; memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000; int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t mant = x & 0x7fffff;
    if (((x >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00 | (mant ? 0x200 : 0));
    if (exp >= 31) return (uint16_t)(sign | 0x7c00);
    if (exp <= 0) {
        if (exp < -10) return (uint16_t)sign;
        mant |= 0x800000; uint32_t shift = (uint32_t)(14 - exp), half = 1u << (shift - 1);
        uint32_t r = mant >> shift, rem = mant & ((1u << shift) - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = (uint32_t)(exp << 10) | (mant >> 13), rem = mant & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;  // a carry into the exponent is correct
    return (uint16_t)(sign | r);
}

// The fixed reduction of 8 float lanes: ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)).
static inline float ap_reduce8(const float a[8]) {
    float b0 = a[0] + a[4], b1 = a[1] + a[5], b2 = a[2] + a[6], b3 = a[3] + a[7];
    return (b0 + b2) + (b1 + b3);
}

#ifdef AP_AVX2
static inline float ap_reduce8_avx2(__m256 v) {
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));  // b_i = a_i + a_{i+4}
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));                                   // c0 = b0+b2, c1 = b1+b3
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));                   // c0 + c1
}
// Q4_K's 8 scales (bytes 0-7) and 8 minimums (bytes 8-15) unpacked with 32-bit operations
// (the same values as ap_q4k_scales, byte for byte)
static inline __m128i ap_q4k_scales_mins_avx2(const uint8_t *s) {
    uint32_t u[3]; memcpy(u, s, 12);
    const uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, top2 = 0x03030303;
    return _mm_setr_epi32((int)(u[0] & low6), (int)((u[2] & low4) | (((u[0] >> 6) & top2) << 4)),
                          (int)(u[1] & low6), (int)(((u[2] >> 4) & low4) | (((u[1] >> 6) & top2) << 4)));
}
// Q4_K's minimums term of one row and super-block, an exact int: sum_j mn[j] * s32[j] (8 int16 each)
static inline int ap_q4k_min_sum_avx2(__m128i mins, const int16_t *s32) {
    __m128i m4 = _mm_madd_epi16(mins, _mm_loadu_si128((const __m128i *)s32));
    m4 = _mm_add_epi32(m4, _mm_shuffle_epi32(m4, 0x4e));
    m4 = _mm_add_epi32(m4, _mm_shuffle_epi32(m4, 0xb1));
    return _mm_cvtsi128_si32(m4);
}
static inline int ap_hsum_i32_avx2(__m256i v) {
    __m128i a = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    a = _mm_add_epi32(a, _mm_shuffle_epi32(a, 0x4e));
    a = _mm_add_epi32(a, _mm_shuffle_epi32(a, 0xb1));
    return _mm_cvtsi128_si32(a);
}
#endif

// Q4_K's 8 six-bit scales and 8 six-bit minimums, unpacked from its 12 bytes
static inline void ap_q4k_scales(const uint8_t *s, uint8_t sc[8], uint8_t mn[8]) {
    for (int j = 0; j < 4; j++) { sc[j] = s[j] & 63; mn[j] = s[j + 4] & 63; }
    for (int j = 4; j < 8; j++) {
        sc[j] = (uint8_t)((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
        mn[j] = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

// per-type dot products of one weight row with R activation rows (r0..r0+R-1); out[R]
typedef void (*ap_dot_fn)(const uint8_t *wrow, const ap_act *a, int r0, int R, float *out);

// the reference (portable C) and, where compiled, the AVX2 and AVX-512 (VNNI) versions; NULL when
// a type has none (the AVX-512 path covers the K-quants of the targets; other types use AVX2)
ap_dot_fn ap_dot_ref(int type);
ap_dot_fn ap_dot_avx2(int type);
ap_dot_fn ap_dot_avx512(int type);
int ap_act_block(int type);  // 256 / 32 / 0 (float rows)

void ap_quantize_rows_ref(const float *x, int M, int K, int block, int8_t *q, float *d, int16_t *s16, int16_t *s32);
void ap_quantize_rows_avx2(const float *x, int M, int K, int block, int8_t *q, float *d, int16_t *s16, int16_t *s32);

#endif
