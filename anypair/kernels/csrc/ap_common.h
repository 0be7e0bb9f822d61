// Shared definitions of anypair's quantized CPU kernels: GGUF block layouts, the K-quants'
// interleaved layout, the activation format, and the fixed reduction orders every path (scalar
// reference, AVX2, AVX-512) follows.
//
// Batch invariance is the point of these kernels. Every output y[r][n] is the dot product of
// weight row n and activation row r, computed by arithmetic that does not depend on how many rows
// are in the call or on which thread runs it: integer partial sums are exact, and the float steps
// happen in a fixed order. The scalar reference mirrors that order, so the SIMD paths and the
// reference agree bitwise, which tests/test_quant_kernels.py checks on real GGUF blocks.
//
// Two orders exist:
// - Q4_0, Q8_0 and float weights (Q4_0 and floats in the file's row layout): 8 float lanes, lane i
//   owns bytes 4i..4i+3 of each 32-element chunk, then one fixed reduction tree (ap_reduce8).
// - K-quants (Q4_K, Q5_K, Q6_K), Q4_1 and Q5_0 (interleaved layout, 16 weight rows per group): one float
//   accumulator per (weight row, activation row), one step per block (256 elements for the K-quants,
//   32 for Q4_1 and Q5_0), see AP_Q4_K_G16, AP_Q5_K_G16, AP_Q4_1_G16 and AP_Q5_0_G16 below. Q8_0 is stored
//   interleaved too (AP_Q8_0_G16) but keeps the first order, per weight row.
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
    AP_Q4_K = 12, AP_Q5_K = 13, AP_Q6_K = 14,
    // anypair's interleaved layouts (not ggml types): what ap_repack makes of Q4_1 / Q5_0 / Q8_0 / Q4_K / Q5_K /
    // Q6_K rows
    AP_Q4_1_G16 = 103, AP_Q5_0_G16 = 106, AP_Q8_0_G16 = 108, AP_Q4_K_G16 = 112, AP_Q5_K_G16 = 113,
    // Q6_K in its 6 bits (block_q6_K_g16), or widened to one byte per value (block_q6_K_i8): the CPU decides
    // (ap_set_q6k_layout); both give the same bits
    AP_Q6_K_G16 = 114, AP_Q6_K_I8 = 115,
};

// GGUF blocks, byte for byte (ggml-common.h defines the same layouts)
typedef struct { uint16_t d; uint8_t qs[16]; } block_q4_0;                        // 18 B / 32
typedef struct { uint16_t d, m; uint8_t qs[16]; } block_q4_1;                     // 20 B / 32
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; } block_q5_0;         // 22 B / 32
typedef struct { uint16_t d; int8_t qs[32]; } block_q8_0;                         // 34 B / 32
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; } block_q4_K;   // 144 B / 256
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; } block_q5_K;  // 176 B / 256
typedef struct { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; } block_q6_K;  // 210 B / 256

// ---- the interleaved K-quant layout (llama.cpp's "repack" idea, with a bitwise order) ----------
// 16 consecutive weight rows form a group; per super-block (256 columns) a group's 16 rows are stored
// together so that one 64-byte vector holds 4 values of each of the 16 rows (lane l = row n0 + l).
// A kernel broadcasts 4 activation bytes and multiplies all 16 rows at once (VNNI vpdpbusd, or
// maddubs + madd on AVX2), and the per-super-block float steps are shared by the 16 rows.
// Rows past N in the last group are zero blocks (d = 0): computed, never written out.
//
// The definition (every path, any number of activation rows): for weight row n, activation row r,
//   acc = 0; for each super-block b in order:
//     Q4_K, Q5_K: isum = sum_j sc[j] * (sum_{i in sub-block j} q_i * x_i)  (exact int, q_i in 0..15 / 0..31)
//           msum = sum_j mn[j] * s32[j]                                  (exact int)
//           acc  = acc + ((d * dx) * (float)isum - (dmin * dx) * (float)msum)
//     Q6_K: isum = sum_g sc[g] * (sum_{i in group g of 16} (q_i - 32) * x_i)   (exact int)
//           acc  = acc + (d * dx) * (float)isum
//   y = acc
// with d, dmin the block's fp16 scales as float, dx the activation row's scale for block b.
#define AP_GROUP 16
// nibble byte for 4-element step t (elements 8t..8t+7 of a super-block) and lane l, e = 0..3:
//   qs[t][4l + e] = q(8t + e) | q(8t + 4 + e) << 4
typedef struct {
    uint16_t d[AP_GROUP], dmin[AP_GROUP];
    uint8_t sc[4][AP_GROUP][2];  // (sc[2p], sc[2p+1]) of lane l at [p][l]: int16 pairs once widened
    uint8_t mn[4][AP_GROUP][2];  // the minimums likewise (for vpdpwssd against pairs of s32)
    uint8_t qs[32][4 * AP_GROUP];
} block_q4_K_g16;  // 2368 B per 16 rows (16 x 144 = 2304 in the file)
// Q5_K (llama.cpp's Q4_K_M writes Phi-3's fused attn_qkv in it; every matrix of a Q5_K_M file): Q4_K's
// group block of the low 4 bits, then the fifth bits, as Q5_0's: bit 2(t % 4) + s of qh[t / 4][4l + e] is
// the high bit of element 8t + 4s + e of lane l, so sub-block j (steps 4j..4j+3) takes one 64-byte vector
// of them. The definition is Q4_K's with q_i in 0..31; one kernel per path serves both (`fifth`).
typedef struct {
    block_q4_K_g16 k4;
    uint8_t qh[8][4 * AP_GROUP];
} block_q5_K_g16;  // 2880 B per 16 rows (16 x 176 = 2816 in the file)
// Q6_K with its values widened to bytes (0..63, offset not applied), 16 rows per group as above:
//   q[t][s][4l + e] = value of element 8t + 4s + e of lane l   (t = 0..31, s = 0..1, e = 0..3)
// 30% more bytes than the file's 6 bits (4384 B against 3360 per 16 rows and super-block), but
// nothing to unpack: q[t][0] and q[t][1] are the very vectors the multiply takes. One layout for every
// build, because unpacking 6-bit values costs more than the extra bytes wherever it was measured:
// AVX2 on 2 Zen 3 threads, 8 GB/s for a 6-bit interleaved layout against 11-13 for Q4_K and 15-20 for a
// plain read; AVX-512 VNNI on 2 Zen 4 threads (51 GB/s read), the 151,936-row head of Qwen2.5-1.5B
// 7.5-8.0 ms against 10.5 and a 4-token step 50-52 ms against 60-62.
typedef struct {
    uint16_t d[AP_GROUP];
    int8_t sc[8][AP_GROUP][2];   // (sc[2p], sc[2p+1]) of lane l at [p][l]
    uint8_t q[32][2][4 * AP_GROUP];
} block_q6_K_i8;  // 4384 B per 16 rows (3360 in the file)
// Q6_K in its own 6 bits, 16 rows per group: the low 4 bits as Q4_K's nibbles, the high 2 in a plane beside
// them, unpacked with constant shifts as Q5_K's fifth bits are:
//   qs[t][4l + e] = (q(8t + e) & 15) | (q(8t + 4 + e) & 15) << 4
//   bits 4(t % 2) + 2s, + 1 of qh[t / 2][4l + e] = q(8t + 4s + e) >> 4     (t = 0..31, s = 0..1, e = 0..3)
// The file's size. Where a step is bound by the read rate it beats the byte layout (an Intel Xeon, 2
// threads, AVX-512 VNNI: 0.69-0.87x its time at 1 to 8 rows); where unpacking is the bound it loses (Zen 4,
// AVX2), so the CPU picks one (ap_set_q6k_layout, kernels/build.py). The definition is the one above:
// the two layouts give the same bits.
typedef struct {
    uint16_t d[AP_GROUP];
    int8_t sc[8][AP_GROUP][2];   // as block_q6_K_i8's
    uint8_t qs[32][4 * AP_GROUP];
    uint8_t qh[16][4 * AP_GROUP];
} block_q6_K_g16;  // 3360 B per 16 rows, as in the file

// Q4_1 (the blocks of small drafts such as SmolLM2's Q4_1 GGUF), the same arrangement per 32-element
// block: 4 steps of 8 elements, qs[t][4l + e] = q(8t + e) | q(8t + 4 + e) << 4 (q in 0..15). The
// definition: acc = 0; for each block b in order:
//           isum = sum_{i < 32} q_i * x_i                                   (exact int)
//           acc  = acc + ((d * dx) * (float)isum + (m * dx) * (float)s32)
// with d, m the block's fp16 scale and minimum as float, dx and s32 the activation row's scale and
// int sum for block b.
typedef struct {
    uint16_t d[AP_GROUP], m[AP_GROUP];
    uint8_t qs[4][4 * AP_GROUP];
} block_q4_1_g16;  // 320 B per 16 rows, as in the file

// Q5_0 (the blocks of Qwen2.5-0.5B's and Gemma-3's Q4_K_M files, whose 896- and 640-wide matrices
// cannot hold 256-element K-quant blocks): the low 4 bits as Q4_1's qs, the fifth bits in one byte
// per (lane, e): bit 2t + s of qh[4l + e] is the high bit of element 8t + 4s + e (t = 0..3, s = 0..1).
// The definition: acc = 0; for each block b in order:
//           isum = sum_{i < 32} (q_i - 16) * x_i                            (exact int, q_i in 0..31)
//           acc  = acc + (d * dx) * (float)isum
// with d the block's fp16 scale as float and dx the activation row's scale for block b.
typedef struct {
    uint16_t d[AP_GROUP];
    uint8_t qh[4 * AP_GROUP];
    uint8_t qs[4][4 * AP_GROUP];
} block_q5_0_g16;  // 352 B per 16 rows, as in the file

// Q8_0 (the tied head of small drafts such as SmolLM2's, and Q8_0 files): the values offset by 128 into
// unsigned bytes, so that VNNI's vpdpbusd (unsigned x signed) multiplies them as they are stored:
//   q[t][4l + e] = (value of element 4t + e of lane l) + 128      (t = 0..7, e = 0..3)
// The definition is the row layout's (the first order above), so a Q8_0 model's numbers are those of
// the file read row by row: per weight row 8 float lanes, lane t owning elements 4t..4t+3 of each block;
// for each block b in order: acc[t] = acc[t] + (d * dx) * (float)(sum_{e < 4} q_{4t+e} * x_{4t+e})
// (exact int, q in -128..127), then y = ap_reduce8(acc). Step t of a group is lane t of 16 rows at once.
typedef struct {
    uint16_t d[AP_GROUP];
    uint8_t q[8][4 * AP_GROUP];
} block_q8_0_g16;  // 544 B per 16 rows, as in the file

static inline int ap_is_grouped(int type) {
    return type == AP_Q4_1_G16 || type == AP_Q5_0_G16 || type == AP_Q8_0_G16 || type == AP_Q4_K_G16
        || type == AP_Q5_K_G16 || type == AP_Q6_K_G16 || type == AP_Q6_K_I8;
}
static inline size_t ap_group_bytes(int type) {  // one group's block (super-block for the K-quants)
    return type == AP_Q4_1_G16 ? sizeof(block_q4_1_g16) : type == AP_Q5_0_G16 ? sizeof(block_q5_0_g16)
         : type == AP_Q8_0_G16 ? sizeof(block_q8_0_g16)
         : type == AP_Q4_K_G16 ? sizeof(block_q4_K_g16) : type == AP_Q5_K_G16 ? sizeof(block_q5_K_g16)
         : type == AP_Q6_K_G16 ? sizeof(block_q6_K_g16) : sizeof(block_q6_K_i8);
}
static inline int ap_group_cols(int type) {  // columns one group block covers
    return type == AP_Q4_1_G16 || type == AP_Q5_0_G16 || type == AP_Q8_0_G16 ? 32 : 256;
}

// Activation rows quantized for the integer dot products: per row, per block of `block` elements
// (256 for the K-quants, 32 for the others) a scale d = amax/127 and int8 values round(x/d), with
// the int sums of every 16 and every 32 values (for the weights' offsets and minimums). Float weights
// (F32/F16) read the float rows `x` instead.
typedef struct {
    int M, K, block;
    const int8_t *q;      // [M][K]
    const float *d;       // [M][K/block]
    const int16_t *s16;   // [M][K/16]
    const int16_t *s32;   // [M][K/32]
    const float *x;       // [M][K]
    const int8_t *qt;     // q again, by tiles of AP_ROW_TILE rows (ap_tile_step), for the AVX-512 K-quant kernels only
} ap_act;

// The K-quant activations laid out for the AVX-512 group kernels: the rows r0..r0+R-1 of a tile (r0 a
// multiple of AP_ROW_TILE, R = min(AP_ROW_TILE, M - r0)) as K/8 steps of 8 bytes, every row's step s
// beside the others' (qt[r0 K + (s R + r) 8 + e] = q[(r0 + r) K + 8 s + e]): one pointer reaches every
// row of a step. With 8 rows apart the kernels ran out of integer registers for the rows' addresses
// (GCC kept them in vector registers and on the stack); the same bytes, so the same products.
static inline const int8_t *ap_tile_step(const ap_act *a, int r0, int R, int s) {
    return a->qt + (size_t)r0 * a->K + (size_t)s * R * 8;
}

// One weight matrix [N][K]: in its GGUF type, rows contiguous (row_bytes each), or for the
// K-quants in the interleaved layout (type AP_Q4_K_G16 / AP_Q5_K_G16 / AP_Q6_K_G16 / AP_Q6_K_I8: groups of 16 rows, each
// K/256 group super-blocks; row_bytes is then the GGUF row's size, for reference).
typedef struct {
    int type, N, K;
    size_t row_bytes;
    const uint8_t *data;
    const float *bias;  // [N] or NULL
} ap_weight;

// up to this many activation rows share one pass over a weight row (registers hold their sums):
// every path's dot function takes R = 1..AP_ROW_TILE rows (the AVX2 path in register tiles of 4)
#define AP_ROW_TILE 8
// activation rows one call of a group function takes (each path tiles them in registers as it can):
// a group's weights are read from memory once per this many rows
#define AP_GROUP_ROW_TILE 64

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
// interleaved types: one group of 16 weight rows with R activation rows; out[R][AP_GROUP]
typedef void (*ap_group_fn)(const uint8_t *group, const ap_act *a, int r0, int R, float *out);

// the reference (portable C) and, where compiled, the AVX2 and AVX-512 (VNNI) versions; NULL when
// a type has none (the AVX-512 path covers the interleaved K-quants; other types use AVX2)
ap_dot_fn ap_dot_ref(int type);
ap_dot_fn ap_dot_avx2(int type);
ap_group_fn ap_group_ref(int type);
ap_group_fn ap_group_avx2(int type);
ap_group_fn ap_group_avx512(int type);
int ap_act_block(int type);  // 256 / 32 / 0 (float rows)

// value of element e (0..255) of lane l in a group super-block: Q4_K 0..15, Q5_K 0..31, Q6_K 0..63 (offset not applied)
static inline int ap_q4k_g16_value(const block_q4_K_g16 *g, int l, int e) {
    const uint8_t byte = g->qs[e / 8][4 * l + e % 4];
    return (e % 8) < 4 ? (byte & 15) : (byte >> 4);
}
static inline int ap_q5k_g16_value(const block_q5_K_g16 *g, int l, int e) {  // 0..31
    const int high = (g->qh[e / 32][4 * l + e % 4] >> (2 * ((e / 8) % 4) + (e % 8) / 4)) & 1;
    return ap_q4k_g16_value(&g->k4, l, e) | (high << 4);
}
// Q4_K's or Q5_K's block b of a group: the Q4_K part, and the fifth bits (NULL for Q4_K)
static inline const block_q4_K_g16 *ap_k_block(const uint8_t *group, int fifth, int b) {
    return fifth ? &((const block_q5_K_g16 *)group)[b].k4 : &((const block_q4_K_g16 *)group)[b];
}
static inline const uint8_t (*ap_k_fifth_bits(const uint8_t *group, int fifth, int b))[4 * AP_GROUP] {
    return fifth ? ((const block_q5_K_g16 *)group)[b].qh : NULL;
}
static inline int ap_k_value(const uint8_t *group, int fifth, int b, int l, int e) {  // 0..15 or 0..31
    return fifth ? ap_q5k_g16_value((const block_q5_K_g16 *)group + b, l, e)
                 : ap_q4k_g16_value((const block_q4_K_g16 *)group + b, l, e);
}
static inline int ap_q4_1_g16_value(const block_q4_1_g16 *g, int l, int e) {  // e = 0..31
    const uint8_t byte = g->qs[e / 8][4 * l + e % 4];
    return (e % 8) < 4 ? (byte & 15) : (byte >> 4);
}
static inline int ap_q5_0_g16_value(const block_q5_0_g16 *g, int l, int e) {  // e = 0..31, 0..31 (offset not applied)
    const uint8_t byte = g->qs[e / 8][4 * l + e % 4];
    const int high = (g->qh[4 * l + e % 4] >> (2 * (e / 8) + (e % 8) / 4)) & 1;
    return ((e % 8) < 4 ? (byte & 15) : (byte >> 4)) | (high << 4);
}
static inline int ap_q8_0_g16_value(const block_q8_0_g16 *g, int l, int e) {  // e = 0..31, -128..127
    return (int)g->q[e / 4][4 * l + e % 4] - 128;
}
static inline int ap_q6k_i8_value(const block_q6_K_i8 *g, int l, int e) {
    return g->q[e / 8][(e % 8) / 4][4 * l + e % 4];
}
static inline int ap_q6k_g16_value(const block_q6_K_g16 *g, int l, int e) {
    const int t = e / 8, s = (e % 8) / 4;
    const uint8_t byte = g->qs[t][4 * l + e % 4];
    const int high = (g->qh[t / 2][4 * l + e % 4] >> (4 * (t % 2) + 2 * s)) & 3;
    return (s ? byte >> 4 : byte & 15) | (high << 4);
}
// Q6_K's block b of a group in either layout (`bits`: block_q6_K_g16, else block_q6_K_i8): its scales d,
// its group scales sc and its values 0..63
static inline const uint16_t *ap_q6k_d(const uint8_t *group, int bits, int b) {
    return bits ? ((const block_q6_K_g16 *)group)[b].d : ((const block_q6_K_i8 *)group)[b].d;
}
static inline const int8_t (*ap_q6k_sc(const uint8_t *group, int bits, int b))[AP_GROUP][2] {
    return bits ? ((const block_q6_K_g16 *)group)[b].sc : ((const block_q6_K_i8 *)group)[b].sc;
}
static inline int ap_q6k_value(const uint8_t *group, int bits, int b, int l, int e) {
    return bits ? ap_q6k_g16_value((const block_q6_K_g16 *)group + b, l, e)
                : ap_q6k_i8_value((const block_q6_K_i8 *)group + b, l, e);
}

void ap_quantize_rows_ref(const float *x, int M, int K, int block, int8_t *q, float *d, int16_t *s16, int16_t *s32);
void ap_quantize_rows_avx2(const float *x, int M, int K, int block, int8_t *q, float *d, int16_t *s16, int16_t *s32);

#endif
