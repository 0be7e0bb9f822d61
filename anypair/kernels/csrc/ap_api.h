// What the library exports: the structs Python fills and every function it calls. This header is the
// one declaration of the C/Python boundary on the C side; anypair/kernels/binding.py mirrors it (ctypes
// structs and signatures), abi.c exports the structs' sizes and offsets so that the binding is checked
// against the compiled library at load, and tests/test_quant_kernels.py checks the binding's
// signatures against the prototypes below.
#ifndef ANYPAIR_API_H
#define ANYPAIR_API_H

#include "ap_common.h"

// The MLP's gating activation: SiLU (llama, qwen2/3, phi3) or GELU with the tanh approximation (gemma)
enum { AP_ACT_SILU = 0, AP_ACT_GELU_TANH = 1 };

// A decoder-only model's shape for ap_layers_forward (llama, qwen2/3, phi3, gemma2/3).
typedef struct {
    int hidden, heads, kv_heads, head_dim, ffn, max_len;
    int rope_halves;  // 1: NeoX pairs (i, i + D/2) as qwen2; 0: adjacent pairs (2i, 2i + 1) as llama in GGUF
    int activation;   // AP_ACT_SILU or AP_ACT_GELU_TANH
    float rms_eps, attn_scale;
    float attn_softcap;  // > 0: attention scores become softcap * tanh(score / softcap) (gemma2); 0: none
} ap_model;

// One decoder layer: norms, matrices (ap_weight, ap_common.h), its rotary table and fp16 KV cache.
typedef struct {
    const float *attn_norm, *ffn_norm;
    const float *post_attn_norm, *post_ffn_norm;  // RMSNorm of each block's output before its residual (gemma2/3), or NULL
    const float *q_norm, *k_norm;  // [head_dim] RMSNorm of each query/key head before the rotary (qwen3, gemma3), or NULL
    const float *rope_cos, *rope_sin;  // this layer's rotary table [max_len][D/2] (gemma3: local and global layers differ)
    int window;  // > 0: sliding-window attention over the last `window` positions; 0: the whole context
    ap_weight qkv[3], attn_out, gate_up[2], down;
    uint16_t *k_cache, *v_cache;  // [kv_heads][max_len][head_dim] fp16
} ap_layer;

// matmul.c
int ap_simd_level(void);
void ap_set_prefetch_min_rows(int rows);
int ap_type_supported(int type);
int ap_linear(const ap_weight *ws, int nw, const float *x, int M, int K, float *const *ys, int nthreads, int path);
int ap_dequant_rows(const ap_weight *w, const int64_t *rows, int n, float *out);
void ap_quantize_rows(const float *x, int M, int K, int block, int8_t *q, float *d, int16_t *s16, int16_t *s32, int path);
// repack.c
size_t ap_packed_bytes(int ggml_type, int N, int K);
int ap_repack(int ggml_type, const uint8_t *rows, size_t row_bytes, int N, int K, uint8_t *out, int nthreads);
int ap_repack_reference(int ggml_type, const uint8_t *rows, size_t row_bytes, int N, int K, uint8_t *out,
                        int nthreads);
int ap_packed_type(int ggml_type);
int ap_set_q6k_layout(int type);
int ap_dequant_rows_raw(int ggml_type, const uint8_t *rows, size_t row_bytes, int N, int K, const int64_t *ids, int n,
                        float *out);
// ops.c
void ap_exp(const float *x, float *y, int n, int use_ref);
void ap_rmsnorm(const float *x, const float *w, int M, int n, float eps, float *y, int use_ref);
void ap_silu_mul(float *gate, const float *up, long n, int use_ref);
void ap_gelu_tanh_mul(float *gate, const float *up, long n, int use_ref);
void ap_softcap(float *x, long n, float cap, int use_ref);
// attention.c
int ap_attention(const float *q, const uint16_t *k_cache, const uint16_t *v_cache, int L_max, int start, int M, int Hq, int Hkv, int D, float scale, float softcap, int window, float *out, int nthreads, int use_ref);
int ap_attention_rows(const float *q, const uint16_t *k_cache, const uint16_t *v_cache, int L_max, const int *pos, const int64_t *cache_at, int M, int Hq, int Hkv, int D, float scale, float softcap, int window, float *out, int nthreads, int use_ref);
// forward.c
int ap_profile_parts(void);
int ap_layers_forward(const ap_model *m, const ap_layer *layers, int n_layers, float *x, int start, int M, int nthreads, int path, double *profile);
int ap_layers_forward_seqs(const ap_model *m, const ap_layer *layers, int n_layers, float *x, const int *seq_rows, const int *seq_start, const int *seq_slot, int n_seqs, const int *parents, uint16_t *tree_kv, int n_slots, int nthreads, int path, double *profile);
// roofline.c
uint64_t ap_stream_read(const uint8_t *buffer, size_t bytes, int nthreads);
long ap_int8_peak(long iterations, int nthreads, int use_avx2, int32_t *sink);
// abi.c
int ap_abi_layout(int64_t *values, int capacity);
const char *ap_abi_names(void);

#endif
