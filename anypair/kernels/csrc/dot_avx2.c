// AVX2+FMA+F16C dot products, one per weight type, matching dot_ref.c bitwise.
//
// A weight block is loaded and unpacked once, then multiplied with up to AVX2_TILE activation
// rows whose sums stay in registers (16 ymm registers: 4 rows): that is what makes scoring 4 tokens cost far less than 4x one
// token. Rows never mix: each row's lanes see the same operations in the same order as when the
// row is alone (R = 1), so the result is bitwise the same whatever R is.
#include "ap_common.h"

#ifdef AP_AVX2

#define AP_INLINE static inline __attribute__((always_inline))
#define AVX2_TILE 4

AP_INLINE __m256i madd_u8_s8(__m256i u, __m256i s) {  // 8 int32 lanes: lane i = sum of bytes 4i..4i+3
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
AP_INLINE __m256i madd_s8_s8(__m256i w, __m256i x) {
    return madd_u8_s8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
}
AP_INLINE __m256i load_nibbles_32(const uint8_t *qs) {  // 16 bytes -> 32 values 0..15 (low nibbles first)
    __m128i v = _mm_loadu_si128((const __m128i *)qs);
    __m128i lo = _mm_and_si128(v, _mm_set1_epi8(15)), hi = _mm_and_si128(_mm_srli_epi16(v, 4), _mm_set1_epi8(15));
    return _mm256_set_m128i(hi, lo);
}
AP_INLINE __m256i bits_to_bytes_32(const uint8_t *p) {  // bit e of 4 bytes -> byte e = 0xFF or 0
    uint32_t bits; memcpy(&bits, p, 4);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits),
                                     _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL, 0x0303030303030303LL));
    const __m256i mask = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, mask), mask);
}
AP_INLINE __m256 acc_lanes(__m256 acc, float scale, __m256i isum) {  // acc + scale * isum, mul then add
    return _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(scale), _mm256_cvtepi32_ps(isum)));
}

// ---- 32-element blocks: Q8_0, Q4_0, Q5_0 (signed values), Q4_1 (unsigned + minimum) ----------------

AP_INLINE void dot_signed32(const uint8_t *wrow, size_t bsize, int kind, const ap_act *a, int r0, int R, float *out) {
    const int nb = a->K / 32;
    __m256 acc[AVX2_TILE];
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *blk = wrow + bsize * b;
        uint16_t dh; memcpy(&dh, blk, 2);
        const float dw = _cvtsh_ss(dh);
        __m256i w;
        if (kind == AP_Q8_0) w = _mm256_loadu_si256((const __m256i *)(blk + 2));
        else if (kind == AP_Q4_0) w = _mm256_sub_epi8(load_nibbles_32(blk + 2), _mm256_set1_epi8(8));
        else {  // Q5_0: the fifth bit from qh
            __m256i high = _mm256_and_si256(bits_to_bytes_32(blk + 2), _mm256_set1_epi8(16));
            w = _mm256_sub_epi8(_mm256_or_si256(load_nibbles_32(blk + 6), high), _mm256_set1_epi8(16));
        }
        __m256i wabs = _mm256_sign_epi8(w, w);
        for (int r = 0; r < R; r++) {
            const size_t row = (size_t)(r0 + r);
            __m256i x = _mm256_loadu_si256((const __m256i *)(a->q + row * a->K + 32 * b));
            __m256i isum = madd_u8_s8(wabs, _mm256_sign_epi8(x, w));
            acc[r] = acc_lanes(acc[r], dw * a->d[row * nb + b], isum);
        }
    }
    for (int r = 0; r < R; r++) out[r] = ap_reduce8_avx2(acc[r]);
}

AP_INLINE void dot_q4_1_tile(const uint8_t *wrow, const ap_act *a, int r0, int R, float *out) {
    const block_q4_1 *w = (const block_q4_1 *)wrow; const int nb = a->K / 32;
    __m256 acc[AVX2_TILE]; float macc[AVX2_TILE];
    for (int r = 0; r < R; r++) { acc[r] = _mm256_setzero_ps(); macc[r] = 0.0f; }
    for (int b = 0; b < nb; b++) {
        const float dw = _cvtsh_ss(w[b].d), mw = _cvtsh_ss(w[b].m);
        __m256i q = load_nibbles_32(w[b].qs);
        for (int r = 0; r < R; r++) {
            const size_t row = (size_t)(r0 + r);
            __m256i x = _mm256_loadu_si256((const __m256i *)(a->q + row * a->K + 32 * b));
            const float dx = a->d[row * nb + b];
            acc[r] = acc_lanes(acc[r], dw * dx, madd_u8_s8(q, x));
            macc[r] = macc[r] + (mw * dx) * (float)a->s32[row * nb + b];
        }
    }
    for (int r = 0; r < R; r++) out[r] = ap_reduce8_avx2(acc[r]) + macc[r];
}

// ---- 256-element super-blocks: Q4_K, Q6_K -------------------------------------------------------

AP_INLINE __m256i broadcast_i16(__m256i both_halves, int index) {  // int16 lane `index` (0-7) everywhere
    return _mm256_shuffle_epi8(both_halves, _mm256_set1_epi16((short)(((2 * index + 1) << 8) | (2 * index))));
}

AP_INLINE void dot_q4_K_tile(const uint8_t *wrow, const ap_act *a, int r0, int R, float *out) {
    const block_q4_K *w = (const block_q4_K *)wrow; const int nb = a->K / 256;
    __m256 acc[AVX2_TILE]; float macc[AVX2_TILE];
    for (int r = 0; r < R; r++) { acc[r] = _mm256_setzero_ps(); macc[r] = 0.0f; }
    const __m256i low4 = _mm256_set1_epi8(15);
    for (int b = 0; b < nb; b++) {
        const __m256i sm16 = _mm256_cvtepu8_epi16(ap_q4k_scales_mins_avx2(w[b].scales));  // scales | minimums, int16
        const __m256i scales = _mm256_permute2x128_si256(sm16, sm16, 0x00);
        const __m128i mins = _mm256_extracti128_si256(sm16, 1);
        const float d = _cvtsh_ss(w[b].d), dmin = _cvtsh_ss(w[b].dmin);
        __m256i isum[AVX2_TILE];
        for (int r = 0; r < R; r++) isum[r] = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            __m256i qq = _mm256_loadu_si256((const __m256i *)(w[b].qs + 32 * c));
            __m256i lo = _mm256_and_si256(qq, low4), hi = _mm256_and_si256(_mm256_srli_epi16(qq, 4), low4);
            __m256i s_lo = broadcast_i16(scales, 2 * c), s_hi = broadcast_i16(scales, 2 * c + 1);
            for (int r = 0; r < R; r++) {
                const int8_t *x = a->q + (size_t)(r0 + r) * a->K + 256 * b + 64 * c;
                __m256i p_lo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)x));
                __m256i p_hi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(x + 32)));
                isum[r] = _mm256_add_epi32(isum[r], _mm256_add_epi32(_mm256_madd_epi16(p_lo, s_lo), _mm256_madd_epi16(p_hi, s_hi)));
            }
        }
        for (int r = 0; r < R; r++) {
            const size_t row = (size_t)(r0 + r);
            const float dx = a->d[row * nb + b];
            acc[r] = acc_lanes(acc[r], d * dx, isum[r]);
            macc[r] = macc[r] + (dmin * dx) * (float)ap_q4k_min_sum_avx2(mins, a->s32 + row * (a->K / 32) + 8 * b);
        }
    }
    for (int r = 0; r < R; r++) out[r] = ap_reduce8_avx2(acc[r]) - macc[r];
}

AP_INLINE void dot_q6_K_tile(const uint8_t *wrow, const ap_act *a, int r0, int R, float *out) {
    const block_q6_K *w = (const block_q6_K *)wrow; const int nb = a->K / 256;
    __m256 acc[AVX2_TILE];
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    const __m256i low4 = _mm256_set1_epi8(15), two = _mm256_set1_epi8(3);
    for (int b = 0; b < nb; b++) {
        const float d = _cvtsh_ss(w[b].d);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w[b].scales));  // 16 int16
        __m256i isum[AVX2_TILE];
        for (int r = 0; r < R; r++) isum[r] = _mm256_setzero_si256();
        for (int n = 0; n < 2; n++) {
            const __m256i half_scales = n ? _mm256_permute2x128_si256(sc16, sc16, 0x11) : _mm256_permute2x128_si256(sc16, sc16, 0x00);  // groups 8n..8n+7
            __m256i ql0 = _mm256_loadu_si256((const __m256i *)(w[b].ql + 64 * n));
            __m256i ql1 = _mm256_loadu_si256((const __m256i *)(w[b].ql + 64 * n + 32));
            __m256i qh = _mm256_loadu_si256((const __m256i *)(w[b].qh + 32 * n));
            __m256i q[4];  // 4 chunks of 32 values 0..63, in element order
            q[0] = _mm256_or_si256(_mm256_and_si256(ql0, low4), _mm256_slli_epi16(_mm256_and_si256(qh, two), 4));
            q[1] = _mm256_or_si256(_mm256_and_si256(ql1, low4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), two), 4));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), two), 4));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), two), 4));
            for (int c = 0; c < 4; c++) {
                // the chunk's two groups of 16: group 8n+2c in the low half, 8n+2c+1 in the high half
                __m256i scale = _mm256_shuffle_epi8(half_scales, _mm256_set_m128i(
                    _mm_set1_epi16((short)(((4 * c + 3) << 8) | (4 * c + 2))), _mm_set1_epi16((short)(((4 * c + 1) << 8) | (4 * c)))));
                for (int r = 0; r < R; r++) {
                    const size_t at = (size_t)(r0 + r) * a->K + 256 * b + 128 * n + 32 * c;
                    __m256i x = _mm256_loadu_si256((const __m256i *)(a->q + at));
                    __m256i x32 = _mm256_loadu_si256((const __m256i *)(a->pair32 + at / 2));  // 32 * pair sums
                    __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q[c], x), x32);
                    isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(p, scale));
                }
            }
        }
        for (int r = 0; r < R; r++) acc[r] = acc_lanes(acc[r], d * a->d[(size_t)(r0 + r) * nb + b], isum[r]);
    }
    for (int r = 0; r < R; r++) out[r] = ap_reduce8_avx2(acc[r]);
}

// ---- float weights: F32, F16 (the exact fallback for every other type, dequantized to F32) ------

AP_INLINE void dot_float_tile(const uint8_t *wrow, int half, const ap_act *a, int r0, int R, float *out) {
    __m256 acc[AVX2_TILE];
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    for (int c = 0; c < a->K; c += 8) {
        __m256 w = half ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)wrow + c)))
                        : _mm256_loadu_ps((const float *)wrow + c);
        for (int r = 0; r < R; r++)
            acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(w, _mm256_loadu_ps(a->x + (size_t)(r0 + r) * a->K + c)));
    }
    for (int r = 0; r < R; r++) out[r] = ap_reduce8_avx2(acc[r]);
}

// one entry per type; the switch on R lets the compiler unroll each tile size, and rows past the
// register tile of 4 are a second tile (each row's arithmetic is the same in either)
#define TILED(name, call)                                                                    \
    static void name##_tile(const uint8_t *wrow, const ap_act *a, int r0, int R, float *out) { \
        switch (R) {                                                                         \
            case 1: { const int RR = 1; call; break; }                                       \
            case 2: { const int RR = 2; call; break; }                                       \
            case 3: { const int RR = 3; call; break; }                                       \
            default: { const int RR = 4; call; break; }                                      \
        }                                                                                    \
    }                                                                                        \
    static void name(const uint8_t *wrow, const ap_act *a, int r0, int R, float *out) {     \
        for (int done = 0; done < R; done += AVX2_TILE)                                      \
            name##_tile(wrow, a, r0 + done, R - done < AVX2_TILE ? R - done : AVX2_TILE, out + done); \
    }
TILED(dot_q8_0_avx2, dot_signed32(wrow, sizeof(block_q8_0), AP_Q8_0, a, r0, RR, out))
TILED(dot_q4_0_avx2, dot_signed32(wrow, sizeof(block_q4_0), AP_Q4_0, a, r0, RR, out))
TILED(dot_q5_0_avx2, dot_signed32(wrow, sizeof(block_q5_0), AP_Q5_0, a, r0, RR, out))
TILED(dot_q4_1_avx2, dot_q4_1_tile(wrow, a, r0, RR, out))
TILED(dot_q4_K_avx2, dot_q4_K_tile(wrow, a, r0, RR, out))
TILED(dot_q6_K_avx2, dot_q6_K_tile(wrow, a, r0, RR, out))
TILED(dot_f32_avx2, dot_float_tile(wrow, 0, a, r0, RR, out))
TILED(dot_f16_avx2, dot_float_tile(wrow, 1, a, r0, RR, out))

ap_dot_fn ap_dot_avx2(int type) {
    switch (type) {
        case AP_F32: return dot_f32_avx2;
        case AP_F16: return dot_f16_avx2;
        case AP_Q4_0: return dot_q4_0_avx2;
        case AP_Q4_1: return dot_q4_1_avx2;
        case AP_Q5_0: return dot_q5_0_avx2;
        case AP_Q8_0: return dot_q8_0_avx2;
        case AP_Q4_K: return dot_q4_K_avx2;
        case AP_Q6_K: return dot_q6_K_avx2;
        default: return NULL;
    }
}

#else
ap_dot_fn ap_dot_avx2(int type) { (void)type; return NULL; }
void ap_quantize_rows_avx2(const float *x, int M, int K, int block, int8_t *q, float *d, int16_t *s16, int16_t *s32) {
    ap_quantize_rows_ref(x, M, K, block, q, d, s16, s32);
}
#endif
