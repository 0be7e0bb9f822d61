// The structs' layout as this compiler laid them out: sizes and field offsets of ap_weight, ap_model
// and ap_layer, which anypair/kernels/binding.py compares with its ctypes mirrors when it loads the
// library (a field added on one side only is then a one-line error, not corrupted memory).
#include <stddef.h>

#include "ap_api.h"

#define LAYOUT(X)                                                                                   \
    X(ap_weight, type) X(ap_weight, N) X(ap_weight, K) X(ap_weight, row_bytes) X(ap_weight, data)   \
    X(ap_weight, bias)                                                                              \
    X(ap_model, hidden) X(ap_model, heads) X(ap_model, kv_heads) X(ap_model, head_dim) X(ap_model, ffn) \
    X(ap_model, max_len) X(ap_model, rope_halves) X(ap_model, activation) X(ap_model, rms_eps)      \
    X(ap_model, attn_scale) X(ap_model, attn_softcap)                                               \
    X(ap_layer, attn_norm) X(ap_layer, ffn_norm) X(ap_layer, post_attn_norm) X(ap_layer, post_ffn_norm) \
    X(ap_layer, q_norm) X(ap_layer, k_norm) X(ap_layer, rope_cos) X(ap_layer, rope_sin) X(ap_layer, window) \
    X(ap_layer, qkv) X(ap_layer, attn_out)                                                          \
    X(ap_layer, gate_up) X(ap_layer, down) X(ap_layer, k_cache) X(ap_layer, v_cache)

#define NAME(s, f) #s "." #f ","
#define OFFSET(s, f) all[n++] = (int64_t)offsetof(s, f);

// "struct.field,...,struct.size,..." in the order ap_abi_layout writes its values
const char *ap_abi_names(void) { return LAYOUT(NAME) "ap_weight.size,ap_model.size,ap_layer.size"; }

// Writes the offsets then the three sizes; returns how many values (or -1 if capacity is too small).
int ap_abi_layout(int64_t *values, int capacity) {
    int64_t all[64];
    int n = 0;
    LAYOUT(OFFSET)
    all[n++] = (int64_t)sizeof(ap_weight);
    all[n++] = (int64_t)sizeof(ap_model);
    all[n++] = (int64_t)sizeof(ap_layer);
    if (n > capacity) return -1;
    for (int i = 0; i < n; i++) values[i] = all[i];
    return n;
}
