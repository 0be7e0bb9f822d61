// AVX2+FMA+F16C dot products, one per weight type, matching dot_ref.c bitwise.
//
// A weight block is loaded and unpacked once, then multiplied with up to AVX2_TILE activation
// rows whose sums stay in registers (16 ymm registers: 4 rows): that is what makes scoring 4 tokens
// cost far less than 4x one token. The K-quants run on their interleaved groups (see below). Rows never mix: each row's lanes see the same operations in the same order as when the
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
AP_INLINE __m256 acc_lanes(__m256 acc, float scale, __m256i isum) {  // acc + scale * isum, mul then add
    return _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(scale), _mm256_cvtepi32_ps(isum)));
}

// ---- 32-element blocks in the row layout: Q4_0 (signed values) ---------------------------------------

AP_INLINE void dot_q4_0_rows(const uint8_t *wrow, const ap_act *a, int r0, int R, float *out) {
    const int nb = a->K / 32;
    __m256 acc[AVX2_TILE];
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *blk = wrow + sizeof(block_q4_0) * b;
        uint16_t dh; memcpy(&dh, blk, 2);
        const float dw = _cvtsh_ss(dh);
        const __m256i w = _mm256_sub_epi8(load_nibbles_32(blk + 2), _mm256_set1_epi8(8));
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

// ---- interleaved types: a group of 16 weight rows, 8 lanes (rows) per ymm, two halves ----------
// maddubs multiplies a row's 4 weight bytes by the 4 broadcast activation bytes into two int16 pair
// sums; several are added as int16 while they cannot overflow (Q4_K: 8 x 3810, Q6_K: 2 x 16002),
// then madd with the scale in both halves of the lane gives scale * (sum of the products) as int32.

AP_INLINE __m256i broadcast4(const int8_t *p) {  // 4 bytes (or two int16) into every 32-bit lane
    int32_t v; memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}
// step t of 8 elements: low nibbles (elements 8t..8t+3) x x[0..3] plus high (8t+4..8t+7) x x[4..7],
// as int16 pair sums per lane (exact: at most 2 x 2 x 63 x 127); x0 and x4 are x[0..3] and x[4..7]
// broadcast, which the K-quants make once for both halves of a group
AP_INLINE __m256i step_products_of(__m256i q0, __m256i q1, __m256i x0, __m256i x4) {
    return _mm256_add_epi16(_mm256_maddubs_epi16(q0, x0), _mm256_maddubs_epi16(q1, x4));
}
AP_INLINE __m256i step_products(__m256i q0, __m256i q1, const int8_t *x) {
    return step_products_of(q0, q1, broadcast4(x), broadcast4(x + 4));
}
AP_INLINE __m256i both_halves_even(__m256i pair) {  // (lo, hi) int16 per lane -> (lo, lo)
    return _mm256_or_si256(_mm256_and_si256(pair, _mm256_set1_epi32(0xffff)), _mm256_slli_epi32(pair, 16));
}
AP_INLINE __m256i both_halves_odd(__m256i pair) {  // (lo, hi) -> (hi, hi)
    return _mm256_or_si256(_mm256_srli_epi32(pair, 16), _mm256_and_si256(pair, _mm256_set1_epi32((int)0xffff0000u)));
}

// Matrices are read once per step, group after group, and groups are contiguous: the blocks `blocks`
// ahead of the one being multiplied (past the group's end: the next group's) are asked for now, so that
// memory works while the multiply pipes do. How far ahead pays differs by type (Zen 3, 2 threads,
// gemma-2-9b's matrices, builds A/B in one process, evaluation/bench_kernel_builds.py): Q4_K's 2,368-byte
// blocks 6 ahead (a one-row step 0.88-0.98x the time of 2 ahead; 8 and 12 no better, 4 less), Q6_K's
// 4,384-byte blocks 2 ahead (6 cost 3-6% at one row).
#define AP_PREFETCH_K_BLOCKS 6
#define AP_PREFETCH_Q6_K_BLOCKS 2
AP_INLINE void prefetch_ahead(const void *block, size_t bytes, int blocks) {
    const char *ahead = (const char *)block + (size_t)blocks * bytes;
    for (size_t i = 0; i < bytes; i += 64) _mm_prefetch(ahead + i, _MM_HINT_T0);
}

// The K-quants walk super-block by super-block; inside one, every tile of up to 4 activation rows is
// done before the next, so the super-block's bytes are read from memory once and from L1 after that, and
// each row's float sums live in `out` (one load and store per super-block). A tile takes both 8-row halves
// of the group in one pass: a row's activations are broadcast once a step for all 16 lanes, not once per
// half, and a tile's broadcasts, multiplies and adds are what a row costs (on Zen 3 one pass takes
// 0.88-0.94x the time of two at 2-8 rows: evaluation/measured/kernel_builds_avx2_halves_zen3.json). Each
// row's integer sums are exact, and its float step is the definition's, so the tiling changes no bit.

// one step t (8 elements of each of the 16 lanes, both halves) of a Q4_K / Q5_K super-block into every row's
// int16 pair sums: each row's two broadcasts of its activations serve both halves
AP_INLINE void k_step(const block_q4_K_g16 *gb, __m256i qh[2], const ap_act *a, int row0, int RR, int b, int t,
                      __m256i part[2][AVX2_TILE], int first) {
    const __m256i low4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
    __m256i q0[2], q1[2];
    for (int h = 0; h < 2; h++) {
        const __m256i packed = _mm256_loadu_si256((const __m256i *)(gb->qs[t] + 32 * h));
        q0[h] = _mm256_and_si256(packed, low4), q1[h] = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low4);
        if (qh) {  // step t's bits are the low two of qh, shifted by 2 a step (constant shifts)
            q0[h] = _mm256_or_si256(q0[h], _mm256_slli_epi16(_mm256_and_si256(qh[h], one), 4));
            q1[h] = _mm256_or_si256(q1[h], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh[h], 1), one), 4));
            qh[h] = _mm256_srli_epi16(qh[h], 2);
        }
    }
    for (int r = 0; r < RR; r++) {
        const int8_t *x = a->q + (size_t)(row0 + r) * a->K + 256 * b + 8 * t;
        const __m256i x0 = broadcast4(x), x4 = broadcast4(x + 4);
        for (int h = 0; h < 2; h++) {
            const __m256i products = step_products_of(q0[h], q1[h], x0, x4);
            part[h][r] = first ? products : _mm256_add_epi16(part[h][r], products);
        }
    }
}

// one super-block of Q4_K, or of Q5_K (`fifth`: its fifth bits, ORed in as Q5_0's), both halves, activation
// rows row0..row0+RR-1 (RR <= 4). Q5_K's values up to 31 would overflow int16 over a sub-block's 4 steps
// (4 x 2 x 2 x 31 x 127 > 2^15), so its pair sums are taken 2 steps at a time (exact: 31,496) and madd'ed
// with the scale twice
AP_INLINE void k_superblock_rows(const block_q4_K_g16 *gb, const uint8_t (*fifth_bits)[4 * AP_GROUP],
                                 const __m256i scale[2][8], const __m256i mins[2][4], const ap_act *a, int row0, int RR,
                                 int b, float *out) {
    const int steps = fifth_bits ? 2 : 4;
    __m256i isum[2][AVX2_TILE];
    for (int h = 0; h < 2; h++)
        for (int r = 0; r < RR; r++) isum[h][r] = _mm256_setzero_si256();
    for (int j = 0; j < 8; j++) {
        __m256i qh[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        if (fifth_bits)
            for (int h = 0; h < 2; h++) qh[h] = _mm256_loadu_si256((const __m256i *)(fifth_bits[j] + 32 * h));
        for (int t0 = 4 * j; t0 < 4 * j + 4; t0 += steps) {
            __m256i part[2][AVX2_TILE];  // the first step sets the pair sums (no add to zero), the others add
            k_step(gb, fifth_bits ? qh : NULL, a, row0, RR, b, t0, part, 1);
            // one step at a time: unrolled, gcc computes every row's products before adding any and spills
            // them past the 16 registers (Zen 3: 0.79-0.93x the time at 4 and 8 rows when this was added)
#pragma GCC unroll 1
            for (int t = t0 + 1; t < t0 + steps; t++) k_step(gb, fifth_bits ? qh : NULL, a, row0, RR, b, t, part, 0);
            for (int h = 0; h < 2; h++)
                for (int r = 0; r < RR; r++) isum[h][r] = _mm256_add_epi32(isum[h][r], _mm256_madd_epi16(part[h][r], scale[h][j]));
        }
    }
    for (int r = 0; r < RR; r++) {
        const size_t row = (size_t)(row0 + r);
        const int16_t *s32 = a->s32 + row * (a->K / 32) + 8 * b;
        __m256i sums[4];  // the row's sums of 32, a pair a broadcast, for both halves
        for (int p = 0; p < 4; p++) sums[p] = broadcast4((const int8_t *)(s32 + 2 * p));
        const __m256 dx = _mm256_set1_ps(a->d[row * (a->K / 256) + b]);
        for (int h = 0; h < 2; h++) {
            const int lane0 = 8 * h;
            const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(gb->d + lane0)));
            const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(gb->dmin + lane0)));
            __m256i msum = _mm256_setzero_si256();
            for (int p = 0; p < 4; p++) msum = _mm256_add_epi32(msum, _mm256_madd_epi16(mins[h][p], sums[p]));
            float *acc = out + (row0 + r) * AP_GROUP + lane0;
            _mm256_storeu_ps(acc, _mm256_add_ps(_mm256_loadu_ps(acc), _mm256_sub_ps(_mm256_mul_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(isum[h][r])),
                                                                                   _mm256_mul_ps(_mm256_mul_ps(dmin, dx), _mm256_cvtepi32_ps(msum)))));
        }
    }
}

// out[r][l] for activation rows r0..r0+R-1 (any R), relative to r0; Q4_K, or Q5_K with `fifth`
AP_INLINE void group_k_avx2(const uint8_t *group, int fifth, const ap_act *a, int r0, int R, float *out) {
    memset(out, 0, sizeof(float) * (size_t)R * AP_GROUP);
    float *o = out - (size_t)r0 * AP_GROUP;  // indexed by absolute row below
    for (int b = 0; b < a->K / 256; b++) {
        const block_q4_K_g16 *gb = ap_k_block(group, fifth, b);
        const uint8_t (*fifth_bits)[4 * AP_GROUP] = ap_k_fifth_bits(group, fifth, b);
        prefetch_ahead(gb, fifth ? sizeof(block_q5_K_g16) : sizeof(block_q4_K_g16), AP_PREFETCH_K_BLOCKS);
        __m256i scale[2][8], mins[2][4];  // widened once a super-block, for every tile
        for (int half = 0; half < 2; half++)
            for (int p = 0; p < 4; p++) {
                const __m256i pair = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)gb->sc[p][8 * half]));
                scale[half][2 * p] = both_halves_even(pair);
                scale[half][2 * p + 1] = both_halves_odd(pair);
                mins[half][p] = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)gb->mn[p][8 * half]));
            }
        for (int rt = r0; rt < r0 + R; rt += AVX2_TILE) {
            switch (r0 + R - rt) {  // a constant tile size per call, so the row loops unroll
                case 1: k_superblock_rows(gb, fifth_bits, scale, mins, a, rt, 1, b, o); break;
                case 2: k_superblock_rows(gb, fifth_bits, scale, mins, a, rt, 2, b, o); break;
                case 3: k_superblock_rows(gb, fifth_bits, scale, mins, a, rt, 3, b, o); break;
                default: k_superblock_rows(gb, fifth_bits, scale, mins, a, rt, 4, b, o); break;
            }
        }
    }
}
static void group_q4_K_avx2(const uint8_t *group, const ap_act *a, int r0, int R, float *out) {
    group_k_avx2(group, 0, a, r0, R, out);
}
static void group_q5_K_avx2(const uint8_t *group, const ap_act *a, int r0, int R, float *out) {
    group_k_avx2(group, 1, a, r0, R, out);
}

// Q6_K, in bytes (block_q6_K_i8) or in its 6 bits (`bits`: block_q6_K_g16), one super-block, both halves,
// activation rows row0..row0+RR-1 (RR <= 4): the offset of 32 from the activations' sums of 16, then each
// step's int16 pair sums times the group's scale; each row's two broadcasts of its activations serve both
// halves. Both layouts put d and sc first.
AP_INLINE void q6_K_superblock_rows(const uint8_t *gb, int bits, const __m256i pairs[2][8], const ap_act *a,
                                    int row0, int RR, int b, float *out) {
    const block_q6_K_i8 *g8 = (const block_q6_K_i8 *)gb;
    const block_q6_K_g16 *g6 = (const block_q6_K_g16 *)gb;
    const __m256i low4 = _mm256_set1_epi8(15), three = _mm256_set1_epi8(3);
    __m256i isum[2][AVX2_TILE];
    for (int r = 0; r < RR; r++) {  // the offset of 32 first: -32 * (the sum over the 16 scales of sc * s16), exact in int32
        const int16_t *s16 = a->s16 + (size_t)(row0 + r) * (a->K / 16) + 16 * b;
        __m256i offset[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        for (int p = 0; p < 8; p++) {
            const __m256i sums = broadcast4((const int8_t *)(s16 + 2 * p));
            for (int half = 0; half < 2; half++) offset[half] = _mm256_add_epi32(offset[half], _mm256_madd_epi16(pairs[half][p], sums));
        }
        for (int half = 0; half < 2; half++) isum[half][r] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(offset[half], 5));
    }
    for (int p = 0; p < 8; p++) {
        for (int h = 0; h < 2; h++) {
            __m256i scale[2], qh[2];
            for (int half = 0; half < 2; half++) {
                scale[half] = h ? both_halves_odd(pairs[half][p]) : both_halves_even(pairs[half][p]);
                qh[half] = bits ? _mm256_loadu_si256((const __m256i *)(g6->qh[2 * p + h] + 32 * half)) : _mm256_setzero_si256();
            }
            for (int t = 4 * p + 2 * h; t < 4 * p + 2 * h + 2; t++) {
                __m256i q0[2], q1[2];
                for (int half = 0; half < 2; half++) {
                    if (bits) {  // step t's high bits are the low four of qh, shifted by 4 a step
                        const __m256i packed = _mm256_loadu_si256((const __m256i *)(g6->qs[t] + 32 * half));
                        q0[half] = _mm256_or_si256(_mm256_and_si256(packed, low4), _mm256_slli_epi16(_mm256_and_si256(qh[half], three), 4));
                        q1[half] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(packed, 4), low4),
                                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh[half], 2), three), 4));
                        qh[half] = _mm256_srli_epi16(qh[half], 4);
                    } else {
                        q0[half] = _mm256_loadu_si256((const __m256i *)(g8->q[t][0] + 32 * half));
                        q1[half] = _mm256_loadu_si256((const __m256i *)(g8->q[t][1] + 32 * half));
                    }
                }
                for (int r = 0; r < RR; r++) {  // one step's int16 pair sums (at most 2 x 2 x 63 x 127), widened at once
                    const int8_t *x = a->q + (size_t)(row0 + r) * a->K + 256 * b + 8 * t;
                    const __m256i x0 = broadcast4(x), x4 = broadcast4(x + 4);
                    for (int half = 0; half < 2; half++)
                        isum[half][r] = _mm256_add_epi32(isum[half][r], _mm256_madd_epi16(step_products_of(q0[half], q1[half], x0, x4), scale[half]));
                }
            }
        }
    }
    for (int half = 0; half < 2; half++) {
        const int lane0 = 8 * half;
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((bits ? g6->d : g8->d) + lane0)));
        for (int r = 0; r < RR; r++) {
            const __m256 dx = _mm256_set1_ps(a->d[(size_t)(row0 + r) * (a->K / 256) + b]);
            float *acc = out + (row0 + r) * AP_GROUP + lane0;
            _mm256_storeu_ps(acc, _mm256_add_ps(_mm256_loadu_ps(acc), _mm256_mul_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(isum[half][r]))));
        }
    }
}

AP_INLINE void group_q6_K_avx2(const uint8_t *group, int bits, const ap_act *a, int r0, int R, float *out) {
    const size_t block_bytes = bits ? sizeof(block_q6_K_g16) : sizeof(block_q6_K_i8);
    memset(out, 0, sizeof(float) * (size_t)R * AP_GROUP);
    float *o = out - (size_t)r0 * AP_GROUP;
    for (int b = 0; b < a->K / 256; b++) {
        const uint8_t *gb = group + block_bytes * (size_t)b;
        const int8_t (*sc)[AP_GROUP][2] = ap_q6k_sc(group, bits, b);
        prefetch_ahead(gb, block_bytes, AP_PREFETCH_Q6_K_BLOCKS);
        __m256i pairs[2][8];
        for (int half = 0; half < 2; half++)
            for (int p = 0; p < 8; p++) pairs[half][p] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc[p][8 * half]));
        for (int rt = r0; rt < r0 + R; rt += AVX2_TILE) {
            switch (r0 + R - rt) {
                case 1: q6_K_superblock_rows(gb, bits, pairs, a, rt, 1, b, o); break;
                case 2: q6_K_superblock_rows(gb, bits, pairs, a, rt, 2, b, o); break;
                case 3: q6_K_superblock_rows(gb, bits, pairs, a, rt, 3, b, o); break;
                default: q6_K_superblock_rows(gb, bits, pairs, a, rt, 4, b, o); break;
            }
        }
    }
}
static void group_q6_K_g16_avx2(const uint8_t *group, const ap_act *a, int r0, int R, float *out) {
    group_q6_K_avx2(group, 1, a, r0, R, out);
}
static void group_q6_K_i8_avx2(const uint8_t *group, const ap_act *a, int r0, int R, float *out) {
    group_q6_K_avx2(group, 0, a, r0, R, out);
}

// Q4_1: per 32-element block, 4 steps of int16 pair sums (exact: 4 x 2 x 2 x 15 x 128 < 2^15), one
// madd by 1 into int32, then the block's float step for 8 rows at once
AP_INLINE void group_q4_1_half(const block_q4_1_g16 *g, const ap_act *a, int r0, int R, int half, float *out) {
    const int nb = a->K / 32, lane0 = 8 * half;
    __m256 acc[AVX2_TILE];
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    const __m256i low4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    for (int b = 0; b < nb; b++) {
        const block_q4_1_g16 *gb = &g[b];
        __m256i part[AVX2_TILE];
        for (int r = 0; r < R; r++) part[r] = _mm256_setzero_si256();
        for (int t = 0; t < 4; t++) {
            const __m256i packed = _mm256_loadu_si256((const __m256i *)(gb->qs[t] + 4 * lane0));
            const __m256i q0 = _mm256_and_si256(packed, low4), q1 = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low4);
            for (int r = 0; r < R; r++)
                part[r] = _mm256_add_epi16(part[r], step_products(q0, q1, a->q + (size_t)(r0 + r) * a->K + 32 * b + 8 * t));
        }
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(gb->d + lane0)));
        const __m256 m = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(gb->m + lane0)));
        for (int r = 0; r < R; r++) {
            const size_t at = (size_t)(r0 + r) * nb + b;
            const __m256 dx = _mm256_set1_ps(a->d[at]), sx = _mm256_set1_ps((float)a->s32[at]);
            const __m256 isum = _mm256_cvtepi32_ps(_mm256_madd_epi16(part[r], ones));
            acc[r] = _mm256_add_ps(acc[r], _mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(d, dx), isum),
                                                         _mm256_mul_ps(_mm256_mul_ps(m, dx), sx)));
        }
    }
    for (int r = 0; r < R; r++) _mm256_storeu_ps(out + r * AP_GROUP + lane0, acc[r]);
}

// Q5_0: values 0..31 through maddubs as Q4_1's, int16 pair sums of 2 steps at a time (exact: 2 x 2 x
// 2 x 31 x 128 < 2^15), then -16 x s32 for the offset, and the block's float step for 8 rows at once
AP_INLINE void group_q5_0_half(const block_q5_0_g16 *g, const ap_act *a, int r0, int R, int half, float *out) {
    const int nb = a->K / 32, lane0 = 8 * half;
    __m256 acc[AVX2_TILE];
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    const __m256i low4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1), ones = _mm256_set1_epi16(1);
    for (int b = 0; b < nb; b++) {
        const block_q5_0_g16 *gb = &g[b];
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(gb->qh + 4 * lane0));
        __m256i isum[AVX2_TILE];
        for (int r = 0; r < R; r++) isum[r] = _mm256_setzero_si256();
        for (int pair = 0; pair < 2; pair++) {
            __m256i part[AVX2_TILE];
            for (int r = 0; r < R; r++) part[r] = _mm256_setzero_si256();
            for (int t = 2 * pair; t < 2 * pair + 2; t++) {
                const __m256i packed = _mm256_loadu_si256((const __m256i *)(gb->qs[t] + 4 * lane0));
                const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * t), one), 4);
                const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * t + 1), one), 4);
                const __m256i q0 = _mm256_or_si256(_mm256_and_si256(packed, low4), h0);
                const __m256i q1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(packed, 4), low4), h1);
                for (int r = 0; r < R; r++)
                    part[r] = _mm256_add_epi16(part[r], step_products(q0, q1, a->q + (size_t)(r0 + r) * a->K + 32 * b + 8 * t));
            }
            for (int r = 0; r < R; r++) isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(part[r], ones));
        }
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(gb->d + lane0)));
        for (int r = 0; r < R; r++) {
            const size_t at = (size_t)(r0 + r) * nb + b;
            const __m256i offset = _mm256_set1_epi32(16 * (int)a->s32[at]);
            const __m256 dx = _mm256_set1_ps(a->d[at]);
            acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(_mm256_sub_epi32(isum[r], offset))));
        }
    }
    for (int r = 0; r < R; r++) _mm256_storeu_ps(out + r * AP_GROUP + lane0, acc[r]);
}

// Q8_0 (row layout's order, ap_common.h): the stored bytes back to signed values (xor 128), each step's
// 4-element sums of 8 rows by the sign trick as in the row layout (exact int16 pairs: 2 x 128 x 127 <
// 2^15, then madd by 1), into that step's float lane; the 8 lanes reduced as ap_reduce8. One activation
// row at a time: its 8 lane accumulators fill half the registers.
AP_INLINE void group_q8_0_half(const block_q8_0_g16 *g, const ap_act *a, int row, int half, float *out) {
    const int nb = a->K / 32, lane0 = 8 * half;
    __m256 acc[8];
    for (int t = 0; t < 8; t++) acc[t] = _mm256_setzero_ps();
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    for (int b = 0; b < nb; b++) {
        const block_q8_0_g16 *gb = &g[b];
        const __m256 s = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(gb->d + lane0))),
                                       _mm256_set1_ps(a->d[(size_t)row * nb + b]));
        for (int t = 0; t < 8; t++) {
            const __m256i w = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(gb->q[t] + 4 * lane0)), flip);
            const __m256i x = broadcast4(a->q + (size_t)row * a->K + 32 * b + 4 * t);
            const __m256i lane = madd_u8_s8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
            acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(s, _mm256_cvtepi32_ps(lane)));
        }
    }
    const __m256 b0 = _mm256_add_ps(acc[0], acc[4]), b1 = _mm256_add_ps(acc[1], acc[5]);
    const __m256 b2 = _mm256_add_ps(acc[2], acc[6]), b3 = _mm256_add_ps(acc[3], acc[7]);
    _mm256_storeu_ps(out + lane0, _mm256_add_ps(_mm256_add_ps(b0, b2), _mm256_add_ps(b1, b3)));
}

static void group_q8_0_avx2(const uint8_t *group, const ap_act *a, int r0, int R, float *out) {
    for (int r = 0; r < R; r++)
        for (int half = 0; half < 2; half++) group_q8_0_half((const block_q8_0_g16 *)group, a, r0 + r, half, out + r * AP_GROUP);
}
AP_INLINE void group_q5_0_tile(const uint8_t *group, const ap_act *a, int r0, int R, float *out) {
    for (int half = 0; half < 2; half++) group_q5_0_half((const block_q5_0_g16 *)group, a, r0, R, half, out);
}
AP_INLINE void group_q4_1_tile(const uint8_t *group, const ap_act *a, int r0, int R, float *out) {
    for (int half = 0; half < 2; half++) group_q4_1_half((const block_q4_1_g16 *)group, a, r0, R, half, out);
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
// register tile of 4 are a second tile (each row's arithmetic is the same in either). `weights` is a
// weight row (per_row = 1 output per activation row) or a group of 16 (per_row = AP_GROUP).
#define TILED(name, per_row, call)                                                           \
    static void name##_tile(const uint8_t *weights, const ap_act *a, int r0, int R, float *out) { \
        switch (R) {                                                                         \
            case 1: { const int RR = 1; call; break; }                                       \
            case 2: { const int RR = 2; call; break; }                                       \
            case 3: { const int RR = 3; call; break; }                                       \
            default: { const int RR = 4; call; break; }                                      \
        }                                                                                    \
    }                                                                                        \
    static void name(const uint8_t *weights, const ap_act *a, int r0, int R, float *out) {  \
        for (int done = 0; done < R; done += AVX2_TILE)                                      \
            name##_tile(weights, a, r0 + done, R - done < AVX2_TILE ? R - done : AVX2_TILE, out + done * (per_row)); \
    }
TILED(dot_q4_0_avx2, 1, dot_q4_0_rows(weights, a, r0, RR, out))
TILED(dot_f32_avx2, 1, dot_float_tile(weights, 0, a, r0, RR, out))
TILED(dot_f16_avx2, 1, dot_float_tile(weights, 1, a, r0, RR, out))

ap_dot_fn ap_dot_avx2(int type) {
    switch (type) {
        case AP_F32: return dot_f32_avx2;
        case AP_F16: return dot_f16_avx2;
        case AP_Q4_0: return dot_q4_0_avx2;
        default: return NULL;
    }
}

TILED(group_q4_1_avx2, AP_GROUP, group_q4_1_tile(weights, a, r0, RR, out))
TILED(group_q5_0_avx2, AP_GROUP, group_q5_0_tile(weights, a, r0, RR, out))

ap_group_fn ap_group_avx2(int type) {
    switch (type) {
        case AP_Q4_1_G16: return group_q4_1_avx2;
        case AP_Q5_0_G16: return group_q5_0_avx2;
        case AP_Q8_0_G16: return group_q8_0_avx2;
        case AP_Q4_K_G16: return group_q4_K_avx2;
        case AP_Q5_K_G16: return group_q5_K_avx2;
        case AP_Q6_K_G16: return group_q6_K_g16_avx2;
        case AP_Q6_K_I8: return group_q6_K_i8_avx2;
        default: return NULL;
    }
}

#else
ap_dot_fn ap_dot_avx2(int type) { (void)type; return NULL; }
ap_group_fn ap_group_avx2(int type) { (void)type; return NULL; }
void ap_quantize_rows_avx2(const float *x, int M, int K, int block, int8_t *q, float *d, int16_t *s16, int16_t *s32) {
    ap_quantize_rows_ref(x, M, K, block, q, d, s16, s32);
}
#endif
