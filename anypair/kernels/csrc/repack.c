// The interleaved layouts (ap_common.h: block_q4_1_g16, block_q5_0_g16, block_q8_0_g16, block_q4_K_g16,
// block_q5_K_g16, block_q6_K_g16, block_q6_K_i8): made once
// at load from the GGUF's rows, and read back per row for the embedding gather and the tests.
//
// Only the arrangement changes: every value, scale and minimum is the file's, so the products are
// those of the GGUF weights. Groups are independent, so the repack runs on all threads.
#include <omp.h>
#include <stdlib.h>

#include "ap_api.h"

// Q6_K's layout on this CPU (ap_common.h, block_q6_K_g16 says why it is a choice); the load sets it once
// (kernels/build.py), before any matrix is repacked, and the tests switch it to compare the two
static int q6k_layout = AP_Q6_K_I8;
int ap_set_q6k_layout(int type) {
    if (type != AP_Q6_K_I8 && type != AP_Q6_K_G16) return -1;
    q6k_layout = type;
    return 0;
}

static int grouped_type(int ggml_type) {
    return ggml_type == AP_Q4_K ? AP_Q4_K_G16 : ggml_type == AP_Q5_K ? AP_Q5_K_G16 : ggml_type == AP_Q6_K ? q6k_layout
         : ggml_type == AP_Q4_1 ? AP_Q4_1_G16 : ggml_type == AP_Q5_0 ? AP_Q5_0_G16
         : ggml_type == AP_Q8_0 ? AP_Q8_0_G16 : -1;
}

// bytes of the interleaved copy of an [N][K] matrix of `ggml_type` (0 when it has none)
size_t ap_packed_bytes(int ggml_type, int N, int K) {
    const int type = grouped_type(ggml_type);
    if (type < 0 || N <= 0 || K <= 0 || K % ap_group_cols(type)) return 0;
    return (size_t)((N + AP_GROUP - 1) / AP_GROUP) * (size_t)(K / ap_group_cols(type)) * ap_group_bytes(type);
}

// one row's 8 * steps values of a block into the group's interleaved bytes (low 4 bits)
static void scatter_nibbles(const uint8_t *v, int steps, int l, uint8_t (*qs)[4 * AP_GROUP]) {
    for (int t = 0; t < steps; t++)
        for (int e = 0; e < 4; e++) qs[t][4 * l + e] = (uint8_t)((v[8 * t + e] & 15) | ((v[8 * t + 4 + e] & 15) << 4));
}

// lane l of a Q4_K group block: the block's scales and minimums
static void pack_k_scales(uint16_t d, uint16_t dmin, const uint8_t scales[12], int l, block_q4_K_g16 *g) {
    uint8_t sc[8], mn[8];
    ap_q4k_scales(scales, sc, mn);
    g->d[l] = d; g->dmin[l] = dmin;
    for (int j = 0; j < 8; j++) { g->sc[j / 2][l][j % 2] = sc[j]; g->mn[j / 2][l][j % 2] = mn[j]; }
}

static void pack_q4_1(const block_q4_1 *rows[AP_GROUP], int b, block_q4_1_g16 *g) {
    memset(g, 0, sizeof(*g));
    for (int l = 0; l < AP_GROUP; l++) {
        if (!rows[l]) continue;  // past N: zero block
        const block_q4_1 *blk = &rows[l][b];
        uint8_t v[32];
        for (int e = 0; e < 16; e++) { v[e] = blk->qs[e] & 15; v[e + 16] = blk->qs[e] >> 4; }
        g->d[l] = blk->d; g->m[l] = blk->m;
        scatter_nibbles(v, 4, l, g->qs);
    }
}

static void pack_q5_0(const block_q5_0 *rows[AP_GROUP], int b, block_q5_0_g16 *g) {
    memset(g, 0, sizeof(*g));
    for (int l = 0; l < AP_GROUP; l++) {
        if (!rows[l]) continue;  // past N: zero block
        const block_q5_0 *blk = &rows[l][b];
        uint32_t qh; memcpy(&qh, blk->qh, 4);
        uint8_t v[32];  // 0..31: element e's nibble from qs, its fifth bit from bit e of qh
        for (int e = 0; e < 16; e++) {
            v[e] = (uint8_t)((blk->qs[e] & 15) | (((qh >> e) & 1) << 4));
            v[e + 16] = (uint8_t)((blk->qs[e] >> 4) | (((qh >> (e + 16)) & 1) << 4));
        }
        g->d[l] = blk->d;
        scatter_nibbles(v, 4, l, g->qs);
        for (int e = 0; e < 4; e++)
            for (int t = 0; t < 4; t++)
                for (int s = 0; s < 2; s++) g->qh[4 * l + e] |= (uint8_t)((v[8 * t + 4 * s + e] >> 4) << (2 * t + s));
    }
}

static void pack_q8_0(const block_q8_0 *rows[AP_GROUP], int b, block_q8_0_g16 *g) {
    memset(g, 0, sizeof(*g));
    for (int l = 0; l < AP_GROUP; l++) {
        if (!rows[l]) { for (int t = 0; t < 8; t++) memset(&g->q[t][4 * l], 128, 4); continue; }  // past N: zeros
        const block_q8_0 *blk = &rows[l][b];
        g->d[l] = blk->d;
        for (int e = 0; e < 32; e++) g->q[e / 4][4 * l + e % 4] = (uint8_t)(blk->qs[e] + 128);
    }
}

static void q6_K_values(const block_q6_K *blk, uint8_t v[256]) {  // 0..63, offset not applied
    for (int n = 0; n < 2; n++) {
        const uint8_t *ql = blk->ql + 64 * n, *qh = blk->qh + 32 * n;
        uint8_t *y = v + 128 * n;
        for (int l = 0; l < 32; l++) {
            y[l] = (uint8_t)((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4));
            y[l + 32] = (uint8_t)((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4));
            y[l + 64] = (uint8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
            y[l + 96] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
        }
    }
}

// ---- the K-quants: the byte loops (the reference) and the same bytes a word at a time (what a load runs) ----
// The reference unpacks every value of a lane into a byte and scatters it; the word-at-a-time lanes read
// the file's bytes 8 at a time and write a lane's 4 bytes of each step at once (the first load of a 7-9B
// file spent most of its time in the byte loops). `ap_repack_reference` runs the reference; the tests
// compare the two byte for byte on every type and layout. A group's block, its zeroed padding and each
// lane's scales are written once per type, whichever writes the values.

static inline uint64_t load8(const uint8_t *p) { uint64_t x; memcpy(&x, p, 8); return x; }
static inline void or4(uint8_t *p, uint32_t w) { uint32_t o; memcpy(&o, p, 4); o |= w; memcpy(p, &o, 4); }
static inline void put4(uint8_t *p, uint32_t w) { memcpy(p, &w, 4); }

// bytes 0..3 of x as a, 4..7 as b: the step's bytes a | b << 4 of their low nibbles, or of their high ones
static inline uint32_t nibble_word(uint64_t x, int high) {
    return high ? (uint32_t)(((x >> 4) & 0x0F0F0F0Fu) | ((x >> 32) & 0xF0F0F0F0u))
                : (uint32_t)((x & 0x0F0F0F0Fu) | (((x >> 32) & 0x0F0F0F0Fu) << 4));
}

// Q4_K's values: element 64c + i (i < 32) is the low nibble of qs[32c + i], 64c + 32 + i its high
// nibble, so step t = 8c + u takes qs[32c + 8(u % 4) ...] 8 bytes at a time, high nibbles from u = 4
static void k_nibbles(const uint8_t qs[128], int l, uint8_t (*out)[4 * AP_GROUP]) {
    for (int t = 0; t < 32; t++) put4(&out[t][4 * l], nibble_word(load8(qs + 32 * (t / 8) + 8 * (t % 4)), t % 8 >= 4));
}

static void q4_K_lane_ref(const block_q4_K *blk, int l, block_q4_K_g16 *g) {
    uint8_t v[256];
    for (int c = 0; c < 4; c++)  // 32 bytes: sub-block 2c in the low nibbles, 2c+1 in the high
        for (int i = 0; i < 32; i++) { v[64 * c + i] = blk->qs[32 * c + i] & 15; v[64 * c + 32 + i] = blk->qs[32 * c + i] >> 4; }
    scatter_nibbles(v, 32, l, g->qs);
}

static void pack_q4_K(const block_q4_K *rows[AP_GROUP], int b, block_q4_K_g16 *g, int reference) {
    memset(g, 0, sizeof(*g));
    for (int l = 0; l < AP_GROUP; l++) {
        if (!rows[l]) continue;  // past N: zero block
        const block_q4_K *blk = &rows[l][b];
        pack_k_scales(blk->d, blk->dmin, blk->scales, l, g);
        if (reference) q4_K_lane_ref(blk, l, g);
        else k_nibbles(blk->qs, l, g->qs);
    }
}

// Q5_K: ggml's element 64c + i has its low bits in the low nibble of qs[32c + i] and its fifth in bit 2c of
// qh[i]; element 64c + 32 + i the high nibble and bit 2c + 1 (dequantize_row_q5_K)
static void q5_K_lane_ref(const block_q5_K *blk, int l, block_q5_K_g16 *g) {
    uint8_t v[256];
    for (int c = 0; c < 4; c++)
        for (int i = 0; i < 32; i++) {
            v[64 * c + i] = (uint8_t)((blk->qs[32 * c + i] & 15) | (((blk->qh[i] >> (2 * c)) & 1) << 4));
            v[64 * c + 32 + i] = (uint8_t)((blk->qs[32 * c + i] >> 4) | (((blk->qh[i] >> (2 * c + 1)) & 1) << 4));
        }
    scatter_nibbles(v, 32, l, g->k4.qs);
    for (int t = 0; t < 32; t++)
        for (int s = 0; s < 2; s++)
            for (int e = 0; e < 4; e++)
                g->qh[t / 4][4 * l + e] |= (uint8_t)((v[8 * t + 4 * s + e] >> 4) << (2 * (t % 4) + s));
}

// a word at a time: the fifth bit of step t's element 8t + 4s + e is bit 2c + (u >= 4) of qh[8(u % 4) + 4s + e]
static void q5_K_lane_words(const block_q5_K *blk, int l, block_q5_K_g16 *g) {
    k_nibbles(blk->qs, l, g->k4.qs);
    for (int t = 0; t < 32; t++) {
        const uint64_t h = (load8(blk->qh + 8 * (t % 4)) >> (2 * (t / 8) + (t % 8 >= 4))) & 0x0101010101010101u;
        or4(&g->qh[t / 4][4 * l], ((uint32_t)h | (uint32_t)(h >> 32) << 1) << (2 * (t % 4)));
    }
}

static void pack_q5_K(const block_q5_K *rows[AP_GROUP], int b, block_q5_K_g16 *g, int reference) {
    memset(g, 0, sizeof(*g));
    for (int l = 0; l < AP_GROUP; l++) {
        if (!rows[l]) continue;  // past N: zero block
        const block_q5_K *blk = &rows[l][b];
        pack_k_scales(blk->d, blk->dmin, blk->scales, l, &g->k4);
        if (reference) q5_K_lane_ref(blk, l, g);
        else q5_K_lane_words(blk, l, g);
    }
}

// Q6_K into either layout (`bits`: block_q6_K_g16, else block_q6_K_i8)
static void q6_K_lane_ref(const block_q6_K *blk, int l, uint8_t *dst, int bits) {
    uint8_t v[256];
    q6_K_values(blk, v);
    if (!bits) {
        block_q6_K_i8 *g8 = (block_q6_K_i8 *)dst;
        for (int e = 0; e < 256; e++) g8->q[e / 8][(e % 8) / 4][4 * l + e % 4] = v[e];
        return;
    }
    block_q6_K_g16 *g6 = (block_q6_K_g16 *)dst;
    scatter_nibbles(v, 32, l, g6->qs);
    for (int t = 0; t < 32; t++)
        for (int s = 0; s < 2; s++)
            for (int e = 0; e < 4; e++)
                g6->qh[t / 2][4 * l + e] |= (uint8_t)((v[8 * t + 4 * s + e] >> 4) << (4 * (t % 2) + 2 * s));
}

// a word at a time: step t = 16n + 4q + u holds elements 128n + 32q + 8u + (0..7) (q6_K_values): their low
// 4 bits are the low (q < 2) or high nibbles of ql[64n + 32(q % 2) + 8u ...], their high 2 bits
// (qh[32n + 8u ...] >> 2q) & 3
static void q6_K_lane_words(const block_q6_K *blk, int l, uint8_t *dst, int bits) {
    block_q6_K_g16 *g6 = (block_q6_K_g16 *)dst;
    block_q6_K_i8 *g8 = (block_q6_K_i8 *)dst;
    for (int t = 0; t < 32; t++) {
        const int n = t / 16, q = (t / 4) % 4, u = t % 4;
        const uint64_t x = load8(blk->ql + 64 * n + 32 * (q % 2) + 8 * u);
        const uint64_t h = (load8(blk->qh + 32 * n + 8 * u) >> (2 * q)) & 0x0303030303030303u;
        if (bits) {
            put4(&g6->qs[t][4 * l], nibble_word(x, q >= 2));
            or4(&g6->qh[t / 2][4 * l], ((uint32_t)h | (uint32_t)(h >> 32) << 2) << (4 * (t % 2)));
        } else {
            const uint64_t lows = (q >= 2 ? x >> 4 : x) & 0x0F0F0F0F0F0F0F0Fu;
            put4(&g8->q[t][0][4 * l], (uint32_t)lows | (uint32_t)h << 4);
            put4(&g8->q[t][1][4 * l], (uint32_t)(lows >> 32) | (uint32_t)(h >> 32) << 4);
        }
    }
}

// both layouts start with d and sc
static void pack_q6_K(const block_q6_K *rows[AP_GROUP], int b, uint8_t *dst, int bits, int reference) {
    memset(dst, 0, bits ? sizeof(block_q6_K_g16) : sizeof(block_q6_K_i8));
    uint16_t *d = bits ? ((block_q6_K_g16 *)dst)->d : ((block_q6_K_i8 *)dst)->d;
    int8_t (*sc)[AP_GROUP][2] = bits ? ((block_q6_K_g16 *)dst)->sc : ((block_q6_K_i8 *)dst)->sc;
    for (int l = 0; l < AP_GROUP; l++) {
        if (!rows[l]) continue;  // past N: zero block
        const block_q6_K *blk = &rows[l][b];
        d[l] = blk->d;
        for (int j = 0; j < 16; j++) sc[j / 2][l][j % 2] = blk->scales[j];
        if (reference) q6_K_lane_ref(blk, l, dst, bits);
        else q6_K_lane_words(blk, l, dst, bits);
    }
}

// group `grp` of 16 rows, its nb blocks
static void repack_group(int type, const uint8_t *rows, size_t row_bytes, int N, int nb, int grp, uint8_t *out,
                         int reference) {
    const void *members[AP_GROUP];
    for (int l = 0; l < AP_GROUP; l++) {
        const int n = grp * AP_GROUP + l;
        members[l] = n < N ? rows + row_bytes * (size_t)n : NULL;
    }
    const size_t gbytes = ap_group_bytes(type);
    for (int b = 0; b < nb; b++) {
        uint8_t *dst = out + ((size_t)grp * nb + b) * gbytes;
        if (type == AP_Q4_1_G16) pack_q4_1((const block_q4_1 **)members, b, (block_q4_1_g16 *)dst);
        else if (type == AP_Q5_0_G16) pack_q5_0((const block_q5_0 **)members, b, (block_q5_0_g16 *)dst);
        else if (type == AP_Q8_0_G16) pack_q8_0((const block_q8_0 **)members, b, (block_q8_0_g16 *)dst);
        else if (type == AP_Q4_K_G16) pack_q4_K((const block_q4_K **)members, b, (block_q4_K_g16 *)dst, reference);
        else if (type == AP_Q5_K_G16) pack_q5_K((const block_q5_K **)members, b, (block_q5_K_g16 *)dst, reference);
        else pack_q6_K((const block_q6_K **)members, b, dst, type == AP_Q6_K_G16, reference);
    }
}

// Rows [N][row_bytes] of a Q4_1, Q5_0, Q8_0, Q4_K, Q5_K or Q6_K matrix into `out` (ap_packed_bytes bytes), the
// K-quants by the word-at-a-time packers (`reference`: by the byte loops). Returns the interleaved type, or -1
// for a type or shape without one.
static int repack(int ggml_type, const uint8_t *rows, size_t row_bytes, int N, int K, uint8_t *out, int nthreads,
                  int reference) {
    const int type = grouped_type(ggml_type);
    if (type < 0 || N <= 0 || K <= 0 || K % ap_group_cols(type)) return -1;
    const int nb = K / ap_group_cols(type), groups = (N + AP_GROUP - 1) / AP_GROUP;
    #pragma omp parallel for schedule(static) num_threads(nthreads > 0 ? nthreads : omp_get_max_threads())
    for (int grp = 0; grp < groups; grp++) repack_group(type, rows, row_bytes, N, nb, grp, out, reference);
    return type;
}

int ap_repack(int ggml_type, const uint8_t *rows, size_t row_bytes, int N, int K, uint8_t *out, int nthreads) {
    return repack(ggml_type, rows, row_bytes, N, K, out, nthreads, 0);
}

int ap_repack_reference(int ggml_type, const uint8_t *rows, size_t row_bytes, int N, int K, uint8_t *out,
                        int nthreads) {
    return repack(ggml_type, rows, row_bytes, N, K, out, nthreads, 1);
}

// the interleaved type a Q4_1/Q5_0/Q8_0/Q4_K/Q5_K/Q6_K matrix is read in (-1: none): a copy mapped from the
// layout cache (anypair/kernels/packed_cache.py) was made by ap_repack, so its type is this one
int ap_packed_type(int ggml_type) { return grouped_type(ggml_type); }

void ap_grouped_dequant_row(const ap_weight *w, int n, float *y);

// Rows `ids` of a matrix kept in its GGUF layout (an embedding only ever gathered by rows, so its
// interleaved copy would cost its whole size in memory for a few rows a step): each row's group of
// 16 is interleaved into a scratch group and read back, so the values are bitwise the interleaved
// copy's. Returns 0, or -1 for a type without a layout or an id out of range.
int ap_dequant_rows_raw(int ggml_type, const uint8_t *rows, size_t row_bytes, int N, int K, const int64_t *ids, int n,
                        float *out) {
    const int type = grouped_type(ggml_type);
    const size_t group_bytes = ap_packed_bytes(ggml_type, AP_GROUP, K);
    if (type < 0 || group_bytes == 0) return -1;
    uint8_t *scratch = malloc(group_bytes);
    if (!scratch) return -1;
    int status = 0;
    for (int i = 0; i < n && status == 0; i++) {
        if (ids[i] < 0 || ids[i] >= N) { status = -1; break; }
        const int first = (int)(ids[i] / AP_GROUP) * AP_GROUP, count = N - first < AP_GROUP ? N - first : AP_GROUP;
        ap_repack(ggml_type, rows + row_bytes * (size_t)first, row_bytes, count, K, scratch, 1);
        const ap_weight group = {type, count, K, row_bytes, scratch, NULL};
        ap_grouped_dequant_row(&group, (int)(ids[i] - first), out + (size_t)i * K);
    }
    free(scratch);
    return status;
}

// Row n of an interleaved matrix as floats, with the GGUF's dequantization formulas
void ap_grouped_dequant_row(const ap_weight *w, int n, float *y) {
    const int cols = ap_group_cols(w->type), nb = w->K / cols, l = n % AP_GROUP;
    const uint8_t *group = w->data + (size_t)(n / AP_GROUP) * nb * ap_group_bytes(w->type);
    for (int b = 0; b < nb; b++) {
        float *o = y + cols * b;
        if (w->type == AP_Q4_1_G16) {
            const block_q4_1_g16 *g = (const block_q4_1_g16 *)group + b;
            const float d = ap_h2f(g->d[l]), m = ap_h2f(g->m[l]);
            for (int e = 0; e < 32; e++) o[e] = d * ap_q4_1_g16_value(g, l, e) + m;
        } else if (w->type == AP_Q5_0_G16) {
            const block_q5_0_g16 *g = (const block_q5_0_g16 *)group + b;
            const float d = ap_h2f(g->d[l]);
            for (int e = 0; e < 32; e++) o[e] = d * (ap_q5_0_g16_value(g, l, e) - 16);
        } else if (w->type == AP_Q8_0_G16) {
            const block_q8_0_g16 *g = (const block_q8_0_g16 *)group + b;
            const float d = ap_h2f(g->d[l]);
            for (int e = 0; e < 32; e++) o[e] = d * ap_q8_0_g16_value(g, l, e);
        } else if (w->type == AP_Q4_K_G16 || w->type == AP_Q5_K_G16) {
            const int fifth = w->type == AP_Q5_K_G16;
            const block_q4_K_g16 *g = ap_k_block(group, fifth, b);
            const float d = ap_h2f(g->d[l]), dmin = ap_h2f(g->dmin[l]);
            for (int e = 0; e < 256; e++) {
                const int j = e / 32;
                o[e] = d * g->sc[j / 2][l][j % 2] * ap_k_value(group, fifth, b, l, e) - dmin * g->mn[j / 2][l][j % 2];
            }
        } else {  // AP_Q6_K_G16 or AP_Q6_K_I8
            const int bits = w->type == AP_Q6_K_G16;
            const int8_t (*sc)[AP_GROUP][2] = ap_q6k_sc(group, bits, b);
            const float d = ap_h2f(ap_q6k_d(group, bits, b)[l]);
            for (int e = 0; e < 256; e++) {
                const int j = e / 16;
                o[e] = d * sc[j / 2][l][j % 2] * (ap_q6k_value(group, bits, b, l, e) - 32);
            }
        }
    }
}
