// Scalar reference dot products, one per weight type: the definition the SIMD paths must match
// bitwise (see ap_common.h for the lane order), and the portable path on CPUs without AVX2.
//
// Each function: weight row `w` (one GGUF row of K values) against activation rows r0..r0+R-1.
// Integer sums inside a block are exact; float lanes acc[i] collect, block by block, the block's
// scale times the int sum of the products at bytes 4i..4i+3 of each 32-element chunk.
#include "ap_common.h"

// int sum of w*x over the 4 elements of lane i in a 32-element chunk
static inline int lane4(const int8_t *w, const int8_t *x, int i) {
    int s = 0;
    for (int e = 4 * i; e < 4 * i + 4; e++) s += (int)w[e] * (int)x[e];
    return s;
}

static void dot_q8_0_ref(const uint8_t *wrow, const ap_act *a, int r0, int R, float *out) {
    const block_q8_0 *w = (const block_q8_0 *)wrow; const int nb = a->K / 32;
    for (int r = 0; r < R; r++) {
        const int8_t *x = a->q + (size_t)(r0 + r) * a->K; const float *dx = a->d + (size_t)(r0 + r) * nb;
        float acc[8] = {0};
        for (int b = 0; b < nb; b++) {
            float s = ap_h2f(w[b].d) * dx[b];
            for (int i = 0; i < 8; i++) acc[i] = acc[i] + s * (float)lane4(w[b].qs, x + 32 * b, i);
        }
        out[r] = ap_reduce8(acc);
    }
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

static void dot_q4_1_ref(const uint8_t *wrow, const ap_act *a, int r0, int R, float *out) {
    const block_q4_1 *w = (const block_q4_1 *)wrow; const int nb = a->K / 32;
    for (int r = 0; r < R; r++) {
        const int8_t *x = a->q + (size_t)(r0 + r) * a->K; const float *dx = a->d + (size_t)(r0 + r) * nb;
        const int16_t *sx = a->s32 + (size_t)(r0 + r) * nb;
        float acc[8] = {0}, macc = 0.0f;
        for (int b = 0; b < nb; b++) {
            int8_t q[32];
            for (int e = 0; e < 16; e++) { q[e] = (int8_t)(w[b].qs[e] & 15); q[e + 16] = (int8_t)(w[b].qs[e] >> 4); }
            float s = ap_h2f(w[b].d) * dx[b];
            for (int i = 0; i < 8; i++) acc[i] = acc[i] + s * (float)lane4(q, x + 32 * b, i);
            macc = macc + (ap_h2f(w[b].m) * dx[b]) * (float)sx[b];
        }
        out[r] = ap_reduce8(acc) + macc;
    }
}

static void dot_q5_0_ref(const uint8_t *wrow, const ap_act *a, int r0, int R, float *out) {
    const block_q5_0 *w = (const block_q5_0 *)wrow; const int nb = a->K / 32;
    for (int r = 0; r < R; r++) {
        const int8_t *x = a->q + (size_t)(r0 + r) * a->K; const float *dx = a->d + (size_t)(r0 + r) * nb;
        float acc[8] = {0};
        for (int b = 0; b < nb; b++) {
            uint32_t qh; memcpy(&qh, w[b].qh, 4);
            int8_t q[32];
            for (int e = 0; e < 16; e++) {
                q[e] = (int8_t)(((w[b].qs[e] & 15) | (((qh >> e) & 1) << 4)) - 16);
                q[e + 16] = (int8_t)(((w[b].qs[e] >> 4) | (((qh >> (e + 16)) & 1) << 4)) - 16);
            }
            float s = ap_h2f(w[b].d) * dx[b];
            for (int i = 0; i < 8; i++) acc[i] = acc[i] + s * (float)lane4(q, x + 32 * b, i);
        }
        out[r] = ap_reduce8(acc);
    }
}

static void dot_q4_K_ref(const uint8_t *wrow, const ap_act *a, int r0, int R, float *out) {
    const block_q4_K *w = (const block_q4_K *)wrow; const int nb = a->K / 256;
    for (int r = 0; r < R; r++) {
        const int8_t *x = a->q + (size_t)(r0 + r) * a->K; const float *dx = a->d + (size_t)(r0 + r) * nb;
        const int16_t *sx = a->s32 + (size_t)(r0 + r) * (a->K / 32);
        float acc[8] = {0}, macc = 0.0f;
        for (int b = 0; b < nb; b++) {
            uint8_t sc[8], mn[8]; ap_q4k_scales(w[b].scales, sc, mn);
            int isum[8] = {0}, msum = 0;
            for (int j = 0; j < 8; j++) {
                int8_t q[32];
                const uint8_t *qs = w[b].qs + 32 * (j / 2);
                for (int e = 0; e < 32; e++) q[e] = (int8_t)((j & 1) ? (qs[e] >> 4) : (qs[e] & 15));
                for (int i = 0; i < 8; i++) isum[i] += sc[j] * lane4(q, x + 256 * b + 32 * j, i);
                msum += mn[j] * sx[8 * b + j];
            }
            float s = ap_h2f(w[b].d) * dx[b];
            for (int i = 0; i < 8; i++) acc[i] = acc[i] + s * (float)isum[i];
            macc = macc + (ap_h2f(w[b].dmin) * dx[b]) * (float)msum;
        }
        out[r] = ap_reduce8(acc) - macc;
    }
}

// Q6_K's 256 values (0..63, offset 32 not yet applied) in element order
static void unpack_q6_K(const block_q6_K *blk, int8_t q[256]) {
    for (int n = 0; n < 2; n++) {
        const uint8_t *ql = blk->ql + 64 * n, *qh = blk->qh + 32 * n;
        int8_t *y = q + 128 * n;
        for (int l = 0; l < 32; l++) {
            y[l] = (int8_t)((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4));
            y[l + 32] = (int8_t)((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4));
            y[l + 64] = (int8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
            y[l + 96] = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
        }
    }
}

static void dot_q6_K_ref(const uint8_t *wrow, const ap_act *a, int r0, int R, float *out) {
    const block_q6_K *w = (const block_q6_K *)wrow; const int nb = a->K / 256;
    for (int r = 0; r < R; r++) {
        const int8_t *x = a->q + (size_t)(r0 + r) * a->K; const float *dx = a->d + (size_t)(r0 + r) * nb;
        float acc[8] = {0};
        for (int b = 0; b < nb; b++) {
            int8_t q[256]; unpack_q6_K(&w[b], q);
            for (int e = 0; e < 256; e++) q[e] = (int8_t)(q[e] - 32);
            int isum[8] = {0};
            for (int c = 0; c < 8; c++)  // 32-element chunks; lanes 0-3 in group 2c, lanes 4-7 in group 2c+1
                for (int i = 0; i < 8; i++) isum[i] += w[b].scales[2 * c + i / 4] * lane4(q + 32 * c, x + 256 * b + 32 * c, i);
            float s = ap_h2f(w[b].d) * dx[b];
            for (int i = 0; i < 8; i++) acc[i] = acc[i] + s * (float)isum[i];
        }
        out[r] = ap_reduce8(acc);
    }
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
        case AP_Q4_K: case AP_Q6_K: return 256;
        case AP_Q4_0: case AP_Q4_1: case AP_Q5_0: case AP_Q8_0: return 32;
        default: return 0;
    }
}

ap_dot_fn ap_dot_ref(int type) {
    switch (type) {
        case AP_F32: return dot_f32_ref;
        case AP_F16: return dot_f16_ref;
        case AP_Q4_0: return dot_q4_0_ref;
        case AP_Q4_1: return dot_q4_1_ref;
        case AP_Q5_0: return dot_q5_0_ref;
        case AP_Q8_0: return dot_q8_0_ref;
        case AP_Q4_K: return dot_q4_K_ref;
        case AP_Q6_K: return dot_q6_K_ref;
        default: return NULL;
    }
}
