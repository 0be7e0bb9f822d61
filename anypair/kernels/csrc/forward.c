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
    return ap_layers_forward_seqs(m, layers, n_layers, x, &M, &start, &slot, 1, 1, nthreads, path, profile);
}

// Several sequences in one call (continuous batching): x holds n_seqs runs of rows, run s being
// seq_rows[s] rows at positions seq_start[s].. of the sequence whose KV lives in cache slot
// seq_slot[s] (caches [n_slots][kv_heads][max_len][head_dim]). The linears and norms see all rows at
// once; rotary, the cache writes and attention are per row, each row attending only to its own slot
// (ap_attention_rows), so every row's result is bitwise the one it gets when its sequence runs alone.
// path: AP_PATH_BEST, AP_PATH_REFERENCE or AP_PATH_AVX2 (the linears'; the other ops have one SIMD
// path, used unless the reference is asked for). Returns 0, -1 for bad arguments, -2 when out of memory.
int ap_layers_forward_seqs(const ap_model *m, const ap_layer *layers, int n_layers, float *x, const int *seq_rows,
                           const int *seq_start, const int *seq_slot, int n_seqs, int n_slots, int nthreads, int path,
                           double *profile) {
    const int use_ref = path == AP_PATH_REFERENCE;
    int M = 0;
    for (int s = 0; s < n_seqs; s++) {
        if (seq_rows[s] <= 0 || seq_start[s] < 0 || seq_start[s] + seq_rows[s] > m->max_len || seq_slot[s] < 0 ||
            seq_slot[s] >= n_slots) return -1;
        M += seq_rows[s];
    }
    if (n_seqs <= 0) return -1;
    const size_t slot_size = (size_t)m->kv_heads * m->max_len * m->head_dim;  // one slot of one layer's cache
    int *pos = malloc(sizeof(int) * (size_t)M);  // each row's position and its sequence's cache offset
    int64_t *cache_at = malloc(sizeof(int64_t) * (size_t)M);
    if (!pos || !cache_at) { free(pos); free(cache_at); return -2; }
    for (int s = 0, r = 0; s < n_seqs; s++)
        for (int i = 0; i < seq_rows[s]; i++, r++) { pos[r] = seq_start[s] + i; cache_at[r] = (int64_t)(seq_slot[s] * slot_size); }
    const int E = m->hidden, Hq = m->heads, Hkv = m->kv_heads, D = m->head_dim, F = m->ffn;
    float *h = malloc(sizeof(float) * (size_t)M * E), *q = malloc(sizeof(float) * (size_t)M * Hq * D);
    float *k = malloc(sizeof(float) * (size_t)M * Hkv * D), *v = malloc(sizeof(float) * (size_t)M * Hkv * D);
    float *att = malloc(sizeof(float) * (size_t)M * Hq * D), *tmp = malloc(sizeof(float) * (size_t)M * E);
    float *gate = malloc(sizeof(float) * (size_t)M * F), *up = malloc(sizeof(float) * (size_t)M * F);
    int status = (h && q && k && v && att && tmp && gate && up) ? 0 : -2;
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
            for (int kh = 0; kh < Hkv; kh++) {  // the cache, written by position in the row's slot
                uint16_t *kc = L->k_cache + cache_at[r] + ((size_t)kh * m->max_len + pos[r]) * D;
                uint16_t *vc = L->v_cache + cache_at[r] + ((size_t)kh * m->max_len + pos[r]) * D;
                const float *ks = k + ((size_t)r * Hkv + kh) * D, *vs = v + ((size_t)r * Hkv + kh) * D;
                for (int i = 0; i < D; i++) { kc[i] = ap_f2h(ks[i]); vc[i] = ap_f2h(vs[i]); }
            }
        }
        charge(profile, AP_PROF_ROPE_CACHE, &mark);
        if ((status = ap_attention_rows(q, L->k_cache, L->v_cache, m->max_len, pos, cache_at, M, Hq, Hkv, D,
                                        m->attn_scale, m->attn_softcap, L->window, att, nthreads, use_ref)) != 0) break;
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
    free(pos); free(cache_at);
    return status;
}
