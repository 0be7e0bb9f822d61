// Scalar reference dot products, one per weight type: the definition the SIMD paths must match
// bitwise (see ap_common.h for the lane order), and the portable path on CPUs without AVX2.
//
// Row types: weight row `w` (one GGUF row of K values) against activation rows r0..r0+R-1. Integer
// sums inside a block are exact; float lanes acc[i] collect, block by block, the block's scale times
// the int sum of the products at bytes 4i..4i+3 of each 32-element chunk.
// Interleaved types (Q4_1, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K in either layout): a group of 16 weight rows against R activation rows, out[r][lane].
#include "ap_common.h"

// int sum of w*x over the 4 elements of lane i in a 32-element chunk
static inline int lane4(const int8_t *w, const int8_t *x, int i) {
    int s = 0;
    for (int e = 4 * i; e < 4 * i + 4; e++) s += (int)w[e] * (int)x[e];
    return s;
}

static void unpack_q4_0(const block_q4_0 *blk, int8_t q[32]) {
    for (int e = 0; e < 16; e++) { q[e] = (int8_t)((blk->qs[e] & 15) - 8); q[e + 16] = (int8_t)((blk->qs[e] >> 4) - 8); }
}

static void dot_q4_0_ref(const uint8_t *wrow, const ap_act *a, int r0, int R, float *out) {
    const block_q4_0 *w = (const block_q4_0 *)wrow; const int nb = a->K / 32;
    for (int r = 0; r < R; r++) {
        const int8_t *x = a->q + (size_t)(r0 + r) * a->K; const float *dx = a->d + (size_t)(r0 + r) * nb;
        float acc[8] = {0};
        for (int b = 0; b < nb; b++) {
            int8_t q[32]; unpack_q4_0(&w[b], q);
            float s = ap_h2f(w[b].d) * dx[b];
            for (int i = 0; i < 8; i++) acc[i] = acc[i] + s * (float)lane4(q, x + 32 * b, i);
        }
        out[r] = ap_reduce8(acc);
    }
}

// ---- the interleaved K-quants: the definition in ap_common.h, one lane (weight row) at a time ------

static void group_q4_1_ref(const uint8_t *group, const ap_act *a, int r0, int R, float *out) {
    const block_q4_1_g16 *g = (const block_q4_1_g16 *)group; const int nb = a->K / 32;
    for (int r = 0; r < R; r++) {
        const size_t row = (size_t)(r0 + r);
        const int8_t *x = a->q + row * a->K; const float *dx = a->d + row * nb; const int16_t *s32 = a->s32 + row * nb;
        for (int l = 0; l < AP_GROUP; l++) {
            float acc = 0.0f;
            for (int b = 0; b < nb; b++) {
                int isum = 0;
                for (int i = 0; i < 32; i++) isum += ap_q4_1_g16_value(&g[b], l, i) * x[32 * b + i];
                const float d = ap_h2f(g[b].d[l]), m = ap_h2f(g[b].m[l]);
                acc = acc + ((d * dx[b]) * (float)isum + (m * dx[b]) * (float)s32[b]);
            }
            out[r * AP_GROUP + l] = acc;
        }
    }
}

static void group_q5_0_ref(const uint8_t *group, const ap_act *a, int r0, int R, float *out) {
    const block_q5_0_g16 *g = (const block_q5_0_g16 *)group; const int nb = a->K / 32;
    for (int r = 0; r < R; r++) {
        const size_t row = (size_t)(r0 + r);
        const int8_t *x = a->q + row * a->K; const float *dx = a->d + row * nb;
        for (int l = 0; l < AP_GROUP; l++) {
            float acc = 0.0f;
            for (int b = 0; b < nb; b++) {
                int isum = 0;
                for (int i = 0; i < 32; i++) isum += (ap_q5_0_g16_value(&g[b], l, i) - 16) * x[32 * b + i];
                acc = acc + (ap_h2f(g[b].d[l]) * dx[b]) * (float)isum;
            }
            out[r * AP_GROUP + l] = acc;
        }
    }
}

// Q8_0 in its interleaved layout, with the row layout's 8 lanes per weight row (ap_common.h)
static void group_q8_0_ref(const uint8_t *group, const ap_act *a, int r0, int R, float *out) {
    const block_q8_0_g16 *g = (const block_q8_0_g16 *)group; const int nb = a->K / 32;
    for (int r = 0; r < R; r++) {
        const size_t row = (size_t)(r0 + r);
        const int8_t *x = a->q + row * a->K; const float *dx = a->d + row * nb;
        for (int l = 0; l < AP_GROUP; l++) {
            float acc[8] = {0};
            for (int b = 0; b < nb; b++) {
                const float s = ap_h2f(g[b].d[l]) * dx[b];
                for (int t = 0; t < 8; t++) {
                    int lane = 0;
                    for (int e = 4 * t; e < 4 * t + 4; e++) lane += ap_q8_0_g16_value(&g[b], l, e) * x[32 * b + e];
                    acc[t] = acc[t] + s * (float)lane;
                }
            }
            out[r * AP_GROUP + l] = ap_reduce8(acc);
        }
    }
}

// Q4_K and Q5_K (`fifth`: the layout with the fifth bits): Q4_K's definition, values 0..15 or 0..31
static void group_k_ref(const uint8_t *group, int fifth, const ap_act *a, int r0, int R, float *out) {
    const int nb = a->K / 256;
    for (int r = 0; r < R; r++) {
        const size_t row = (size_t)(r0 + r);
        const int8_t *x = a->q + row * a->K; const float *dx = a->d + row * nb; const int16_t *s32 = a->s32 + row * (a->K / 32);
        for (int l = 0; l < AP_GROUP; l++) {
            float acc = 0.0f;
            for (int b = 0; b < nb; b++) {
                const block_q4_K_g16 *g = ap_k_block(group, fifth, b);
                int isum = 0, msum = 0;
                for (int j = 0; j < 8; j++) {
                    int part = 0;
                    for (int i = 32 * j; i < 32 * j + 32; i++) part += ap_k_value(group, fifth, b, l, i) * x[256 * b + i];
                    isum += g->sc[j / 2][l][j % 2] * part;
                    msum += g->mn[j / 2][l][j % 2] * s32[8 * b + j];
                }
                const float d = ap_h2f(g->d[l]), dmin = ap_h2f(g->dmin[l]);
                acc = acc + ((d * dx[b]) * (float)isum - (dmin * dx[b]) * (float)msum);
            }
            out[r * AP_GROUP + l] = acc;
        }
    }
}
static void group_q4_K_ref(const uint8_t *group, const ap_act *a, int r0, int R, float *out) {
    group_k_ref(group, 0, a, r0, R, out);
}
static void group_q5_K_ref(const uint8_t *group, const ap_act *a, int r0, int R, float *out) {
    group_k_ref(group, 1, a, r0, R, out);
}

// Q6_K in either layout (`bits`: block_q6_K_g16, else block_q6_K_i8): one definition
static void group_q6_K_ref(const uint8_t *group, int bits, const ap_act *a, int r0, int R, float *out) {
    const int nb = a->K / 256;
    for (int r = 0; r < R; r++) {
        const size_t row = (size_t)(r0 + r);
        const int8_t *x = a->q + row * a->K; const float *dx = a->d + row * nb;
        for (int l = 0; l < AP_GROUP; l++) {
            float acc = 0.0f;
            for (int b = 0; b < nb; b++) {
                const int8_t (*sc)[AP_GROUP][2] = ap_q6k_sc(group, bits, b);
                int isum = 0;
                for (int j = 0; j < 16; j++) {
                    int part = 0;
                    for (int i = 16 * j; i < 16 * j + 16; i++) part += (ap_q6k_value(group, bits, b, l, i) - 32) * x[256 * b + i];
                    isum += sc[j / 2][l][j % 2] * part;
                }
                acc = acc + (ap_h2f(ap_q6k_d(group, bits, b)[l]) * dx[b]) * (float)isum;
            }
            out[r * AP_GROUP + l] = acc;
        }
    }
}
static void group_q6_K_g16_ref(const uint8_t *group, const ap_act *a, int r0, int R, float *out) {
    group_q6_K_ref(group, 1, a, r0, R, out);
}
static void group_q6_K_i8_ref(const uint8_t *group, const ap_act *a, int r0, int R, float *out) {
    group_q6_K_ref(group, 0, a, r0, R, out);
}

static void dot_f32_ref(const uint8_t *wrow, const ap_act *a, int r0, int R, float *out) {
    const float *w = (const float *)wrow;
    for (int r = 0; r < R; r++) {
        const float *x = a->x + (size_t)(r0 + r) * a->K;
        float acc[8] = {0};
        for (int c = 0; c < a->K; c += 8)
            for (int i = 0; i < 8; i++) acc[i] = acc[i] + w[c + i] * x[c + i];
        out[r] = ap_reduce8(acc);
    }
}

static void dot_f16_ref(const uint8_t *wrow, const ap_act *a, int r0, int R, float *out) {
    const uint16_t *w = (const uint16_t *)wrow;
    for (int r = 0; r < R; r++) {
        const float *x = a->x + (size_t)(r0 + r) * a->K;
        float acc[8] = {0};
        for (int c = 0; c < a->K; c += 8)
            for (int i = 0; i < 8; i++) acc[i] = acc[i] + ap_h2f(w[c + i]) * x[c + i];
        out[r] = ap_reduce8(acc);
    }
}

int ap_act_block(int type) {
    switch (type) {
        case AP_Q4_K_G16: case AP_Q5_K_G16: case AP_Q6_K_G16: case AP_Q6_K_I8: return 256;
        case AP_Q4_0: case AP_Q4_1_G16: case AP_Q5_0_G16: case AP_Q8_0_G16: return 32;
        default: return 0;
    }
}

ap_dot_fn ap_dot_ref(int type) {
    switch (type) {
        case AP_F32: return dot_f32_ref;
        case AP_F16: return dot_f16_ref;
        case AP_Q4_0: return dot_q4_0_ref;
        default: return NULL;
    }
}

ap_group_fn ap_group_ref(int type) {
    switch (type) {
        case AP_Q4_1_G16: return group_q4_1_ref;
        case AP_Q5_0_G16: return group_q5_0_ref;
        case AP_Q8_0_G16: return group_q8_0_ref;
        case AP_Q4_K_G16: return group_q4_K_ref;
        case AP_Q5_K_G16: return group_q5_K_ref;
        case AP_Q6_K_G16: return group_q6_K_g16_ref;
        case AP_Q6_K_I8: return group_q6_K_i8_ref;
        default: return NULL;
    }
}
