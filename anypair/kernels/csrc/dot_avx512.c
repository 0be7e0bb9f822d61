// AVX-512 (F/BW/VL + VNNI) dot products for the K-quants (Q4_K, Q6_K: the blocks of the Q4_K_M
// targets), matching dot_ref.c and dot_avx2.c bitwise. Other types run their AVX2 functions.
//
// A zmm register holds two 32-element chunks: the weights' unpacked values, the activations (64
// contiguous int8) and the two chunks' scales as int16. Per row, _mm512_maddubs_epi16 forms the pair
// sums and VNNI's _mm512_dpwssd_epi32 multiplies them by the scales and adds them into the row's
// int32 lanes in one instruction (AVX2 needs madd, then add). Integer sums are exact, so folding the
// upper 8 lanes onto the lower 8 at the end of a super-block yields the very integers of the AVX2
// path and the reference (lane i = bytes 4i..4i+3 of every 32-element chunk), and the float steps
// after it are theirs too. Up to AP_ROW_TILE (8) rows share one unpacking of a weight block: their
// sums fit in the 32 zmm registers, so scoring 8 tokens reads and unpacks each weight once.
#include "ap_common.h"

#ifdef AP_AVX512

#define AP_INLINE static inline __attribute__((always_inline))

AP_INLINE __m256i fold_halves(__m512i v) {  // lane i + lane i+8: the 8 lanes of the AVX2 path
    return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}
AP_INLINE __m256 acc_lanes(__m256 acc, float scale, __m256i isum) {  // acc + scale * isum, mul then add
    return _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(scale), _mm256_cvtepi32_ps(isum)));
}
AP_INLINE __m512i load_both_halves(const uint8_t *p) {  // 32 bytes into each 256-bit half
    return _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)p));
}

AP_INLINE void dot_q4_K_tile(const uint8_t *wrow, const ap_act *a, int r0, int R, float *out) {
    const block_q4_K *w = (const block_q4_K *)wrow; const int nb = a->K / 256;
    __m256 acc[AP_ROW_TILE]; float macc[AP_ROW_TILE];
    for (int r = 0; r < R; r++) { acc[r] = _mm256_setzero_ps(); macc[r] = 0.0f; }
    const __m512i low4 = _mm512_set1_epi8(15);
    const __m512i nibble_shift = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);  // low nibbles, then high
    __m512i scale_index[4];  // chunk c: sub-block 2c's scale in the low half, 2c+1's in the high half
    for (int c = 0; c < 4; c++)
        scale_index[c] = _mm512_inserti64x4(_mm512_set1_epi16((short)(2 * c)), _mm256_set1_epi16((short)(2 * c + 1)), 1);
    for (int b = 0; b < nb; b++) {
        const __m128i sm = ap_q4k_scales_mins_avx2(w[b].scales);
        const __m512i scales = _mm512_castsi128_si512(_mm_cvtepu8_epi16(sm));
        const __m128i mins = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
        const float d = _cvtsh_ss(w[b].d), dmin = _cvtsh_ss(w[b].dmin);
        __m512i isum[AP_ROW_TILE];
        for (int r = 0; r < R; r++) isum[r] = _mm512_setzero_si512();
        for (int c = 0; c < 4; c++) {
            const __m512i q = _mm512_and_si512(_mm512_srlv_epi64(load_both_halves(w[b].qs + 32 * c), nibble_shift), low4);
            const __m512i s = _mm512_permutexvar_epi16(scale_index[c], scales);
            for (int r = 0; r < R; r++) {
                const __m512i x = _mm512_loadu_si512(a->q + (size_t)(r0 + r) * a->K + 256 * b + 64 * c);
                isum[r] = _mm512_dpwssd_epi32(isum[r], _mm512_maddubs_epi16(q, x), s);
            }
        }
        for (int r = 0; r < R; r++) {
            const size_t row = (size_t)(r0 + r);
            const float dx = a->d[row * nb + b];
            acc[r] = acc_lanes(acc[r], d * dx, fold_halves(isum[r]));
            macc[r] = macc[r] + (dmin * dx) * (float)ap_q4k_min_sum_avx2(mins, a->s32 + row * (a->K / 32) + 8 * b);
        }
    }
    for (int r = 0; r < R; r++) out[r] = ap_reduce8_avx2(acc[r]) - macc[r];
}

AP_INLINE void dot_q6_K_tile(const uint8_t *wrow, const ap_act *a, int r0, int R, float *out) {
    const block_q6_K *w = (const block_q6_K *)wrow; const int nb = a->K / 256;
    __m256 acc[AP_ROW_TILE];
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    const __m512i low4 = _mm512_set1_epi8(15), three = _mm512_set1_epi8(3);
    const __m512i shift_01 = _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0), shift_23 = _mm512_set_epi64(6, 6, 6, 6, 4, 4, 4, 4);
    // 128-bit lane L of chunk pair h in half n takes group 8n + 4h + L's scale
    __m512i scale_index[4];
    for (int i = 0; i < 4; i++)
        scale_index[i] = _mm512_add_epi16(_mm512_set1_epi16((short)(4 * i)),
                                          _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(_mm_set1_epi16(1), _mm_setzero_si128())),
                                                             _mm256_set_m128i(_mm_set1_epi16(3), _mm_set1_epi16(2)), 1));
    for (int b = 0; b < nb; b++) {
        const float d = _cvtsh_ss(w[b].d);
        const __m512i scales = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w[b].scales)));
        __m512i isum[AP_ROW_TILE];
        for (int r = 0; r < R; r++) isum[r] = _mm512_setzero_si512();
        for (int n = 0; n < 2; n++) {
            const __m512i ql = _mm512_loadu_si512(w[b].ql + 64 * n);  // chunks 0|1: low nibbles, 2|3: high
            const __m512i qh = load_both_halves(w[b].qh + 32 * n);
            __m512i q[2];  // values 0..63 of elements 0-63 and 64-127 of this half
            q[0] = _mm512_or_si512(_mm512_and_si512(ql, low4),
                                   _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi64(qh, shift_01), three), 4));
            q[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4),
                                   _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi64(qh, shift_23), three), 4));
            for (int h = 0; h < 2; h++) {
                const __m512i s = _mm512_permutexvar_epi16(scale_index[2 * n + h], scales);
                for (int r = 0; r < R; r++) {
                    const size_t at = (size_t)(r0 + r) * a->K + 256 * b + 128 * n + 64 * h;
                    const __m512i x = _mm512_loadu_si512(a->q + at);
                    const __m512i p = _mm512_sub_epi16(_mm512_maddubs_epi16(q[h], x), _mm512_loadu_si512(a->pair32 + at / 2));
                    isum[r] = _mm512_dpwssd_epi32(isum[r], p, s);
                }
            }
        }
        for (int r = 0; r < R; r++) acc[r] = acc_lanes(acc[r], d * a->d[(size_t)(r0 + r) * nb + b], fold_halves(isum[r]));
    }
    for (int r = 0; r < R; r++) out[r] = ap_reduce8_avx2(acc[r]);
}

// the switch on R lets the compiler unroll each tile size (registers, not memory, hold the sums)
#define TILED(name, call)                                                                    \
    static void name(const uint8_t *wrow, const ap_act *a, int r0, int R, float *out) {     \
        switch (R) {                                                                         \
            case 1: { const int RR = 1; call; break; }                                       \
            case 2: { const int RR = 2; call; break; }                                       \
            case 3: { const int RR = 3; call; break; }                                       \
            case 4: { const int RR = 4; call; break; }                                       \
            case 5: { const int RR = 5; call; break; }                                       \
            case 6: { const int RR = 6; call; break; }                                       \
            case 7: { const int RR = 7; call; break; }                                       \
            default: { const int RR = 8; call; break; }                                      \
        }                                                                                    \
    }
TILED(dot_q4_K_avx512, dot_q4_K_tile(wrow, a, r0, RR, out))
TILED(dot_q6_K_avx512, dot_q6_K_tile(wrow, a, r0, RR, out))

ap_dot_fn ap_dot_avx512(int type) {
    switch (type) {
        case AP_Q4_K: return dot_q4_K_avx512;
        case AP_Q6_K: return dot_q6_K_avx512;
        default: return NULL;
    }
}

#else
ap_dot_fn ap_dot_avx512(int type) { (void)type; return NULL; }
#endif
