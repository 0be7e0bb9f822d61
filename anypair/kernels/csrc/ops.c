// The non-linear parts of a transformer step that must also be batch-invariant: RMSNorm, SiLU x up,
// GELU(tanh) x up, soft-capping, and attention over an fp16 KV cache written by position.
//
// Each works row by row (attention: query by query), in an order fixed by the row alone, never by
// how many rows the call has; the SIMD path and the scalar reference do the same operations in the
// same order (8 float lanes + ap_reduce8, sequential sums over positions, one exp polynomial), so
// they agree bitwise. Attention reads each KV head once for all the query heads that share it.
#include <math.h>
#include <stdlib.h>

#include <omp.h>

#include "ap_api.h"

// ---- exp: one polynomial, written twice (scalar, AVX2) with the same operations -----------------
// Cephes' expf: x = n ln2 + r, |r| <= ln2/2, exp(r) by a degree-6 polynomial, times 2^n.
#define EXP_HI 88.3762626647949f
#define EXP_LO -87.3365447505531f
#define LOG2E 1.44269504088896341f
#define LN2_HI 0.693359375f
#define LN2_LO -2.12194440e-4f
#define P0 1.9875691500e-4f
#define P1 1.3981999507e-3f
#define P2 8.3334519073e-3f
#define P3 4.1665795894e-2f
#define P4 1.6666665459e-1f
#define P5 5.0000001201e-1f

static inline float exp_ref(float x) {
    if (x < EXP_LO) return 0.0f;
    if (x > EXP_HI) x = EXP_HI;
    float n = nearbyintf(x * LOG2E);
    float r = (x - n * LN2_HI) - n * LN2_LO;
    float y = P0;
    y = y * r + P1; y = y * r + P2; y = y * r + P3; y = y * r + P4; y = y * r + P5;
    y = (y * (r * r) + r) + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale; memcpy(&scale, &bits, 4);
    return y * scale;
}

#ifdef AP_AVX2
static inline __m256 exp_avx2(__m256 x) {
    __m256 zero_mask = _mm256_cmp_ps(x, _mm256_set1_ps(EXP_LO), _CMP_LT_OQ);
    x = _mm256_min_ps(x, _mm256_set1_ps(EXP_HI));
    x = _mm256_max_ps(x, _mm256_set1_ps(EXP_LO));  // masked to 0 below; keeps 2^n in range
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_sub_ps(_mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(LN2_HI))), _mm256_mul_ps(n, _mm256_set1_ps(LN2_LO)));
    __m256 y = _mm256_set1_ps(P0);
    y = _mm256_add_ps(_mm256_mul_ps(y, r), _mm256_set1_ps(P1));
    y = _mm256_add_ps(_mm256_mul_ps(y, r), _mm256_set1_ps(P2));
    y = _mm256_add_ps(_mm256_mul_ps(y, r), _mm256_set1_ps(P3));
    y = _mm256_add_ps(_mm256_mul_ps(y, r), _mm256_set1_ps(P4));
    y = _mm256_add_ps(_mm256_mul_ps(y, r), _mm256_set1_ps(P5));
    y = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(y, _mm256_mul_ps(r, r)), r), _mm256_set1_ps(1.0f));
    __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(zero_mask, _mm256_mul_ps(y, _mm256_castsi256_ps(bits)));
}
#endif

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

// ---- dot of two float vectors of length D (D % 8 == 0) in the fixed lane order -----------------
// attention's products are fused multiply-adds (fmaf: one rounding, the same bits as the SIMD path's
// vfmadd), half the floating-point operations of a multiply then an add
static inline float dot_f32_f16_ref(const float *q, const uint16_t *k, int D) {
    float acc[8] = {0};
    for (int c = 0; c < D; c += 8)
        for (int i = 0; i < 8; i++) acc[i] = fmaf(q[c + i], ap_h2f(k[c + i]), acc[i]);
    return ap_reduce8(acc);
}

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

// ---- attention ----------------------------------------------------------------------------------
// q [M][Hq][D] (rotated), caches [Hkv][L_max][D] fp16 holding positions 0..start+M-1, out [M][Hq][D].
// Query m sits at position start+m and attends to positions lo..start+m (lo = start+m-window+1 for
// sliding-window layers, else 0). softcap > 0 caps each scaled score (softcap * tanh(s / softcap)).
// The Hq/Hkv query heads of a KV head are scored together: each
// key and value row is read and widened once for all of them.
// Scores, softmax and the weighted sum of values follow one order per (query, head), whatever the
// number of queries: scores q_g . k_j lane by lane then ap_reduce8; numerators exp(s - max) and their
// sum in 8 lanes over blocks of 8 positions, ap_reduce8, then the tail positions in order; values
// accumulated over positions in order from 0, then times 1 / sum. The SIMD paths score 4 keys (AVX2)
// or 8 keys (AVX-512, two to a register) at once (independent accumulators, the same per-key
// arithmetic) and keep G heads' value sums in registers over blocks of positions, widening each key
// and value row once for all G heads; the reference, AVX2 and AVX-512 paths agree bitwise.
#define ATTN_KEY_BLOCK 4
#define ATTN_VALUE_BLOCK 64

static float softmax_numerators(float *s, int L, int use_ref) {
    float mx = s[0];
    for (int j = 1; j < L; j++) mx = s[j] > mx ? s[j] : mx;
    float lanes[8] = {0};
    int j = 0;
#ifdef AP_AVX2
    if (!use_ref) {
        __m256 acc = _mm256_setzero_ps();
        for (; j + 8 <= L; j += 8) {
            const __m256 e = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(s + j), _mm256_set1_ps(mx)));
            _mm256_storeu_ps(s + j, e);
            acc = _mm256_add_ps(acc, e);
        }
        _mm256_storeu_ps(lanes, acc);
    }
#endif
    for (; j + 8 <= L; j += 8)
        for (int i = 0; i < 8; i++) { s[j + i] = exp_ref(s[j + i] - mx); lanes[i] = lanes[i] + s[j + i]; }
    float sum = ap_reduce8(lanes);
    for (; j < L; j++) { s[j] = exp_ref(s[j] - mx); sum = sum + s[j]; }
    return sum;
}

static void attend_one_ref(const float *q, const uint16_t *kc, const uint16_t *vc, int D, int G, int lo, int hi,
                           float scale, float softcap, float *out, float *scores) {
    const int L = hi - lo + 1;
    for (int j = 0; j < L; j++)
        for (int g = 0; g < G; g++) scores[(size_t)g * L + j] = dot_f32_f16_ref(q + (size_t)g * D, kc + (size_t)(lo + j) * D, D) * scale;
    if (softcap > 0.0f) ap_softcap(scores, (long)G * L, softcap, 1);
    for (int g = 0; g < G; g++) {
        float *s = scores + (size_t)g * L, *o = out + (size_t)g * D;
        const float inv_sum = 1.0f / softmax_numerators(s, L, 1);
        for (int c = 0; c < D; c++) o[c] = 0.0f;
        for (int j = 0; j < L; j++) {
            const uint16_t *v = vc + (size_t)(lo + j) * D;
            for (int c = 0; c < D; c++) o[c] = fmaf(s[j], ap_h2f(v[c]), o[c]);
        }
        for (int c = 0; c < D; c++) o[c] = o[c] * inv_sum;
    }
}

#ifdef AP_AVX2
// scores of keys j0..L-1 (of lo..lo+L-1) one at a time: 8 lanes of fused multiply-adds, ap_reduce8
static inline void score_keys_one_by_one(const float *q, const uint16_t *kc, int D, int G, int lo, int j0, int L,
                                         float scale, float *scores) {
    for (int j = j0; j < L; j++) {
        const uint16_t *k = kc + (size_t)(lo + j) * D;
        for (int g = 0; g < G; g++) {
            const float *qg = q + (size_t)g * D;
            __m256 a = _mm256_setzero_ps();
            for (int c = 0; c < D; c += 8)
                a = _mm256_fmadd_ps(_mm256_loadu_ps(qg + c), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + c))), a);
            scores[(size_t)g * L + j] = ap_reduce8_avx2(a) * scale;
        }
    }
}

static void attend_one_avx2(const float *q, const uint16_t *kc, const uint16_t *vc, int D, int G, int lo, int hi,
                            float scale, float softcap, float *out, float *scores, float *keys) {
    const int L = hi - lo + 1;
    int j = 0;
    for (; j + ATTN_KEY_BLOCK <= L; j += ATTN_KEY_BLOCK) {  // 4 consecutive keys are contiguous in the cache
        const uint16_t *k = kc + (size_t)(lo + j) * D;
        for (int c = 0; c < ATTN_KEY_BLOCK * D; c += 8) _mm256_storeu_ps(keys + c, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + c))));
        for (int g = 0; g < G; g++) {
            const float *qg = q + (size_t)g * D;
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int c = 0; c < D; c += 8) {
                const __m256 qv = _mm256_loadu_ps(qg + c);
                a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(keys + c), a0);
                a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(keys + D + c), a1);
                a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(keys + 2 * D + c), a2);
                a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(keys + 3 * D + c), a3);
            }
            float *s = scores + (size_t)g * L + j;
            s[0] = ap_reduce8_avx2(a0) * scale; s[1] = ap_reduce8_avx2(a1) * scale;
            s[2] = ap_reduce8_avx2(a2) * scale; s[3] = ap_reduce8_avx2(a3) * scale;
        }
    }
    score_keys_one_by_one(q, kc, D, G, lo, j, L, scale, scores);
    if (softcap > 0.0f) ap_softcap(scores, (long)G * L, softcap, 0);  // elementwise: any split gives these bits
    float inv_sum[64];
    for (int g = 0; g < G; g++) inv_sum[g] = 1.0f / softmax_numerators(scores + (size_t)g * L, L, 0);
    // values: up to 8 heads' sums of one 8-lane slice stay in registers over a block of positions
    for (int g = 0; g < G; g++) memset(out + (size_t)g * D, 0, sizeof(float) * D);
    for (int j0 = 0; j0 < L; j0 += ATTN_VALUE_BLOCK) {
        const int j1 = j0 + ATTN_VALUE_BLOCK < L ? j0 + ATTN_VALUE_BLOCK : L;
        for (int g0 = 0; g0 < G; g0 += 8) {
            const int gn = G - g0 < 8 ? G - g0 : 8;
            for (int c = 0; c < D; c += 8) {
                __m256 acc[8];
                for (int g = 0; g < gn; g++) acc[g] = _mm256_loadu_ps(out + (size_t)(g0 + g) * D + c);
                for (int jj = j0; jj < j1; jj++) {
                    const __m256 vv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(vc + (size_t)(lo + jj) * D + c)));
                    const float *p = scores + (size_t)g0 * L + jj;
                    switch (gn) {  // unrolled per head count so the sums stay in registers
                        case 8: acc[7] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + 7 * (size_t)L), vv, acc[7]); /* fallthrough */
                        case 7: acc[6] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + 6 * (size_t)L), vv, acc[6]); /* fallthrough */
                        case 6: acc[5] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + 5 * (size_t)L), vv, acc[5]); /* fallthrough */
                        case 5: acc[4] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + 4 * (size_t)L), vv, acc[4]); /* fallthrough */
                        case 4: acc[3] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + 3 * (size_t)L), vv, acc[3]); /* fallthrough */
                        case 3: acc[2] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + 2 * (size_t)L), vv, acc[2]); /* fallthrough */
                        case 2: acc[1] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + (size_t)L), vv, acc[1]); /* fallthrough */
                        default: acc[0] = _mm256_fmadd_ps(_mm256_broadcast_ss(p), vv, acc[0]);
                    }
                }
                for (int g = 0; g < gn; g++) _mm256_storeu_ps(out + (size_t)(g0 + g) * D + c, acc[g]);
            }
        }
    }
    for (int g = 0; g < G; g++) {
        const __m256 inv = _mm256_set1_ps(inv_sum[g]);
        for (int c = 0; c < D; c += 8) _mm256_storeu_ps(out + (size_t)g * D + c, _mm256_mul_ps(_mm256_loadu_ps(out + (size_t)g * D + c), inv));
    }
}
#endif

#ifdef AP_AVX512
// The same arithmetic as attend_one_avx2, bit for bit, in 512-bit registers: a score's 8 lanes are the
// AVX2 path's 8 lanes (lane i takes elements c + i of every 8-element chunk, fused multiply-adds in chunk
// order, then ap_reduce8), two keys sharing one register (lanes 0-7 key j, 8-15 key j + 1) against the
// query chunk written twice; a value sum's elements are independent sums over positions in order, so 16
// of them share a register. Half the instructions of the AVX2 path for the same multiply-adds.
#define ATTN_KEY_BLOCK_AVX512 8
static void attend_one_avx512(const float *q, const uint16_t *kc, const uint16_t *vc, int D, int G, int lo, int hi,
                              float scale, float softcap, float *out, float *scores, float *keys, float *qpairs) {
    const int L = hi - lo + 1, chunks = D / 8;
    for (int g = 0; g < G; g++)  // each query chunk twice: [q[c..c+7] | q[c..c+7]]
        for (int c = 0; c < D; c += 8) {
            const __m256 v = _mm256_loadu_ps(q + (size_t)g * D + c);
            _mm512_storeu_ps(qpairs + ((size_t)g * chunks + c / 8) * 16, _mm512_castpd_ps(_mm512_insertf64x4(
                _mm512_castpd256_pd512(_mm256_castps_pd(v)), _mm256_castps_pd(v), 1)));  // AVX-512F only (no DQ)
        }
    int j = 0;
    for (; j + ATTN_KEY_BLOCK_AVX512 <= L; j += ATTN_KEY_BLOCK_AVX512) {
        // keys 2p and 2p + 1 of the block, chunk by chunk: keys[(p * chunks + c / 8) * 16 + 0..15]
        const uint16_t *k = kc + (size_t)(lo + j) * D;
        for (int p = 0; p < ATTN_KEY_BLOCK_AVX512 / 2; p++)
            for (int c = 0; c < D; c += 8) {
                const __m128i a = _mm_loadu_si128((const __m128i *)(k + (size_t)(2 * p) * D + c));
                const __m128i b = _mm_loadu_si128((const __m128i *)(k + (size_t)(2 * p + 1) * D + c));
                _mm512_storeu_ps(keys + ((size_t)p * chunks + c / 8) * 16, _mm512_cvtph_ps(_mm256_set_m128i(b, a)));
            }
        for (int g = 0; g < G; g++) {
            const float *qg = qpairs + (size_t)g * chunks * 16;
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int c = 0; c < chunks; c++) {
                const __m512 qv = _mm512_loadu_ps(qg + 16 * c);
                a0 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(keys + ((size_t)0 * chunks + c) * 16), a0);
                a1 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(keys + ((size_t)1 * chunks + c) * 16), a1);
                a2 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(keys + ((size_t)2 * chunks + c) * 16), a2);
                a3 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(keys + ((size_t)3 * chunks + c) * 16), a3);
            }
            float *s = scores + (size_t)g * L + j;
            const __m512 pairs[4] = {a0, a1, a2, a3};
            for (int p = 0; p < 4; p++) {
                s[2 * p] = ap_reduce8_avx2(_mm512_castps512_ps256(pairs[p])) * scale;
                s[2 * p + 1] = ap_reduce8_avx2(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(pairs[p]), 1))) * scale;
            }
        }
    }
    score_keys_one_by_one(q, kc, D, G, lo, j, L, scale, scores);  // the last keys, as the AVX2 path's
    if (softcap > 0.0f) ap_softcap(scores, (long)G * L, softcap, 0);
    float inv_sum[64];
    for (int g = 0; g < G; g++) inv_sum[g] = 1.0f / softmax_numerators(scores + (size_t)g * L, L, 0);
    for (int g = 0; g < G; g++) memset(out + (size_t)g * D, 0, sizeof(float) * D);
    for (int j0 = 0; j0 < L; j0 += ATTN_VALUE_BLOCK) {
        const int j1 = j0 + ATTN_VALUE_BLOCK < L ? j0 + ATTN_VALUE_BLOCK : L;
        for (int g0 = 0; g0 < G; g0 += 8) {
            const int gn = G - g0 < 8 ? G - g0 : 8;
            for (int c = 0; c < D; c += 16) {
                __m512 acc[8];
                for (int g = 0; g < gn; g++) acc[g] = _mm512_loadu_ps(out + (size_t)(g0 + g) * D + c);
                for (int jj = j0; jj < j1; jj++) {
                    const __m512 vv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vc + (size_t)(lo + jj) * D + c)));
                    const float *p = scores + (size_t)g0 * L + jj;
                    switch (gn) {  // unrolled per head count so the sums stay in registers
                        case 8: acc[7] = _mm512_fmadd_ps(_mm512_set1_ps(p[7 * (size_t)L]), vv, acc[7]); /* fallthrough */
                        case 7: acc[6] = _mm512_fmadd_ps(_mm512_set1_ps(p[6 * (size_t)L]), vv, acc[6]); /* fallthrough */
                        case 6: acc[5] = _mm512_fmadd_ps(_mm512_set1_ps(p[5 * (size_t)L]), vv, acc[5]); /* fallthrough */
                        case 5: acc[4] = _mm512_fmadd_ps(_mm512_set1_ps(p[4 * (size_t)L]), vv, acc[4]); /* fallthrough */
                        case 4: acc[3] = _mm512_fmadd_ps(_mm512_set1_ps(p[3 * (size_t)L]), vv, acc[3]); /* fallthrough */
                        case 3: acc[2] = _mm512_fmadd_ps(_mm512_set1_ps(p[2 * (size_t)L]), vv, acc[2]); /* fallthrough */
                        case 2: acc[1] = _mm512_fmadd_ps(_mm512_set1_ps(p[(size_t)L]), vv, acc[1]); /* fallthrough */
                        default: acc[0] = _mm512_fmadd_ps(_mm512_set1_ps(p[0]), vv, acc[0]);
                    }
                }
                for (int g = 0; g < gn; g++) _mm512_storeu_ps(out + (size_t)(g0 + g) * D + c, acc[g]);
            }
        }
    }
    for (int g = 0; g < G; g++) {
        const __m512 inv = _mm512_set1_ps(inv_sum[g]);
        for (int c = 0; c < D; c += 16) _mm512_storeu_ps(out + (size_t)g * D + c, _mm512_mul_ps(_mm512_loadu_ps(out + (size_t)g * D + c), inv));
    }
}
#endif

// Attention for rows of several sequences in one parallel region (continuous batching): row m sits
// at position pos[m] of the sequence whose caches start cache_at[m] elements into k_cache/v_cache
// (its slot) and attends to positions lo..pos[m] of that slot only; each row's arithmetic is its own
// (above), so its output is bitwise the one it gets alone. One region instead of one per
// sequence: a parallel region's start and end cost little on an idle CPU and a scheduler's time
// slice on a busy one, paid per layer. Returns 0, or -1 for bad shapes.
int ap_attention_rows(const float *q, const uint16_t *k_cache, const uint16_t *v_cache, int L_max, const int *pos,
                      const int64_t *cache_at, int M, int Hq, int Hkv, int D, float scale, float softcap, int window,
                      float *out, int nthreads, int use_ref) {
    if (Hkv <= 0 || Hq % Hkv || D % 8 || Hq / Hkv > 64) return -1;
    int longest = 0;
    for (int m = 0; m < M; m++) {
        if (pos[m] < 0 || pos[m] >= L_max || cache_at[m] < 0) return -1;
        longest = pos[m] + 1 > longest ? pos[m] + 1 : longest;
    }
    const int G = Hq / Hkv, threads = nthreads > 0 ? nthreads : omp_get_max_threads();
    // A task is (query row, KV head, a part of its G query heads). Each head's arithmetic is its own,
    // so how the G heads are split changes no bit; splitting costs a re-read of the KV head, so it is
    // done only when whole KV heads cannot keep the threads evenly busy (a small draft's 3 KV heads
    // on 2 threads at one row: 9 tasks of one head instead of 3 of three).
    const int split = (M * Hkv) % threads != 0 && M * Hkv < 4 * threads ? G : 1;
    const int per_task = G / split, tasks = M * Hkv * split;
    #pragma omp parallel num_threads(threads)
    {
        float *scores = malloc(sizeof(float) * (size_t)per_task * (size_t)longest);
        float *keys = malloc(sizeof(float) * 8 * (size_t)D);  // ATTN_KEY_BLOCK (4) or the AVX-512 path's 8 keys
        float *qpairs = malloc(sizeof(float) * 2 * (size_t)per_task * (size_t)D);
        // head-major: one thread runs a KV head's rows one after another, so a verification's rows
        // (the same sequence, nearly the same positions) find that head's keys and values in the
        // cache the first row brought them into (a layer's heads at 2,000-4,000 positions are 8-32 MB,
        // more than it holds). Measured: 2-4% off a 4-row step at gemma-2-9b's shape, context 2,000;
        // the rest of a row's attention is arithmetic (one horizontal sum per key and head).
        #pragma omp for schedule(static)
        for (int t = 0; t < tasks; t++) {
            const int h = t / (M * split), m = (t / split) % M, part = t % split, p = pos[m];
            const int lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
            const size_t head0 = (size_t)m * Hq + (size_t)h * G + (size_t)part * per_task;
            const float *qm = q + head0 * D;
            const uint16_t *kc = k_cache + cache_at[m] + (size_t)h * L_max * D;
            const uint16_t *vc = v_cache + cache_at[m] + (size_t)h * L_max * D;
            float *om = out + head0 * D;
#ifdef AP_AVX512
            if (!use_ref && D % 16 == 0) { attend_one_avx512(qm, kc, vc, D, per_task, lo, p, scale, softcap, om, scores, keys, qpairs); continue; }
#endif
#ifdef AP_AVX2
            if (!use_ref) { attend_one_avx2(qm, kc, vc, D, per_task, lo, p, scale, softcap, om, scores, keys); continue; }
#endif
            attend_one_ref(qm, kc, vc, D, per_task, lo, p, scale, softcap, om, scores);
        }
        free(scores); free(keys); free(qpairs);
    }
    return 0;
}

// One sequence: q [M][Hq][D] at positions start..start+M-1, caches [Hkv][L_max][D] (the rows of
// ap_attention_rows, all in the caches' first slot). Returns 0, or -1 for bad shapes, -2 out of memory.
int ap_attention(const float *q, const uint16_t *k_cache, const uint16_t *v_cache, int L_max, int start, int M,
                 int Hq, int Hkv, int D, float scale, float softcap, int window, float *out, int nthreads, int use_ref) {
    if (M <= 0 || start < 0 || start + M > L_max) return -1;
    int *pos = malloc(sizeof(int) * (size_t)M);
    int64_t *cache_at = calloc((size_t)M, sizeof(int64_t));
    if (!pos || !cache_at) { free(pos); free(cache_at); return -2; }
    for (int m = 0; m < M; m++) pos[m] = start + m;
    const int status = ap_attention_rows(q, k_cache, v_cache, L_max, pos, cache_at, M, Hq, Hkv, D, scale, softcap, window,
                                         out, nthreads, use_ref);
    free(pos); free(cache_at);
    return status;
}
