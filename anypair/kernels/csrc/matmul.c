// The exported linear layer: y[r] = W x[r] (+ bias) for M activation rows against one or more
// weight matrices that read the same input (q/k/v, gate/up), on GGUF blocks.
//
// Work is split over weight rows only, in fixed chunks, so a (weight row, activation row) pair is
// always computed by the same dot function with the same arithmetic, whichever thread takes it and
// however many rows the call has: the result is bitwise batch-invariant. The activation rows are
// quantized once per call and per block size (256 for K-quants, 32 for the others).
#include <stdlib.h>

#include <omp.h>

#include "ap_api.h"

#define AP_CHUNK_ROWS AP_GROUP  // weight rows per scheduled piece of work: one interleaved group

void ap_grouped_dequant_row(const ap_weight *w, int n, float *y);

int ap_simd_level(void) {  // 3: AVX-512 VNNI (K-quants) + AVX2, 2: AVX2, 0: the portable reference
#if defined(AP_AVX512)
    return 3;
#elif defined(AP_AVX2)
    return 2;
#else
    return 0;
#endif
}

// activation rows from which the AVX-512 K-quant tiles prefetch ahead (dot_avx512.c says why it is per CPU)
int ap_prefetch_min_rows = 4;
void ap_set_prefetch_min_rows(int rows) { ap_prefetch_min_rows = rows < 1 ? 1 : rows; }

int ap_type_supported(int type) { return ap_dot_ref(type) != NULL || ap_group_ref(type) != NULL; }

static ap_dot_fn pick_dot(int type, int path) {
    const ap_dot_fn fn = path != AP_PATH_REFERENCE ? ap_dot_avx2(type) : NULL;
    return fn ? fn : ap_dot_ref(type);
}
static ap_group_fn pick_group(int type, int path) {
    ap_group_fn fn = NULL;
    if (path == AP_PATH_BEST) fn = ap_group_avx512(type);
    if (!fn && path != AP_PATH_REFERENCE) fn = ap_group_avx2(type);
    return fn ? fn : ap_group_ref(type);
}

typedef struct { int8_t *q, *qt; float *d; int16_t *s16, *s32; } act_buffers;

// qt (ap_tile_step) only where the AVX-512 K-quant kernels will read it (`tiled`), and only for more than one
// row: one row's tile is q itself
static int alloc_act(act_buffers *b, int M, int K, int block, int tiled) {
    b->q = malloc((size_t)M * K);
    b->qt = tiled && M > 1 ? malloc((size_t)M * K) : NULL;
    b->d = malloc(sizeof(float) * (size_t)M * (K / block));
    b->s16 = malloc(sizeof(int16_t) * (size_t)M * (K / 16));
    b->s32 = malloc(sizeof(int16_t) * (size_t)M * (K / 32));
    return b->q && (b->qt || !tiled || M == 1) && b->d && b->s16 && b->s32;
}
static void free_act(act_buffers *b) { free(b->q); free(b->qt); free(b->d); free(b->s16); free(b->s32); }

// q's rows by tiles of AP_ROW_TILE, each tile's rows step by step (ap_common.h: ap_tile_step)
static void tile_rows(const int8_t *q, int M, int K, int8_t *qt) {
    for (int r0 = 0; r0 < M; r0 += AP_ROW_TILE) {
        const int R = M - r0 < AP_ROW_TILE ? M - r0 : AP_ROW_TILE;
        int8_t *out = qt + (size_t)r0 * K;
        for (int s = 0; s < K / 8; s++)
            for (int r = 0; r < R; r++) memcpy(out + ((size_t)s * R + r) * 8, q + (size_t)(r0 + r) * K + 8 * s, 8);
    }
}

static void quantize_act(const float *x, int M, int K, int block, int path, act_buffers *b) {
    (path == AP_PATH_REFERENCE ? ap_quantize_rows_ref : ap_quantize_rows_avx2)(x, M, K, block, b->q, b->d, b->s16, b->s32);
    if (b->qt) tile_rows(b->q, M, K, b->qt);
}

// one chunk (AP_CHUNK_ROWS = AP_GROUP weight rows n0..n1-1) of an interleaved matrix, every activation row
static void run_group_chunk(const ap_weight *w, const ap_act *a, int n0, int n1, ap_group_fn fn, float *y) {
    const uint8_t *group = w->data + (size_t)(n0 / AP_GROUP) * (w->K / ap_group_cols(w->type)) * ap_group_bytes(w->type);
    float tile[AP_GROUP_ROW_TILE * AP_GROUP];
    for (int r0 = 0; r0 < a->M; r0 += AP_GROUP_ROW_TILE) {
        const int R = a->M - r0 < AP_GROUP_ROW_TILE ? a->M - r0 : AP_GROUP_ROW_TILE;
        fn(group, a, r0, R, tile);
        for (int r = 0; r < R; r++)
            for (int n = n0; n < n1; n++) {
                const float v = tile[r * AP_GROUP + (n - n0)];
                y[(size_t)(r0 + r) * w->N + n] = w->bias ? v + w->bias[n] : v;
            }
    }
}

// Returns 0 on success, -1 for an unsupported type or shape, -2 when out of memory.
// path: AP_PATH_BEST, AP_PATH_REFERENCE or AP_PATH_AVX2 (all give the same bits; tests compare them).
int ap_linear(const ap_weight *ws, int nw, const float *x, int M, int K, float *const *ys, int nthreads, int path) {
    if (nw <= 0 || M <= 0 || K <= 0 || K % 32) return -1;
    int need256 = 0, need32 = 0;
    for (int i = 0; i < nw; i++) {
        if (ws[i].K != K || !ap_type_supported(ws[i].type)) return -1;
        int block = ap_act_block(ws[i].type);
        if (block == 256) { if (K % 256) return -1; need256 = 1; }
        if (block == 32) need32 = 1;
    }
    act_buffers b256 = {0}, b32 = {0};
    int ok = 1;
    if (need256) ok &= alloc_act(&b256, M, K, 256, path == AP_PATH_BEST && ap_simd_level() == 3);
    if (need32) ok &= alloc_act(&b32, M, K, 32, 0);
    if (!ok) { free_act(&b256); free_act(&b32); return -2; }
    if (need256) quantize_act(x, M, K, 256, path, &b256);
    if (need32) quantize_act(x, M, K, 32, path, &b32);
    const ap_act act256 = {M, K, 256, b256.q, b256.d, b256.s16, b256.s32, x, M == 1 ? b256.q : b256.qt};
    const ap_act act32 = {M, K, 32, b32.q, b32.d, b32.s16, b32.s32, x, NULL};
    const ap_act actf = {M, K, 0, NULL, NULL, NULL, NULL, x, NULL};

    // chunk c of the concatenated weight rows -> (matrix, first row)
    int first_chunk[64 + 1];
    if (nw > 64) { free_act(&b256); free_act(&b32); return -1; }
    first_chunk[0] = 0;
    for (int i = 0; i < nw; i++) first_chunk[i + 1] = first_chunk[i] + (ws[i].N + AP_CHUNK_ROWS - 1) / AP_CHUNK_ROWS;
    const int chunks = first_chunk[nw];

    #pragma omp parallel for schedule(static) num_threads(nthreads > 0 ? nthreads : omp_get_max_threads())
    for (int c = 0; c < chunks; c++) {
        int i = 0;
        while (c >= first_chunk[i + 1]) i++;
        const ap_weight *w = &ws[i];
        const int block = ap_act_block(w->type);
        const ap_act *a = block == 256 ? &act256 : block == 32 ? &act32 : &actf;
        const int n0 = (c - first_chunk[i]) * AP_CHUNK_ROWS;
        const int n1 = n0 + AP_CHUNK_ROWS < w->N ? n0 + AP_CHUNK_ROWS : w->N;
        if (ap_is_grouped(w->type)) { run_group_chunk(w, a, n0, n1, pick_group(w->type, path), ys[i]); continue; }
        const ap_dot_fn dot = pick_dot(w->type, path);
        float tile[AP_ROW_TILE];
        // activation tiles outside, the chunk's weight rows inside: with many rows (prefill) a tile
        // of activations is read from cache once per chunk instead of once per weight row
        for (int r0 = 0; r0 < M; r0 += AP_ROW_TILE) {
            const int R = M - r0 < AP_ROW_TILE ? M - r0 : AP_ROW_TILE;
            for (int n = n0; n < n1; n++) {
                dot(w->data + w->row_bytes * (size_t)n, a, r0, R, tile);
                for (int r = 0; r < R; r++) ys[i][(size_t)(r0 + r) * w->N + n] = w->bias ? tile[r] + w->bias[n] : tile[r];
            }
        }
    }
    free_act(&b256); free_act(&b32);
    return 0;
}

// ---- dequantization of whole rows (token embeddings, tests): the GGUF's own formulas ------------
// (the row layouts only: the interleaved types, Q8_0 among them, go through ap_grouped_dequant_row)

static void dequant_row(int type, const uint8_t *row, int K, float *y) {
    switch (type) {
        case AP_F32: memcpy(y, row, sizeof(float) * (size_t)K); return;
        case AP_F16: for (int i = 0; i < K; i++) y[i] = ap_h2f(((const uint16_t *)row)[i]); return;
        case AP_Q4_0: {
            const block_q4_0 *b = (const block_q4_0 *)row;
            for (int i = 0; i < K / 32; i++) {
                float d = ap_h2f(b[i].d);
                for (int e = 0; e < 16; e++) { y[32 * i + e] = d * ((b[i].qs[e] & 15) - 8); y[32 * i + e + 16] = d * ((b[i].qs[e] >> 4) - 8); }
            }
            return;
        }
    }
}

int ap_dequant_rows(const ap_weight *w, const int64_t *rows, int n, float *out) {
    if (!ap_type_supported(w->type)) return -1;
    for (int i = 0; i < n; i++) {
        if (rows[i] < 0 || rows[i] >= w->N) return -1;
        if (ap_is_grouped(w->type)) { ap_grouped_dequant_row(w, (int)rows[i], out + (size_t)i * w->K); continue; }
        dequant_row(w->type, w->data + w->row_bytes * (size_t)rows[i], w->K, out + (size_t)i * w->K);
    }
    return 0;
}

// test hook: the activation quantization alone (block 256 or 32), reference or SIMD path
void ap_quantize_rows(const float *x, int M, int K, int block, int8_t *q, float *d, int16_t *s16, int16_t *s32, int path) {
    (path == AP_PATH_REFERENCE ? ap_quantize_rows_ref : ap_quantize_rows_avx2)(x, M, K, block, q, d, s16, s32);
}
