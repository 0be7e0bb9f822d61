// AVX-512 (F/BW/VL + VNNI) kernels for the interleaved types (Q4_K, Q5_K, Q6_K: the blocks of the Q4_K_M
// targets; Q4_1, Q5_0, Q8_0: small drafts and their heads), matching dot_ref.c's group functions bitwise. Other types run their
// AVX2 functions.
//
// A zmm register holds 4 values of each of the 16 weight rows of a group (lane l = row l); the 4
// matching activation bytes are broadcast and VNNI's vpdpbusd adds the 4 products into each row's
// int32 lane. Per sub-block the lanes are multiplied by their rows' scales (vpmulld), the minimums
// or the Q6_K offset come from the activations' per-16/32 sums (vpdpwssd), and the float step of a
// super-block is done once for 16 rows. Integers are exact, the float steps are the definition's
// (ap_common.h), so the result is the reference's whatever the number of activation rows.
// Up to AP_ROW_TILE (8) activation rows share one unpacking of the weights.
#include "ap_common.h"

#ifdef AP_AVX512

#define AP_INLINE static inline __attribute__((always_inline))

// Software prefetch, for tiles of ap_prefetch_min_rows activation rows or more: there a super-block's
// multiplies outlast its bytes' arrival, and the line AP_PREFETCH_AHEAD super-blocks ahead is asked for
// at each step (one line a step, spread over the block). Measured on 2 Zen 4 threads (Qwen2.5-1.5B,
// context 300, A/B in one process): 6 rows 59 -> 50 ms, 8 rows 77 -> 60, 16 rows 122 -> 102; with 1-3
// rows the step is memory-bound there, the hardware prefetcher keeps up and the prefetches only cost
// issue slots (3 rows 37.4 -> 39.7 ms), so they start at 4 rows by default. Intel's hardware prefetcher
// does not keep up with 2-3 rows: without them k = 2 and 3 cost more than k = 4 on Intel Xeons (62 / 75 /
// 73 / 61 ms for k = 1..4); nor does Zen 5's with 1-3 (gemma-2-9b's shape: k = 1 / 2 / 4 137 / 160 / 129 ms
// without them, 97 / 106 / 128 with them). The threshold is set per CPU at load (`ap_set_prefetch_min_rows`, see
// kernels/build.py); it changes which loads are hinted, never the arithmetic.
#define AP_PREFETCH_AHEAD 2
extern int ap_prefetch_min_rows;  // matmul.c, where its setter is (built on every path)
AP_INLINE void prefetch_ahead(const void *block, size_t block_bytes, size_t offset) {
    _mm_prefetch((const char *)block + AP_PREFETCH_AHEAD * block_bytes + offset, _MM_HINT_T0);
}

// The small types (Q4_1: SmolLM2's layers, Q8_0: its head) stream far ahead instead: a group
// block is 320 or 544 bytes, so AP_PREFETCH_AHEAD blocks is too close to hide a miss, and at one
// activation row the kernel waits on every load (perf: most cycles on the loads of the weights).
// Each block asks for the lines AP_STREAM_AHEAD_BYTES further on (the thread's static chunks are
// contiguous, so that is its own next work; past a matrix's end a prefetch never faults). Measured
// on an Intel Xeon (2 vCPUs, AVX-512 VNNI), SmolLM2-135M draft step at context 300, A/B interleaved
// in one process: off 5.10 ms, 4 KiB ahead 3.47, 8 KiB 3.36, 16 KiB 3.47 (32 blocks of Q4_1 ~ 10 KiB:
// 3.18 against 3.23 at 16 and 3.39 at 64 blocks, another run). From ap_prefetch_min_rows rows, as the
// K-quants' (every row on Intel; AMD's hardware prefetcher keeps up). Hints only: no arithmetic changes.
#define AP_STREAM_AHEAD_BYTES 8192
AP_INLINE void prefetch_stream(const void *block, size_t block_bytes) {
    const char *at = (const char *)block + AP_STREAM_AHEAD_BYTES;
    for (size_t o = 0; o < block_bytes; o += 64) _mm_prefetch(at + o, _MM_HINT_T0);
}

AP_INLINE __m512i broadcast4(const int8_t *p) {  // 4 bytes (or two int16) into every 32-bit lane
    int32_t v; memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

// one step of 8 elements for R activation rows whose 8 bytes start at x, x + stride, ...: part[r] += the
// products of the low nibbles' values (elements 8t..8t+3) and the high ones' (8t+4..8t+7) with the row's
// activations. The K-quants pass their tiled activations (ap_tile_step: stride 8, a constant once inlined,
// so one pointer reaches every row; r0 a multiple of AP_ROW_TILE and R the tile's rows, as TILED below calls
// the tiles), the 32-blocks the rows of `q` (stride K)
AP_INLINE void step_rows_at(__m512i *part, __m512i q0, __m512i q1, const int8_t *x, size_t stride, int R) {
    for (int r = 0; r < R; r++) {
        part[r] = _mm512_dpbusd_epi32(part[r], q0, broadcast4(x + stride * r));
        part[r] = _mm512_dpbusd_epi32(part[r], q1, broadcast4(x + stride * r + 4));
    }
}

// step t of block b (`cols` columns) of the rows r0.. of `q`
AP_INLINE void step_rows(__m512i *part, __m512i q0, __m512i q1, const ap_act *a, int r0, int R, int cols, int b, int t) {
    step_rows_at(part, q0, q1, a->q + (size_t)r0 * a->K + cols * b + 8 * t, (size_t)a->K, R);
}

AP_INLINE void group_q4_1_tile(const uint8_t *group, const ap_act *a, int r0, int R, float *out) {
    const block_q4_1_g16 *g = (const block_q4_1_g16 *)group; const int nb = a->K / 32;
    __m512 acc[AP_ROW_TILE];
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    const __m512i low4 = _mm512_set1_epi8(15);
    for (int b = 0; b < nb; b++) {
        const block_q4_1_g16 *gb = &g[b];
        if (R >= ap_prefetch_min_rows) prefetch_stream(gb, sizeof(*gb));
        __m512i part[AP_ROW_TILE];
        for (int r = 0; r < R; r++) part[r] = _mm512_setzero_si512();
        #pragma GCC unroll 4
        for (int t = 0; t < 4; t++) {
            const __m512i packed = _mm512_loadu_si512(gb->qs[t]);
            const __m512i q0 = _mm512_and_si512(packed, low4), q1 = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low4);
            step_rows(part, q0, q1, a, r0, R, 32, b, t);
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)gb->d));
        const __m512 m = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)gb->m));
        for (int r = 0; r < R; r++) {
            const size_t at = (size_t)(r0 + r) * nb + b;
            const __m512 dx = _mm512_set1_ps(a->d[at]), sx = _mm512_set1_ps((float)a->s32[at]);
            acc[r] = _mm512_add_ps(acc[r], _mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(part[r])),
                                                         _mm512_mul_ps(_mm512_mul_ps(m, dx), sx)));
        }
    }
    for (int r = 0; r < R; r++) _mm512_storeu_ps(out + r * AP_GROUP, acc[r]);
}

// Q5_0: vpdpbusd of the values 0..31, then -16 x s32 (the offset) in int32: exact, as the definition
AP_INLINE void group_q5_0_tile(const uint8_t *group, const ap_act *a, int r0, int R, float *out) {
    const block_q5_0_g16 *g = (const block_q5_0_g16 *)group; const int nb = a->K / 32;
    __m512 acc[AP_ROW_TILE];
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    const __m512i low4 = _mm512_set1_epi8(15), one = _mm512_set1_epi8(1);
    for (int b = 0; b < nb; b++) {
        const block_q5_0_g16 *gb = &g[b];
        const __m512i qh = _mm512_loadu_si512(gb->qh);
        __m512i part[AP_ROW_TILE];
        for (int r = 0; r < R; r++) part[r] = _mm512_setzero_si512();
        #pragma GCC unroll 4
        for (int t = 0; t < 4; t++) {
            const __m512i packed = _mm512_loadu_si512(gb->qs[t]);
            const __m512i h0 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh, 2 * t), one), 4);
            const __m512i h1 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh, 2 * t + 1), one), 4);
            const __m512i q0 = _mm512_or_si512(_mm512_and_si512(packed, low4), h0);
            const __m512i q1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(packed, 4), low4), h1);
            step_rows(part, q0, q1, a, r0, R, 32, b, t);
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)gb->d));
        for (int r = 0; r < R; r++) {
            const size_t at = (size_t)(r0 + r) * nb + b;
            const __m512i offset = _mm512_set1_epi32(16 * (int)a->s32[at]);
            const __m512 dx = _mm512_set1_ps(a->d[at]);
            acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(_mm512_sub_epi32(part[r], offset))));
        }
    }
    for (int r = 0; r < R; r++) _mm512_storeu_ps(out + r * AP_GROUP, acc[r]);
}

// Q8_0 (the row layout's order, ap_common.h): step t's vpdpbusd gives lane t's 4-element sums of the 16
// rows; the stored offset comes off as 128 x (the 4 activations' sum), itself a vpdpbusd of 128s with the
// broadcast activation bytes (exact). Each step has its own float accumulator per row (8 per row, at
// most 2 rows in registers), reduced as ap_reduce8 at the end.
AP_INLINE void group_q8_0_rows(const block_q8_0_g16 *g, const ap_act *a, int r0, int R, float *out) {
    const int nb = a->K / 32;
    __m512 acc[2][8];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < 8; t++) acc[r][t] = _mm512_setzero_ps();
    const __m512i c128 = _mm512_set1_epi8((char)0x80), zero = _mm512_setzero_si512();
    for (int b = 0; b < nb; b++) {
        const block_q8_0_g16 *gb = &g[b];
        if (R >= ap_prefetch_min_rows) prefetch_stream(gb, sizeof(*gb));
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)gb->d));
        __m512 s[2];
        for (int r = 0; r < R; r++) s[r] = _mm512_mul_ps(d, _mm512_set1_ps(a->d[(size_t)(r0 + r) * nb + b]));
        #pragma GCC unroll 8
        for (int t = 0; t < 8; t++) {
            const __m512i w = _mm512_loadu_si512(gb->q[t]);
            for (int r = 0; r < R; r++) {
                const __m512i x = broadcast4(a->q + (size_t)(r0 + r) * a->K + 32 * b + 4 * t);
                const __m512i lane = _mm512_sub_epi32(_mm512_dpbusd_epi32(zero, w, x), _mm512_dpbusd_epi32(zero, c128, x));
                acc[r][t] = _mm512_add_ps(acc[r][t], _mm512_mul_ps(s[r], _mm512_cvtepi32_ps(lane)));
            }
        }
    }
    for (int r = 0; r < R; r++) {
        const __m512 b0 = _mm512_add_ps(acc[r][0], acc[r][4]), b1 = _mm512_add_ps(acc[r][1], acc[r][5]);
        const __m512 b2 = _mm512_add_ps(acc[r][2], acc[r][6]), b3 = _mm512_add_ps(acc[r][3], acc[r][7]);
        _mm512_storeu_ps(out + r * AP_GROUP, _mm512_add_ps(_mm512_add_ps(b0, b2), _mm512_add_ps(b1, b3)));
    }
}

// two activation rows at a time (the group's bytes are read from L1 again for the next two)
static void group_q8_0_avx512(const uint8_t *group, const ap_act *a, int r0, int R, float *out) {
    for (int done = 0; done < R; done += 2) {
        if (R - done >= 2) group_q8_0_rows((const block_q8_0_g16 *)group, a, r0 + done, 2, out + done * AP_GROUP);
        else group_q8_0_rows((const block_q8_0_g16 *)group, a, r0 + done, 1, out + done * AP_GROUP);
    }
}

// Q4_K, and Q5_K (`fifth`, a constant per caller: the fifth bits ORed in as Q5_0's, one 64-byte vector of
// them per sub-block)
AP_INLINE void group_k_tile(const uint8_t *group, int fifth, const ap_act *a, int r0, int R, float *out) {
    const int nb = a->K / 256;
    const size_t block_bytes = fifth ? sizeof(block_q5_K_g16) : sizeof(block_q4_K_g16);
    const int prefetch_rows = ap_prefetch_min_rows;
    __m512 acc[AP_ROW_TILE];
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    const __m512i low4 = _mm512_set1_epi8(15), one = _mm512_set1_epi8(1), low16 = _mm512_set1_epi32(0xffff);
    for (int b = 0; b < nb; b++) {
        const block_q4_K_g16 *gb = ap_k_block(group, fifth, b);
        const uint8_t (*fifth_bits)[4 * AP_GROUP] = ap_k_fifth_bits(group, fifth, b);
        __m512i isum[AP_ROW_TILE];
        for (int r = 0; r < R; r++) isum[r] = _mm512_setzero_si512();
        if (fifth && R >= prefetch_rows) prefetch_ahead(gb, block_bytes, 256);  // the header's fifth line (mn)
        for (int p = 0; p < 4; p++) {
            if (R >= prefetch_rows) prefetch_ahead(gb, block_bytes, 64 * p);  // d, dmin, sc, mn
            const __m512i pair = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)gb->sc[p]));
            for (int h = 0; h < 2; h++) {
                const int j = 2 * p + h;
                const __m512i scale = h ? _mm512_srli_epi32(pair, 16) : _mm512_and_si512(pair, low16);
                __m512i qh = _mm512_setzero_si512();
                if (fifth) {
                    if (R >= prefetch_rows) prefetch_ahead(gb, block_bytes, sizeof(block_q4_K_g16) + 64 * j);  // qh[j]
                    qh = _mm512_loadu_si512(fifth_bits[j]);
                }
                __m512i part[AP_ROW_TILE];
                for (int r = 0; r < R; r++) part[r] = _mm512_setzero_si512();
                // a constant trip count (not t = 4j..4j+3): GCC then unrolls the steps whole and keeps each row's
                // sum in one register, where the bounds in j made it a loop that moved every sum between two
                // registers each step (8 rows: 106 register moves in the function, 25 after)
                #pragma GCC unroll 4
                for (int s = 0; s < 4; s++) {
                    const int t = 4 * j + s;
                    if (R >= prefetch_rows) prefetch_ahead(gb, block_bytes, 320 + 64 * t);  // past d, dmin, sc, mn: qs
                    const __m512i packed = _mm512_loadu_si512(gb->qs[t]);
                    __m512i q0 = _mm512_and_si512(packed, low4), q1 = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low4);
                    if (fifth) {  // step t's bits are the low two of qh, shifted by 2 a step (constant shifts)
                        q0 = _mm512_or_si512(q0, _mm512_slli_epi16(_mm512_and_si512(qh, one), 4));
                        q1 = _mm512_or_si512(q1, _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh, 1), one), 4));
                        qh = _mm512_srli_epi16(qh, 2);
                    }
                    step_rows_at(part, q0, q1, ap_tile_step(a, r0, R, 32 * b + t), 8, R);
                }
                for (int r = 0; r < R; r++) isum[r] = _mm512_add_epi32(isum[r], _mm512_mullo_epi32(part[r], scale));
            }
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)gb->d));
        const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)gb->dmin));
        __m512i mins[4];  // the minimums' pairs widened once a super-block for every row
        for (int p = 0; p < 4; p++) mins[p] = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)gb->mn[p]));
        for (int r = 0; r < R; r++) {
            const size_t row = (size_t)(r0 + r);
            const int16_t *s32 = a->s32 + row * (a->K / 32) + 8 * b;
            __m512i msum = _mm512_setzero_si512();
            for (int p = 0; p < 4; p++) msum = _mm512_dpwssd_epi32(msum, mins[p], broadcast4((const int8_t *)(s32 + 2 * p)));
            const __m512 dx = _mm512_set1_ps(a->d[row * nb + b]);
            acc[r] = _mm512_add_ps(acc[r], _mm512_sub_ps(_mm512_mul_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(isum[r])),
                                                         _mm512_mul_ps(_mm512_mul_ps(dmin, dx), _mm512_cvtepi32_ps(msum))));
        }
    }
    for (int r = 0; r < R; r++) _mm512_storeu_ps(out + r * AP_GROUP, acc[r]);
}

// Q6_K, in bytes (block_q6_K_i8) or in its 6 bits (`bits`: block_q6_K_g16, a constant per caller): per group
// of 16 values the offset of 32 from the activations' sums of 16 (vpdpwssd with the scale pairs times -32), the
// values' products (vpdpbusd: block_q6_K_i8's q[t][0] and q[t][1] are loaded as they are multiplied; the
// 6-bit layout ORs the high 2 bits into the nibbles with constant shifts), times the group's scale
// (vpmulld); one float step per super-block. Both layouts put d and sc first (288 bytes).
AP_INLINE void group_q6_K_tile(const uint8_t *group, int bits, const ap_act *a, int r0, int R, float *out) {
    const int nb = a->K / 256;
    const size_t block_bytes = bits ? sizeof(block_q6_K_g16) : sizeof(block_q6_K_i8);
    const int prefetch_rows = ap_prefetch_min_rows;
    const __m512i low4 = _mm512_set1_epi8(15), three = _mm512_set1_epi8(3);
    __m512 acc[AP_ROW_TILE];
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const block_q6_K_i8 *g8 = (const block_q6_K_i8 *)group + b;
        const block_q6_K_g16 *g6 = (const block_q6_K_g16 *)group + b;
        const void *gb = bits ? (const void *)g6 : (const void *)g8;
        __m512i isum[AP_ROW_TILE];
        for (int r = 0; r < R; r++) isum[r] = _mm512_setzero_si512();
        for (int p = 0; p < 8; p++) {
            if (R >= prefetch_rows && p < 5) prefetch_ahead(gb, block_bytes, 64 * p);  // d and sc (288 bytes)
            const __m512i pair = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(bits ? g6->sc[p] : g8->sc[p])));
            // the offset of 32: -32 * (sc[2p] * s16[2p] + sc[2p+1] * s16[2p+1]), one vpdpwssd a row with the
            // scales times -32 (|-32 sc| <= 4096 fits int16; every product and sum is exact in int32, so the
            // same integers as subtracting the shifted sum)
            const __m512i pair_offset = _mm512_mullo_epi16(pair, _mm512_set1_epi16(-32));
            for (int r = 0; r < R; r++) {
                const int16_t *s16 = a->s16 + (size_t)(r0 + r) * (a->K / 16) + 16 * b + 2 * p;
                isum[r] = _mm512_dpwssd_epi32(isum[r], pair_offset, broadcast4((const int8_t *)s16));
            }
            for (int h = 0; h < 2; h++) {
                const int u = 2 * p + h;  // group u of 16 elements: steps t = 2u, 2u + 1
                const __m512i scale = h ? _mm512_srai_epi32(pair, 16) : _mm512_srai_epi32(_mm512_slli_epi32(pair, 16), 16);
                __m512i qh = _mm512_setzero_si512();
                if (bits) {
                    if (R >= prefetch_rows) prefetch_ahead(gb, block_bytes, 2336 + 64 * u);  // qh[u]
                    qh = _mm512_loadu_si512(g6->qh[u]);
                }
                __m512i part[AP_ROW_TILE];
                for (int r = 0; r < R; r++) part[r] = _mm512_setzero_si512();
                #pragma GCC unroll 2
                for (int k = 0; k < 2; k++) {
                    const int t = 2 * u + k;
                    __m512i q0, q1;
                    if (bits) {  // step t's high bits are the low four of qh, shifted by 4 a step
                        if (R >= prefetch_rows) prefetch_ahead(gb, block_bytes, 288 + 64 * t);  // qs[t]
                        const __m512i packed = _mm512_loadu_si512(g6->qs[t]);
                        q0 = _mm512_or_si512(_mm512_and_si512(packed, low4), _mm512_slli_epi16(_mm512_and_si512(qh, three), 4));
                        q1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(packed, 4), low4),
                                             _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh, 2), three), 4));
                        qh = _mm512_srli_epi16(qh, 4);
                    } else {
                        if (R >= prefetch_rows) {  // past d and sc: q[t]
                            prefetch_ahead(gb, block_bytes, 288 + 128 * t);
                            prefetch_ahead(gb, block_bytes, 288 + 128 * t + 64);
                        }
                        q0 = _mm512_loadu_si512(g8->q[t][0]), q1 = _mm512_loadu_si512(g8->q[t][1]);
                    }
                    step_rows_at(part, q0, q1, ap_tile_step(a, r0, R, 32 * b + t), 8, R);
                }
                for (int r = 0; r < R; r++) isum[r] = _mm512_add_epi32(isum[r], _mm512_mullo_epi32(part[r], scale));
            }
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(bits ? g6->d : g8->d)));
        for (int r = 0; r < R; r++) {
            const __m512 dx = _mm512_set1_ps(a->d[(size_t)(r0 + r) * nb + b]);
            acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(isum[r])));
        }
    }
    for (int r = 0; r < R; r++) _mm512_storeu_ps(out + r * AP_GROUP, acc[r]);
}

// the switch on R lets the compiler unroll each tile size (registers, not memory, hold the sums);
// more than 8 rows are done 8 at a time (each row's arithmetic is the same in any tile)
#define TILED(name, call)                                                                    \
    static void name##_tile(const uint8_t *group, const ap_act *a, int r0, int R, float *out) { \
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
    }                                                                                        \
    static void name(const uint8_t *group, const ap_act *a, int r0, int R, float *out) {    \
        for (int done = 0; done < R; done += AP_ROW_TILE)                                    \
            name##_tile(group, a, r0 + done, R - done < AP_ROW_TILE ? R - done : AP_ROW_TILE, out + done * AP_GROUP); \
    }
TILED(group_q4_1_avx512, group_q4_1_tile(group, a, r0, RR, out))
TILED(group_q5_0_avx512, group_q5_0_tile(group, a, r0, RR, out))
TILED(group_q4_K_avx512, group_k_tile(group, 0, a, r0, RR, out))
TILED(group_q5_K_avx512, group_k_tile(group, 1, a, r0, RR, out))
TILED(group_q6_K_g16_avx512, group_q6_K_tile(group, 1, a, r0, RR, out))
TILED(group_q6_K_i8_avx512, group_q6_K_tile(group, 0, a, r0, RR, out))

ap_group_fn ap_group_avx512(int type) {
    switch (type) {
        case AP_Q4_1_G16: return group_q4_1_avx512;
        case AP_Q5_0_G16: return group_q5_0_avx512;
        case AP_Q8_0_G16: return group_q8_0_avx512;
        case AP_Q4_K_G16: return group_q4_K_avx512;
        case AP_Q5_K_G16: return group_q5_K_avx512;
        case AP_Q6_K_G16: return group_q6_K_g16_avx512;
        case AP_Q6_K_I8: return group_q6_K_i8_avx512;
        default: return NULL;
    }
}

#else
ap_group_fn ap_group_avx512(int type) { (void)type; return NULL; }
#endif
