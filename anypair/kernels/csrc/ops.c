// The non-linear parts of a transformer step that must also be batch-invariant: RMSNorm, SiLU x up,
// GELU(tanh) x up and soft-capping (attention over the fp16 KV cache is in attention.c).
//
// Each works row by row, in an order fixed by the row alone, never by how many rows the call has;
// the SIMD path and the scalar reference do the same operations in the same order (8 float lanes +
// ap_reduce8, one exp polynomial, ap_exp.h), so they agree bitwise.
#include <math.h>

#include "ap_api.h"
#include "ap_exp.h"

// The exp() test hook: n values, reference or SIMD
void ap_exp(const float *x, float *y, int n, int use_ref) {
    int i = 0;
#ifdef AP_AVX2
    if (!use_ref) for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp_avx2(_mm256_loadu_ps(x + i)));
#endif
    for (; i < n; i++) y[i] = exp_ref(x[i]);
}

// ---- tanh from the same exp: sign(y) (1 - e) / (1 + e), e = exp(-2|y|) (never overflows) -------
static inline float tanh_ref(float y) {
    const float e = exp_ref(-2.0f * fabsf(y)), t = (1.0f - e) / (1.0f + e);
    return copysignf(t, y);  // the SIMD path ors in y's sign bit: the same bits, -0 included
}
#ifdef AP_AVX2
static inline __m256 tanh_avx2(__m256 y) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 e = exp_avx2(_mm256_mul_ps(_mm256_set1_ps(-2.0f), _mm256_andnot_ps(sign, y)));
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 t = _mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e));
    return _mm256_or_ps(t, _mm256_and_ps(y, sign));  // t >= 0: the sign bit of y makes it -t
}
#endif

// ---- RMSNorm: y = x / sqrt(mean(x^2) + eps) * w, row by row ---------------------------------------
void ap_rmsnorm(const float *x, const float *w, int M, int n, float eps, float *y, int use_ref) {
    for (int r = 0; r < M; r++) {
        const float *xr = x + (size_t)r * n; float *yr = y + (size_t)r * n;
        float acc[8] = {0};
        int c = 0;
#ifdef AP_AVX2
        if (!use_ref) {
            __m256 a = _mm256_setzero_ps();
            for (; c + 8 <= n; c += 8) { __m256 v = _mm256_loadu_ps(xr + c); a = _mm256_add_ps(a, _mm256_mul_ps(v, v)); }
            _mm256_storeu_ps(acc, a);
        }
#endif
        for (; c + 8 <= n; c += 8)
            for (int i = 0; i < 8; i++) acc[i] = acc[i] + xr[c + i] * xr[c + i];
        for (int i = 0; c < n; c++, i++) acc[i] = acc[i] + xr[c] * xr[c];
        const float scale = 1.0f / sqrtf(ap_reduce8(acc) / (float)n + eps);
        for (int i = 0; i < n; i++) yr[i] = (xr[i] * scale) * w[i];  // elementwise: any vector width gives these bits
    }
}

// ---- SiLU(gate) * up, in place in gate --------------------------------------------------------------
void ap_silu_mul(float *gate, const float *up, long n, int use_ref) {
    long i = 0;
#ifdef AP_AVX2
    if (!use_ref)
        for (; i + 8 <= n; i += 8) {
            __m256 g = _mm256_loadu_ps(gate + i);
            __m256 e = exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), g));
            __m256 s = _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
            _mm256_storeu_ps(gate + i, _mm256_mul_ps(s, _mm256_loadu_ps(up + i)));
        }
#endif
    for (; i < n; i++) gate[i] = (gate[i] / (1.0f + exp_ref(0.0f - gate[i]))) * up[i];
}

// ---- GELU(gate) * up with the tanh approximation (gemma's gelu_pytorch_tanh), in place in gate ----
// 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))), the same operations in both paths
#define GELU_C 0.7978845608028654f
#define GELU_A 0.044715f
static inline float gelu_tanh_ref(float g) {
    const float inner = GELU_C * (g + GELU_A * (g * g * g));
    return (0.5f * g) * (1.0f + tanh_ref(inner));
}
void ap_gelu_tanh_mul(float *gate, const float *up, long n, int use_ref) {
    long i = 0;
#ifdef AP_AVX2
    if (!use_ref)
        for (; i + 8 <= n; i += 8) {
            const __m256 g = _mm256_loadu_ps(gate + i);
            const __m256 cube = _mm256_mul_ps(_mm256_mul_ps(g, g), g);
            const __m256 inner = _mm256_mul_ps(_mm256_set1_ps(GELU_C), _mm256_add_ps(g, _mm256_mul_ps(_mm256_set1_ps(GELU_A), cube)));
            const __m256 y = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), g), _mm256_add_ps(_mm256_set1_ps(1.0f), tanh_avx2(inner)));
            _mm256_storeu_ps(gate + i, _mm256_mul_ps(y, _mm256_loadu_ps(up + i)));
        }
#endif
    for (; i < n; i++) gate[i] = gelu_tanh_ref(gate[i]) * up[i];
}

// ---- soft-capping: x = cap * tanh(x / cap), in place (gemma2's attention scores and final logits) ----
static inline float softcap_ref(float x, float cap) { return cap * tanh_ref(x / cap); }
void ap_softcap(float *x, long n, float cap, int use_ref) {
    long i = 0;
#ifdef AP_AVX2
    if (!use_ref) {
        const __m256 c = _mm256_set1_ps(cap);
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(c, tanh_avx2(_mm256_div_ps(_mm256_loadu_ps(x + i), c))));
    }
#endif
    for (; i < n; i++) x[i] = softcap_ref(x[i], cap);
}
