// The transformer layers of a decoder step in one call: no Python between the kernels.
// ap_layers_forward_seqs runs rows of several sequences (cache slots) in that one call.
//
// gpt-fast's forward, in C: rows x[M][hidden] at positions start..start+M-1 go through every layer
// (RMSNorm, q/k/v with biases, per-head q/k RMSNorm where the layer has them, rotary from the layer's
// table, KV written by position into fp16 caches, attention (sliding window and soft-capping where
// declared), output projection, a post-norm where the layer has one, the gated MLP (SiLU or GELU-tanh),
// its post-norm, residuals). One loop serves llama, qwen2/3, phi3 and gemma2/3: what differs is data
// (a NULL norm, a window of 0, a softcap of 0), not code paths. Each step is one of the batch-invariant
// kernels of this folder or an elementwise operation, so the whole stack keeps their guarantee: a row's
// result is bitwise the same whatever M is.
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ap_api.h"

// Where a forward's time goes (`anypair bench`'s roofline): seconds added per part when the caller
// passes an array of AP_PROFILE_PARTS doubles, nothing measured when it passes NULL.
enum { AP_PROF_NORMS, AP_PROF_QKV, AP_PROF_ROPE_CACHE, AP_PROF_ATTENTION, AP_PROF_ATTN_OUT, AP_PROF_GATE_UP,
       AP_PROF_SILU, AP_PROF_DOWN, AP_PROF_RESIDUAL, AP_PROFILE_PARTS };
int ap_profile_parts(void) { return AP_PROFILE_PARTS; }

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
// charges the time since *mark to part `part`, and moves the mark
static void charge(double *profile, int part, double *mark) {
    if (!profile) return;
    const double t = now_seconds();
    profile[part] += t - *mark;
    *mark = t;
}

static void rotate(float *x, int heads, const ap_model *m, const ap_layer *L, int pos) {
    const int D = m->head_dim, half = D / 2;
    const float *c = L->rope_cos + (size_t)pos * half, *s = L->rope_sin + (size_t)pos * half;
    for (int h = 0; h < heads; h++) {
        float *v = x + (size_t)h * D;
        for (int i = 0; i < half; i++) {
            const int ia = m->rope_halves ? i : 2 * i, ib = m->rope_halves ? i + half : 2 * i + 1;
            const float a = v[ia], b = v[ib];
            v[ia] = a * c[i] - b * s[i];
            v[ib] = b * c[i] + a * s[i];
        }
    }
}

// One sequence alone: its rows at positions start..start+M-1, its KV in the caches' only (first) slot.
int ap_layers_forward(const ap_model *m, const ap_layer *layers, int n_layers, float *x, int start, int M, int nthreads,
                      int path, double *profile) {
    const int slot = 0;
    return ap_layers_forward_seqs(m, layers, n_layers, x, &M, &start, &slot, 1, NULL, NULL, 1, nthreads, path, profile);
}

// Scratch of a forward with a tree in it: rows to gather, each row's flags, one path
typedef struct {
    float *q, *out;  // gathered rows' queries and attention outputs [M][Hq][D]
    int *pos, *rows, *path, *done, *has_child;  // [M] each
    int64_t *cache_at;
} tree_scratch;

static void free_scratch(tree_scratch *t) {
    if (!t) return;
    free(t->q); free(t->out); free(t->pos); free(t->rows); free(t->path); free(t->done); free(t->has_child);
    free(t->cache_at);
}

static int alloc_scratch(tree_scratch *t, int M, size_t width) {
    t->q = malloc(sizeof(float) * (size_t)M * width);
    t->out = malloc(sizeof(float) * (size_t)M * width);
    t->pos = malloc(sizeof(int) * (size_t)M); t->rows = malloc(sizeof(int) * (size_t)M);
    t->path = malloc(sizeof(int) * (size_t)M); t->done = malloc(sizeof(int) * (size_t)M);
    t->has_child = calloc((size_t)M, sizeof(int)); t->cache_at = malloc(sizeof(int64_t) * (size_t)M);
    return t->q && t->out && t->pos && t->rows && t->path && t->done && t->has_child && t->cache_at;
}

// writes rows' K and V (rotated, fp32) into their slots' caches at their positions, as fp16 (rows NULL: 0..n-1)
static void write_cache(const ap_model *m, const ap_layer *L, const float *k, const float *v, const int *pos,
                        const int64_t *cache_at, const int *rows, int n) {
    const int Hkv = m->kv_heads, D = m->head_dim;
    for (int i = 0; i < n; i++) {
        const int r = rows ? rows[i] : i;
        for (int kh = 0; kh < Hkv; kh++) {
            uint16_t *kc = L->k_cache + cache_at[r] + ((size_t)kh * m->max_len + pos[r]) * D;
            uint16_t *vc = L->v_cache + cache_at[r] + ((size_t)kh * m->max_len + pos[r]) * D;
            const float *ks = k + ((size_t)r * Hkv + kh) * D, *vs = v + ((size_t)r * Hkv + kh) * D;
            for (int c = 0; c < D; c++) { kc[c] = ap_f2h(ks[c]); vc[c] = ap_f2h(vs[c]); }
        }
    }
}

// Attention for the rows `rows` (n of them, gathered into scratch; rows NULL: rows 0..n-1 in place)
static int attend_rows(const ap_model *m, const ap_layer *L, const float *q, const int *pos, const int64_t *cache_at,
                       const int *rows, int n, float *att, tree_scratch *t, int nthreads, int use_ref) {
    const size_t width = (size_t)m->heads * m->head_dim;
    if (!rows) return ap_attention_rows(q, L->k_cache, L->v_cache, m->max_len, pos, cache_at, n, m->heads,
                                         m->kv_heads, m->head_dim, m->attn_scale, m->attn_softcap, L->window, att,
                                         nthreads, use_ref);
    for (int i = 0; i < n; i++) {
        memcpy(t->q + i * width, q + rows[i] * width, sizeof(float) * width);
        t->pos[i] = pos[rows[i]];
        t->cache_at[i] = cache_at[rows[i]];
    }
    const int status = ap_attention_rows(t->q, L->k_cache, L->v_cache, m->max_len, t->pos, t->cache_at, n, m->heads,
                                         m->kv_heads, m->head_dim, m->attn_scale, m->attn_softcap, L->window, t->out,
                                         nthreads, use_ref);
    for (int i = 0; i < n && status == 0; i++) memcpy(att + rows[i] * width, t->out + i * width, sizeof(float) * width);
    return status;
}

// One layer's cache writes and attention. Chains: every row written, then one attention call. A tree
// (rows whose parent is not the row before them): its root-to-leaf paths one after another, from the
// leaf latest in row order to the earliest (a proposal's main chain, its first rows, comes last and
// stays in the cache): a path's rows are written at their positions (start + depth, over the previous
// path's), then the rows no earlier path had attend. A tree row therefore reads exactly the keys and
// values, in the same positions, that it reads as that row of a chain of its ancestors: the same bits.
static int cache_and_attend(const ap_model *m, const ap_layer *L, const float *q, const float *k, const float *v,
                            const int *pos, const int64_t *cache_at, const int *parent, const int *tree_seq, int M,
                            float *att, tree_scratch *t, int nthreads, int use_ref) {
    if (!t) {  // no tree: every row written, then every row attends
        write_cache(m, L, k, v, pos, cache_at, NULL, M);
        return attend_rows(m, L, q, pos, cache_at, NULL, M, att, t, nthreads, use_ref);
    }
    int n = 0, status = 0;  // the chains' rows first, together
    for (int r = 0; r < M; r++) if (tree_seq[r] < 0) t->rows[n++] = r;
    write_cache(m, L, k, v, pos, cache_at, t->rows, n);
    if (n && (status = attend_rows(m, L, q, pos, cache_at, t->rows, n, att, t, nthreads, use_ref)) != 0) return status;
    memset(t->done, 0, sizeof(int) * (size_t)M);
    for (int leaf = M - 1; leaf >= 0 && status == 0; leaf--) {
        if (tree_seq[leaf] < 0 || t->has_child[leaf]) continue;
        int len = 0;  // the path, leaf to root, then reversed: root first
        for (int r = leaf; r >= 0; r = parent[r]) t->path[len++] = r;  // parents stay in the leaf's run
        for (int i = 0; i < len / 2; i++) { const int s = t->path[i]; t->path[i] = t->path[len - 1 - i]; t->path[len - 1 - i] = s; }
        write_cache(m, L, k, v, pos, cache_at, t->path, len);
        int first = 0;  // the rows an earlier path attended are this path's first (ancestors come with them)
        while (first < len && t->done[t->path[first]]) first++;
        for (int i = first; i < len; i++) t->done[t->path[i]] = 1;
        if (first < len) status = attend_rows(m, L, q, pos, cache_at, t->path + first, len - first, att, t, nthreads, use_ref);
    }
    return status;
}

// Several sequences in one call (continuous batching): x holds n_seqs runs of rows, run s being
// seq_rows[s] rows of the sequence whose KV lives in cache slot seq_slot[s] (caches
// [n_slots][kv_heads][max_len][head_dim]), after its seq_start[s] cached positions. The linears and
// norms see all rows at once; rotary, the cache writes and attention are per row, each row attending
// only to its own slot (ap_attention_rows), so every row's result is bitwise the one it gets when its
// sequence runs alone.
// parents: NULL (every run a chain: row i at position seq_start + i), or per row the row it follows
// (an earlier row of its run; -1 for the run's first row, which follows the cached positions): a run
// is then a tree of candidate continuations, each row at position seq_start + its depth, attending to
// the cached positions and its own ancestors only (cache_and_attend), its result bitwise that of the
// same row in a chain of its ancestors. tree_kv: NULL, or [n_layers][M][2][kv_heads][head_dim] fp16
// where every tree row's K and V are kept (its accepted path is moved to its positions afterwards).
// path: AP_PATH_BEST, AP_PATH_REFERENCE or AP_PATH_AVX2 (the linears'; the other ops have one SIMD
// path, used unless the reference is asked for). Returns 0, -1 for bad arguments, -2 when out of memory.
int ap_layers_forward_seqs(const ap_model *m, const ap_layer *layers, int n_layers, float *x, const int *seq_rows,
                           const int *seq_start, const int *seq_slot, int n_seqs, const int *parents, uint16_t *tree_kv,
                           int n_slots, int nthreads, int path, double *profile) {
    const int use_ref = path == AP_PATH_REFERENCE;
    int M = 0;
    for (int s = 0; s < n_seqs; s++) {
        if (seq_rows[s] <= 0 || seq_start[s] < 0 || seq_start[s] + seq_rows[s] > m->max_len || seq_slot[s] < 0 ||
            seq_slot[s] >= n_slots) return -1;
        M += seq_rows[s];
    }
    if (n_seqs <= 0) return -1;
    const size_t slot_size = (size_t)m->kv_heads * m->max_len * m->head_dim;  // one slot of one layer's cache
    int *pos = malloc(sizeof(int) * (size_t)M), *parent = malloc(sizeof(int) * (size_t)M);
    int *tree_seq = malloc(sizeof(int) * (size_t)M);  // the run's index for a tree's rows, -1 for a chain's
    int64_t *cache_at = malloc(sizeof(int64_t) * (size_t)M);  // each row's slot, as an offset into a cache
    tree_scratch scratch = {0}, *t = NULL;
    int status = pos && parent && tree_seq && cache_at ? 0 : -2;
    for (int s = 0, r = 0, trees = 0; s < n_seqs && status == 0; s++) {
        const int first = r;
        int tree = 0;
        for (int i = 0; i < seq_rows[s]; i++, r++) {
            parent[r] = parents ? parents[r] : i == 0 ? -1 : r - 1;
            if (i == 0 ? parent[r] != -1 : parent[r] < first || parent[r] >= r) { status = -1; break; }
            pos[r] = i == 0 ? seq_start[s] : pos[parent[r]] + 1;
            cache_at[r] = (int64_t)(seq_slot[s] * slot_size);
            tree |= i > 0 && parent[r] != r - 1;
        }
        for (int i = first; i < r; i++) tree_seq[i] = tree ? s : -1;
        if (tree && !trees++) status = alloc_scratch(&scratch, M, (size_t)m->heads * m->head_dim) ? 0 : -2;
        if (tree) for (int i = first + 1; i < r && status == 0; i++) scratch.has_child[parent[i]] = 1;
    }
    if (status == 0 && scratch.q) t = &scratch;
    const int E = m->hidden, Hq = m->heads, Hkv = m->kv_heads, D = m->head_dim, F = m->ffn;
    float *h = malloc(sizeof(float) * (size_t)M * E), *q = malloc(sizeof(float) * (size_t)M * Hq * D);
    float *k = malloc(sizeof(float) * (size_t)M * Hkv * D), *v = malloc(sizeof(float) * (size_t)M * Hkv * D);
    float *att = malloc(sizeof(float) * (size_t)M * Hq * D), *tmp = malloc(sizeof(float) * (size_t)M * E);
    float *gate = malloc(sizeof(float) * (size_t)M * F), *up = malloc(sizeof(float) * (size_t)M * F);
    if (status == 0 && !(h && q && k && v && att && tmp && gate && up)) status = -2;
    double mark = profile ? now_seconds() : 0.0;
    for (int l = 0; l < n_layers && status == 0; l++) {
        const ap_layer *L = &layers[l];
        ap_rmsnorm(x, L->attn_norm, M, E, m->rms_eps, h, use_ref);
        charge(profile, AP_PROF_NORMS, &mark);
        float *qkv_out[3] = {q, k, v};
        if ((status = ap_linear(L->qkv, 3, h, M, E, qkv_out, nthreads, path)) != 0) break;
        charge(profile, AP_PROF_QKV, &mark);
        // per-head norms: each head of each row is one RMSNorm row of D (in place: a row is read before written)
        if (L->q_norm) ap_rmsnorm(q, L->q_norm, M * Hq, D, m->rms_eps, q, use_ref);
        if (L->k_norm) ap_rmsnorm(k, L->k_norm, M * Hkv, D, m->rms_eps, k, use_ref);
        charge(profile, AP_PROF_NORMS, &mark);
        for (int r = 0; r < M; r++) {
            rotate(q + (size_t)r * Hq * D, Hq, m, L, pos[r]);
            rotate(k + (size_t)r * Hkv * D, Hkv, m, L, pos[r]);
        }
        for (size_t r = 0, HD = (size_t)Hkv * D; tree_kv && r < (size_t)M; r++) {
            if (tree_seq[r] < 0) continue;  // a tree's rows' K and V, [M][2][Hkv][D] this layer; a chain's: unwritten
            for (size_t c = 0; c < HD; c++) {
                tree_kv[((size_t)l * M + r) * 2 * HD + c] = ap_f2h(k[r * HD + c]);
                tree_kv[(((size_t)l * M + r) * 2 + 1) * HD + c] = ap_f2h(v[r * HD + c]);
            }
        }
        charge(profile, AP_PROF_ROPE_CACHE, &mark);
        if ((status = cache_and_attend(m, L, q, k, v, pos, cache_at, parent, tree_seq, M, att, t, nthreads, use_ref)) != 0)
            break;
        charge(profile, AP_PROF_ATTENTION, &mark);
        float *o_out[1] = {tmp};
        if ((status = ap_linear(&L->attn_out, 1, att, M, Hq * D, o_out, nthreads, path)) != 0) break;
        charge(profile, AP_PROF_ATTN_OUT, &mark);
        if (L->post_attn_norm) {
            ap_rmsnorm(tmp, L->post_attn_norm, M, E, m->rms_eps, tmp, use_ref);
            charge(profile, AP_PROF_NORMS, &mark);
        }
        for (size_t i = 0; i < (size_t)M * E; i++) x[i] = x[i] + tmp[i];
        charge(profile, AP_PROF_RESIDUAL, &mark);
        ap_rmsnorm(x, L->ffn_norm, M, E, m->rms_eps, h, use_ref);
        charge(profile, AP_PROF_NORMS, &mark);
        float *gu_out[2] = {gate, up};
        if ((status = ap_linear(L->gate_up, 2, h, M, E, gu_out, nthreads, path)) != 0) break;
        charge(profile, AP_PROF_GATE_UP, &mark);
        if (m->activation == AP_ACT_GELU_TANH) ap_gelu_tanh_mul(gate, up, (long)M * F, use_ref);
        else ap_silu_mul(gate, up, (long)M * F, use_ref);
        charge(profile, AP_PROF_SILU, &mark);
        float *down_out[1] = {tmp};
        if ((status = ap_linear(&L->down, 1, gate, M, F, down_out, nthreads, path)) != 0) break;
        charge(profile, AP_PROF_DOWN, &mark);
        if (L->post_ffn_norm) {
            ap_rmsnorm(tmp, L->post_ffn_norm, M, E, m->rms_eps, tmp, use_ref);
            charge(profile, AP_PROF_NORMS, &mark);
        }
        for (size_t i = 0; i < (size_t)M * E; i++) x[i] = x[i] + tmp[i];
        charge(profile, AP_PROF_RESIDUAL, &mark);
    }
    free(h); free(q); free(k); free(v); free(att); free(tmp); free(gate); free(up);
    free(pos); free(parent); free(tree_seq); free(cache_at);
    free_scratch(&scratch);
    return status;
}
