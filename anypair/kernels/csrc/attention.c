// Attention over an fp16 KV cache written by position, batch-invariant like the other kernels: each
// (query row, head) is computed by arithmetic fixed by that row alone, never by how many rows, heads or
// sequences the call has, and the reference, AVX2 and AVX-512 paths agree bitwise.
//
// q [M][Hq][D] (rotated), caches [Hkv][L_max][D] fp16, out [M][Hq][D]. A query row at position p
// attends to positions lo..p (lo = p - window + 1 for sliding-window layers, else 0). softcap > 0 caps
// each scaled score (softcap * tanh(s / softcap)). The arithmetic of one (row, head):
// - the score of position j: q . k_j as 8 lanes of fused multiply-adds (lane i takes elements c + i of
//   every 8-element chunk, chunks in order), then ap_reduce8, times scale: it depends on q and k_j
//   only, so a key may be scored in any block, beside any other key, row or head;
// - the soft-cap (elementwise), then the numerators exp(s - max) and their sum in 8 lanes over blocks
//   of 8 positions from lo, ap_reduce8, then the tail positions in order;
// - the values accumulated over positions in order from lo with fused multiply-adds, then times
//   1 / sum: each output element's sum is its own, so it may be kept in a register or stored and
//   reloaded between blocks of positions without changing a bit.
#include <limits.h>
#include <math.h>
#include <stdlib.h>

#include <omp.h>

#include "ap_api.h"
#include "ap_exp.h"

#define ATTN_GROUP_ROWS 16   // rows of one sequence that read its KV head together (a task's rows)
#define ATTN_MAX_PAIRS (ATTN_GROUP_ROWS * 64)  // (row, head) pairs of a task: G <= 64
#define ATTN_VALUE_BLOCK 64  // positions whose values are accumulated per register pass
#define ATTN_VALUE_PAIRS 8   // (row, head) value sums kept in registers at once (AVX-512)
#define ATTN_VALUE_PAIRS_AVX2 6  // the same with AVX2's 16 registers, two chunks a pair
// the register-tiled loops stay in functions of their own: inlined into one large function, GCC's
// register allocation moved the widened keys to the stack and back on every chunk (one row's scores
// at 4,000 positions 17% slower)
#define AP_NOINLINE __attribute__((noinline))

// ---- the reference: one row's G heads, straight from the definition above -----------------------
// attention's products are fused multiply-adds (fmaf: one rounding, the same bits as the SIMD paths'
// vfmadd), half the floating-point operations of a multiply then an add
static inline float dot_f32_f16_ref(const float *q, const uint16_t *k, int D) {
    float acc[8] = {0};
    for (int c = 0; c < D; c += 8)
        for (int i = 0; i < 8; i++) acc[i] = fmaf(q[c + i], ap_h2f(k[c + i]), acc[i]);
    return ap_reduce8(acc);
}

// The largest score. The SIMD paths take the maximum in vectors (the scalar loop was a chain of dependent
// vmaxss: two thirds of the softmax, 12% of 4 rows' attention at 4,000 positions): a maximum does not
// depend on the order it is taken in, except for the sign of a zero, and exp(s - 0) = exp(s + 0) for
// every s, so the numerators are the same bits either way.
static float scores_max(const float *s, int L, int use_ref) {
    float mx = s[0];
    int j = 1;
#ifdef AP_AVX2
    if (!use_ref && L >= 32) {
        __m256 m0 = _mm256_loadu_ps(s), m1 = m0, m2 = m0, m3 = m0;
        for (j = 0; j + 32 <= L; j += 32) {  // four independent chains
            m0 = _mm256_max_ps(m0, _mm256_loadu_ps(s + j));
            m1 = _mm256_max_ps(m1, _mm256_loadu_ps(s + j + 8));
            m2 = _mm256_max_ps(m2, _mm256_loadu_ps(s + j + 16));
            m3 = _mm256_max_ps(m3, _mm256_loadu_ps(s + j + 24));
        }
        float lanes[8];
        _mm256_storeu_ps(lanes, _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
        for (int i = 0; i < 8; i++) mx = lanes[i] > mx ? lanes[i] : mx;
    }
#endif
    (void)use_ref;
    for (; j < L; j++) mx = s[j] > mx ? s[j] : mx;
    return mx;
}

static float softmax_numerators(float *s, int L, int use_ref) {
    const float mx = scores_max(s, L, use_ref);
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

// ---- a task: R rows of one sequence x G query heads of one KV head ------------------------------
// A verification forward's rows sit at consecutive positions of one sequence and attend to nearly the
// same positions. Scored one row at a time, each row read its KV head's keys and values and widened
// them again: at gemma-2-9b's shape (4,000 positions, 32 MB of cache a layer) the time grew linearly
// with the rows (2 threads: 1.1 ms for one row, 4.2 for four). A task reads its KV head's keys in
// blocks once, widens each block once and scores it for every (row, head) pair whose range holds
// some of its positions, then the values likewise: four rows now cost 1.8 ms, the arithmetic rather
// than the reading. Pair i is row i / G, head i % G.
typedef struct {
    const float *q;              // (row r, head g) at q + ((size_t)r * Hq + g) * D; out likewise
    float *out;
    const uint16_t *kc, *vc;     // the KV head's keys and values of the rows' sequence, position-major
    int Hq, D, G, R;             // heads per row, head dimension, heads of the task, rows of the task
    int lo[ATTN_GROUP_ROWS], hi[ATTN_GROUP_ROWS];  // row r attends to positions lo[r]..hi[r]
    int first, last;             // the least lo, the greatest hi
    uint8_t row[ATTN_MAX_PAIRS]; // pair i's row (i / G, without a division per use)
    float scale, softcap;
    float *scores;               // pair i's score of position lo[r] + j at scores[i * stride + j]
    size_t stride;
} attn_task;

static inline size_t task_head(const attn_task *t, int i) {  // pair i's offset in q and out
    return ((size_t)t->row[i] * t->Hq + (size_t)(i - t->row[i] * t->G)) * t->D;
}
static inline const float *task_q(const attn_task *t, int i) { return t->q + task_head(t, i); }
static inline float *task_out(const attn_task *t, int i) { return t->out + task_head(t, i); }
static inline float *task_scores(const attn_task *t, int i) { return t->scores + (size_t)i * t->stride; }
static inline int task_len(const attn_task *t, int i) { return t->hi[t->row[i]] - t->lo[t->row[i]] + 1; }

#ifdef AP_AVX2
// the pairs whose row attends to some position of a..b, in order; returns how many
static int pairs_in(const attn_task *t, int a, int b, int *pairs) {
    int n = 0;
    for (int r = 0; r < t->R; r++)
        if (t->lo[r] <= b && t->hi[r] >= a)
            for (int g = 0; g < t->G; g++) pairs[n++] = r * t->G + g;
    return n;
}

// n scores s of positions P..P+n-1 for pair i: those in its row's range (a block at a row's edge)
static void store_some(const attn_task *t, int i, int P, const float *s, int n) {
    const int r = t->row[i], a = P > t->lo[r] ? P : t->lo[r], b = P + n - 1 < t->hi[r] ? P + n - 1 : t->hi[r];
    for (int p = a; p <= b; p++) task_scores(t, i)[p - t->lo[r]] = s[p - P];
}
static inline int block_inside(const attn_task *t, int i, int P, int n) {
    return t->lo[t->row[i]] <= P && P + n - 1 <= t->hi[t->row[i]];
}

// the keys P..last past the last whole block, one at a time (one register of 8 lanes, ap_reduce8)
static void score_keys_one_by_one(const attn_task *t, int P) {
    for (int p = P; p <= t->last; p++) {
        const uint16_t *k = t->kc + (size_t)p * t->D;
        for (int i = 0; i < t->R * t->G; i++) {
            const int r = t->row[i];
            if (p < t->lo[r] || p > t->hi[r]) continue;
            const float *qg = task_q(t, i);
            __m256 a = _mm256_setzero_ps();
            for (int c = 0; c < t->D; c += 8)
                a = _mm256_fmadd_ps(_mm256_loadu_ps(qg + c), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + c))), a);
            task_scores(t, i)[p - t->lo[r]] = ap_reduce8_avx2(a) * t->scale;
        }
    }
}

// Four keys' 8-lane accumulators reduced together: ap_reduce8's tree ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7))
// element-wise on shuffled registers (the same operands, the same additions: the same bits) in 14
// instructions instead of 4 x 6. Returns the 4 sums in key order.
static inline __m128 reduce_4keys_avx2(__m256 k0, __m256 k1, __m256 k2, __m256 k3) {
    const __m256 b01 = _mm256_add_ps(_mm256_permute2f128_ps(k0, k1, 0x20), _mm256_permute2f128_ps(k0, k1, 0x31));
    const __m256 b23 = _mm256_add_ps(_mm256_permute2f128_ps(k2, k3, 0x20), _mm256_permute2f128_ps(k2, k3, 0x31));
    // b01 = [b0..b3 of key 0 | of key 1], b_i = a_i + a_{i+4}; then c0 = b0 + b2, c1 = b1 + b3
    const __m256 c = _mm256_add_ps(_mm256_shuffle_ps(b01, b23, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm256_shuffle_ps(b01, b23, _MM_SHUFFLE(3, 2, 3, 2)));
    // c = [c0 c1 of key 0, c0 c1 of key 2 | c0 c1 of key 1, of key 3]; s = c0 + c1
    const __m256 s = _mm256_add_ps(_mm256_shuffle_ps(c, c, _MM_SHUFFLE(2, 0, 2, 0)), _mm256_shuffle_ps(c, c, _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm_unpacklo_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));  // s = [s0 s2 s0 s2 | s1 s3 s1 s3]
}

// NP pairs (NP <= ATTN_SCORE_PAIRS) x the 4 widened keys of the block at P: NP x 4 independent sums. A
// multiply-add waits 4 cycles for its sum and 2 issue a cycle (Zen 3): the 4 sums of one pair at a time kept
// the pipes a quarter busy (2 threads, Qwen2.5-1.5B's heads, a 64-row chunk at 4,000 positions: 0.55
// multiply-adds a cycle); each score's 8 lanes add the same products in the same order as before.
#define ATTN_SCORE_PAIRS 3
// up to this many pairs a block (a decode step's or a short verification's) widen the keys in registers in
// each tile, more widen them once into a copy that every tile reads
#define ATTN_DIRECT_PAIRS_AVX2 6
// `direct`: the keys are widened from the cache (k) in the loop, else read from the block's widened copy
// (keys); NP and direct are constants where inlined
static inline __attribute__((always_inline)) void score_4keys_avx2(const attn_task *t, const int *pairs, const int NP,
                                                                   const uint16_t *k16, const float *keys,
                                                                   const int direct, int P) {
    const int D = t->D;
    __m256 acc[ATTN_SCORE_PAIRS][4];
    const float *qg[ATTN_SCORE_PAIRS];
    for (int x = 0; x < NP; x++) {
        qg[x] = task_q(t, pairs[x]);
        for (int k = 0; k < 4; k++) acc[x][k] = _mm256_setzero_ps();
    }
    for (int c = 0; c < D; c += 8) {
        __m256 kv[4];
        for (int k = 0; k < 4; k++)
            kv[k] = direct ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k16 + (size_t)k * D + c)))
                           : _mm256_loadu_ps(keys + k * D + c);
        for (int x = 0; x < NP; x++) {
            const __m256 qv = _mm256_loadu_ps(qg[x] + c);
            for (int k = 0; k < 4; k++) acc[x][k] = _mm256_fmadd_ps(qv, kv[k], acc[x][k]);
        }
    }
    for (int x = 0; x < NP; x++) {
        const __m128 s = _mm_mul_ps(reduce_4keys_avx2(acc[x][0], acc[x][1], acc[x][2], acc[x][3]), _mm_set1_ps(t->scale));
        const int r = t->row[pairs[x]];
        if (block_inside(t, pairs[x], P, 4)) { _mm_storeu_ps(task_scores(t, pairs[x]) + (P - t->lo[r]), s); continue; }
        float tmp[4];
        _mm_storeu_ps(tmp, s);
        store_some(t, pairs[x], P, tmp, 4);
    }
}

// the n pairs of one block of 4 keys, ATTN_SCORE_PAIRS at a time (direct: a constant where inlined)
static inline __attribute__((always_inline)) void score_block_avx2(const attn_task *t, const int *pairs, int n,
                                                                   const uint16_t *k16, const float *keys,
                                                                   const int direct, int P) {
    int x = 0;
    for (; x + ATTN_SCORE_PAIRS <= n; x += ATTN_SCORE_PAIRS) score_4keys_avx2(t, pairs + x, ATTN_SCORE_PAIRS, k16, keys, direct, P);
    switch (n - x) {
        case 2: score_4keys_avx2(t, pairs + x, 2, k16, keys, direct, P); break;
        case 1: score_4keys_avx2(t, pairs + x, 1, k16, keys, direct, P); break;
        default: break;
    }
}

// scores of every pair in blocks of 4 keys (contiguous in the cache), each block widened once (or, for a
// block's few pairs, in registers)
static AP_NOINLINE void score_task_avx2(const attn_task *t, float *keys, int *pairs) {
    const int D = t->D;
    int P = t->first;
    for (; P + 4 <= t->last + 1; P += 4) {
        const uint16_t *k = t->kc + (size_t)P * D;
        const int n = pairs_in(t, P, P + 3, pairs);
        if (n <= ATTN_DIRECT_PAIRS_AVX2) { score_block_avx2(t, pairs, n, k, keys, 1, P); continue; }
        for (int c = 0; c < 4 * D; c += 8) _mm256_storeu_ps(keys + c, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + c))));
        score_block_avx2(t, pairs, n, k, keys, 0, P);
    }
    score_keys_one_by_one(t, P);
}

// soft-cap and softmax numerators of each pair over its own row's range; 1 / sum into inv_sum
static void softmax_task(const attn_task *t, float *inv_sum) {
    for (int i = 0; i < t->R * t->G; i++) {
        float *s = task_scores(t, i);
        if (t->softcap > 0.0f) ap_softcap(s, task_len(t, i), t->softcap, 0);  // elementwise: any split gives these bits
        inv_sum[i] = 1.0f / softmax_numerators(s, task_len(t, i), 0);
    }
}

// One register pass of the values: n <= 8 pairs over the positions first..first+len-1 of a block, in
// runs where the same pairs attend (all of them, but for the runs at the rows' first and last
// positions). Pair k's weight of position first + j is scores[off[k] + j] (read only where it attends).
typedef struct {
    int n, first, runs;
    float *out[ATTN_VALUE_PAIRS];
    ptrdiff_t off[ATTN_VALUE_PAIRS];
    int run_end[2 * ATTN_VALUE_PAIRS];  // run r: positions first + run_end[r - 1] .. first + run_end[r] - 1
    unsigned run_mask[2 * ATTN_VALUE_PAIRS];  // bit k: pair k attends to that run
} value_pass;

static void plan_values(const attn_task *t, const int *pairs, int n, int a, int b, value_pass *vp) {
    int start[ATTN_VALUE_PAIRS], end[ATTN_VALUE_PAIRS], last = a;
    vp->n = n; vp->first = INT_MAX; vp->runs = 0;
    for (int k = 0; k < n; k++) {
        const int r = t->row[pairs[k]];
        start[k] = a > t->lo[r] ? a : t->lo[r];
        end[k] = (b < t->hi[r] ? b : t->hi[r]) + 1;
        vp->first = start[k] < vp->first ? start[k] : vp->first;
        last = end[k] > last ? end[k] : last;
        vp->out[k] = task_out(t, pairs[k]);
    }
    for (int k = 0; k < n; k++) vp->off[k] = (ptrdiff_t)((size_t)pairs[k] * t->stride) + vp->first - t->lo[t->row[pairs[k]]];
    for (int p = vp->first; p < last;) {
        int next = last;
        unsigned mask = 0;
        for (int k = 0; k < n; k++) {
            if (start[k] <= p && p < end[k]) mask |= 1u << k;
            if (start[k] > p && start[k] < next) next = start[k];
            if (end[k] > p && end[k] < next) next = end[k];
        }
        vp->run_end[vp->runs] = next - vp->first; vp->run_mask[vp->runs++] = mask;
        p = next;
    }
}

// Each value row's chunk (H vectors of W elements at c: 8 with AVX2, 32 with AVX-512) is widened once for
// the pass's n pairs; n and H are constants where this is inlined (VALUE_PASS), so the n x H sums stay in
// registers. Two vectors a pair with AVX-512: a score's broadcast serves two multiply-adds, and a pass of
// few pairs (one row of 1-4 query heads a KV head) has twice the independent sums to hide the
// multiply-add's latency with. Every sum still adds its positions in order: the same bits. The same
// chunk of the next block's row is prefetched (a hint, never a fault): the hardware's prefetchers did
// not bring a column of rows 2 D bytes apart in time (3% of one row's attention at 4,000 positions).
#define VALUE_CHUNK(VEC, W, H, LOAD, STORE, WIDEN, FMADD, SET1)                                               \
    VEC acc[ATTN_VALUE_PAIRS][2], vv[2];                                                                      \
    for (int k = 0; k < n; k++)                                                                               \
        for (int h = 0; h < H; h++) acc[k][h] = LOAD(vp->out[k] + c + W * h);                                 \
    const uint16_t *v = vc + (size_t)vp->first * D + c;                                                       \
    int j = 0;                                                                                                \
    for (int r = 0; r < vp->runs; r++) {                                                                      \
        const int end = vp->run_end[r];                                                                       \
        const unsigned mask = vp->run_mask[r];                                                                \
        if (mask == (1u << n) - 1)                                                                            \
            for (; j < end; j++) {                                                                            \
                for (int h = 0; h < H; h++) vv[h] = WIDEN(v + (size_t)j * D + W * h);                         \
                _mm_prefetch((const char *)(v + (size_t)(j + ATTN_VALUE_BLOCK) * D), _MM_HINT_T0);            \
                for (int k = 0; k < n; k++) {                                                                 \
                    const VEC s = SET1(scores[vp->off[k] + j]);                                               \
                    for (int h = 0; h < H; h++) acc[k][h] = FMADD(s, vv[h], acc[k][h]);                      \
                }                                                                                             \
            }                                                                                                 \
        else                                                                                                  \
            for (; j < end; j++) {                                                                            \
                for (int h = 0; h < H; h++) vv[h] = WIDEN(v + (size_t)j * D + W * h);                         \
                for (int k = 0; k < n; k++) {                                                                 \
                    if (!(mask >> k & 1)) continue;                                                           \
                    const VEC s = SET1(scores[vp->off[k] + j]);                                               \
                    for (int h = 0; h < H; h++) acc[k][h] = FMADD(s, vv[h], acc[k][h]);                      \
                }                                                                                             \
            }                                                                                                 \
    }                                                                                                         \
    for (int k = 0; k < n; k++)                                                                               \
        for (int h = 0; h < H; h++) STORE(vp->out[k] + c + W * h, acc[k][h]);

#define WIDEN8(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
static inline __attribute__((always_inline)) void value_chunk_avx2(const value_pass *vp, const float *scores,
                                                                   const uint16_t *vc, int D, int c, const int n,
                                                                   const int H) {
    VALUE_CHUNK(__m256, 8, H, _mm256_loadu_ps, _mm256_storeu_ps, WIDEN8, _mm256_fmadd_ps, _mm256_set1_ps)
}

// the chunks c = from, from + H * W, ... below to, of H vectors each
#define VALUE_PASS(CHUNK, FROM, TO, WIDTH, H)                                                                 \
    for (int c = FROM; c < TO; c += WIDTH) switch (vp->n) {                                                 \
        case 8: CHUNK(vp, t->scores, t->vc, t->D, c, 8, H); break;                                            \
        case 7: CHUNK(vp, t->scores, t->vc, t->D, c, 7, H); break;                                            \
        case 6: CHUNK(vp, t->scores, t->vc, t->D, c, 6, H); break;                                            \
        case 5: CHUNK(vp, t->scores, t->vc, t->D, c, 5, H); break;                                            \
        case 4: CHUNK(vp, t->scores, t->vc, t->D, c, 4, H); break;                                            \
        case 3: CHUNK(vp, t->scores, t->vc, t->D, c, 3, H); break;                                            \
        case 2: CHUNK(vp, t->scores, t->vc, t->D, c, 2, H); break;                                            \
        default: CHUNK(vp, t->scores, t->vc, t->D, c, 1, H);                                                  \
    }
// two chunks a pass where the head dimension allows (passes of at most ATTN_VALUE_PAIRS_AVX2 pairs: 12 sums,
// two value vectors and a score's broadcast in the 16 registers): a score's broadcast serves two multiply-adds
// (one a multiply-add, with the prefetch, kept a 64-row chunk's values at 4,000 positions on the load ports)
static AP_NOINLINE void value_pass_avx2(const attn_task *t, const value_pass *vp) {
    const int paired = t->D - t->D % 16;
    VALUE_PASS(value_chunk_avx2, 0, paired, 16, 2)
    VALUE_PASS(value_chunk_avx2, paired, t->D, 8, 1)
}

#ifdef AP_AVX512
#define WIDEN16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
static inline __attribute__((always_inline)) void value_chunk_avx512(const value_pass *vp, const float *scores,
                                                                     const uint16_t *vc, int D, int c, const int n,
                                                                     const int H) {
    VALUE_CHUNK(__m512, 16, H, _mm512_loadu_ps, _mm512_storeu_ps, WIDEN16, _mm512_fmadd_ps, _mm512_set1_ps)
}
// 32 elements a chunk, the last 16 of a head dimension that is an odd multiple of 16 alone
static AP_NOINLINE void value_pass_avx512(const attn_task *t, const value_pass *vp) {
    const int paired = t->D - t->D % 32;
    VALUE_PASS(value_chunk_avx512, 0, paired, 32, 2)
    VALUE_PASS(value_chunk_avx512, paired, t->D, 16, 1)
}
#endif

// the weighted sums of values: blocks of positions, each value row widened once per pass of up to 8
// pairs (the pairs split evenly over the passes), then times 1 / sum
static AP_NOINLINE void values_task(const attn_task *t, const float *inv_sum, int *pairs, int wide) {
    const int all = t->R * t->G;
    for (int i = 0; i < all; i++) memset(task_out(t, i), 0, sizeof(float) * (size_t)t->D);
    for (int a = t->first; a <= t->last; a += ATTN_VALUE_BLOCK) {
        const int b = a + ATTN_VALUE_BLOCK - 1 < t->last ? a + ATTN_VALUE_BLOCK - 1 : t->last;
        const int per_pass = wide ? ATTN_VALUE_PAIRS : ATTN_VALUE_PAIRS_AVX2;
        const int n = pairs_in(t, a, b, pairs), passes = (n + per_pass - 1) / per_pass;
        for (int x = 0, k0 = 0; x < passes; x++) {
            const int count = (n - k0) / (passes - x);
            value_pass vp;
            plan_values(t, pairs + k0, count, a, b, &vp);
#ifdef AP_AVX512
            if (wide) { value_pass_avx512(t, &vp); k0 += count; continue; }
#endif
            value_pass_avx2(t, &vp);
            k0 += count;
        }
    }
    for (int i = 0; i < all; i++) {
        float *o = task_out(t, i);
        for (int c = 0; c < t->D; c++) o[c] = o[c] * inv_sum[i];  // elementwise: the SIMD paths' bits
    }
}
#endif

#ifdef AP_AVX512
// The AVX-512 scores: a score's 8 lanes are the AVX2 path's 8 lanes, two keys sharing one register
// (lanes 0-7 key j, 8-15 key j + 1) against the query chunk written twice, 8 keys in 4 registers per
// (row, head) and up to 4 pairs at once (16 accumulators for 4 key registers and 4 query loads).
static inline __m256 reduce_8keys_avx512(const __m512 a[4]) {
    // 128-bit quarters: [a0-3 | a4-7] of key 2p and of key 2p + 1 in register p; b_i = a_i + a_{i+4}
    const __m512 b01 = _mm512_add_ps(_mm512_shuffle_f32x4(a[0], a[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm512_shuffle_f32x4(a[0], a[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512 b47 = _mm512_add_ps(_mm512_shuffle_f32x4(a[2], a[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm512_shuffle_f32x4(a[2], a[3], _MM_SHUFFLE(3, 1, 3, 1)));
    // quarter q of b01: b0..b3 of key q, of b47: of key q + 4; c0 = b0 + b2, c1 = b1 + b3
    const __m512 c = _mm512_add_ps(_mm512_shuffle_ps(b01, b47, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_ps(b01, b47, _MM_SHUFFLE(3, 2, 3, 2)));
    // quarter q of c: [c0 c1 of key q, c0 c1 of key q + 4]; s = c0 + c1 at elements 4q and 4q + 1
    const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(c, c, _MM_SHUFFLE(2, 0, 2, 0)), _mm512_shuffle_ps(c, c, _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_castps512_ps256(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0), s));
}

// keys 2p and 2p + 1 of the block at k, elements c..c+7 of each: [k_2p[c..c+7] | k_2p+1[c..c+7]]
static inline __m512 widen_key_pair(const uint16_t *k, int D, int p, int c) {
    const __m128i a = _mm_loadu_si128((const __m128i *)(k + (size_t)(2 * p) * D + c));
    const __m128i b = _mm_loadu_si128((const __m128i *)(k + (size_t)(2 * p + 1) * D + c));
    return _mm512_cvtph_ps(_mm256_set_m128i(b, a));
}

// 8 keys P..P+7 for nq <= 4 pairs: widened from the cache at k (direct) or read from the block's
// widened copy in keys; nq and direct are constants where inlined
static inline __attribute__((always_inline)) void score_8keys_avx512(const attn_task *t, const float *qpairs, const int *pairs,
                                                                     const int nq, const uint16_t *k, const float *keys,
                                                                     const int direct, int P) {
    const int chunks = t->D / 8;
    __m512 acc[4][4];
    const float *qp[4];
    for (int x = 0; x < nq; x++) {
        qp[x] = qpairs + (size_t)pairs[x] * chunks * 16;
        for (int p = 0; p < 4; p++) acc[x][p] = _mm512_setzero_ps();
    }
    for (int c = 0; c < chunks; c++) {
        __m512 kv[4];
        for (int p = 0; p < 4; p++)
            kv[p] = direct ? widen_key_pair(k, t->D, p, 8 * c) : _mm512_loadu_ps(keys + ((size_t)p * chunks + c) * 16);
        for (int x = 0; x < nq; x++) {
            const __m512 qv = _mm512_loadu_ps(qp[x] + 16 * c);
            for (int p = 0; p < 4; p++) acc[x][p] = _mm512_fmadd_ps(qv, kv[p], acc[x][p]);
        }
    }
    for (int x = 0; x < nq; x++) {
        const __m256 s = _mm256_mul_ps(reduce_8keys_avx512(acc[x]), _mm256_set1_ps(t->scale));
        const int r = t->row[pairs[x]];
        if (block_inside(t, pairs[x], P, 8)) { _mm256_storeu_ps(task_scores(t, pairs[x]) + (P - t->lo[r]), s); continue; }
        float tmp[8];
        _mm256_storeu_ps(tmp, s);
        store_some(t, pairs[x], P, tmp, 8);
    }
}
static inline __attribute__((always_inline)) void score_block_avx512(const attn_task *t, const float *qpairs, const int *pairs,
                                                                     int n, const uint16_t *k, const float *keys,
                                                                     const int direct, int P) {
    int x = 0;
    for (; x + 4 <= n; x += 4) score_8keys_avx512(t, qpairs, pairs + x, 4, k, keys, direct, P);
    switch (n - x) {
        case 3: score_8keys_avx512(t, qpairs, pairs + x, 3, k, keys, direct, P); break;
        case 2: score_8keys_avx512(t, qpairs, pairs + x, 2, k, keys, direct, P); break;
        case 1: score_8keys_avx512(t, qpairs, pairs + x, 1, k, keys, direct, P); break;
        default: break;
    }
}

// Up to 8 pairs (two passes of 4) widen each block's keys in registers for each pass; more pairs
// widen it once into keys and read it back, as the widening's shuffles would otherwise take the
// multiply-adds' ports. Measured on 2 threads, gemma-2-9b's shape at 4,000 positions: one row 0.89 ms
// with the widening in registers against 1.06 with a widened copy (storing it and reading it back
// cost more than widening twice).
#define ATTN_DIRECT_PAIRS 8
static AP_NOINLINE void score_task_avx512(const attn_task *t, float *keys, float *qpairs, int *pairs) {
    const int D = t->D, chunks = D / 8;
    for (int i = 0; i < t->R * t->G; i++)  // each query chunk twice: [q[c..c+7] | q[c..c+7]]
        for (int c = 0; c < D; c += 8) {
            const __m256 v = _mm256_loadu_ps(task_q(t, i) + c);
            _mm512_storeu_ps(qpairs + ((size_t)i * chunks + c / 8) * 16, _mm512_castpd_ps(_mm512_insertf64x4(
                _mm512_castpd256_pd512(_mm256_castps_pd(v)), _mm256_castps_pd(v), 1)));  // AVX-512F only (no DQ)
        }
    int P = t->first;
    for (; P + 8 <= t->last + 1; P += 8) {
        const uint16_t *k = t->kc + (size_t)P * D;
        const int n = pairs_in(t, P, P + 7, pairs);
        if (n <= ATTN_DIRECT_PAIRS) { score_block_avx512(t, qpairs, pairs, n, k, keys, 1, P); continue; }
        for (int p = 0; p < 4; p++)  // keys 2p and 2p + 1, chunk by chunk: keys[(p * chunks + c / 8) * 16 + 0..15]
            for (int c = 0; c < D; c += 8) _mm512_storeu_ps(keys + ((size_t)p * chunks + c / 8) * 16, widen_key_pair(k, D, p, c));
        score_block_avx512(t, qpairs, pairs, n, k, keys, 0, P);
    }
    score_keys_one_by_one(t, P);  // the last keys, as the AVX2 path's
}
#endif

// One task: scores, softmax and values of its pairs. Per-thread buffers: keys (8 widened keys),
// qpairs (the AVX-512 path's doubled queries), pairs and inv_sum (one entry per pair).
static void attend_task(const attn_task *t, int use_ref, float *keys, float *qpairs, int *pairs, float *inv_sum) {
#ifdef AP_AVX512
    if (!use_ref && t->D % 16 == 0) {
        score_task_avx512(t, keys, qpairs, pairs);
        softmax_task(t, inv_sum);
        values_task(t, inv_sum, pairs, 1);
        return;
    }
#endif
#ifdef AP_AVX2
    if (!use_ref) {
        score_task_avx2(t, keys, pairs);
        softmax_task(t, inv_sum);
        values_task(t, inv_sum, pairs, 0);
        return;
    }
#endif
    (void)use_ref; (void)keys; (void)qpairs; (void)pairs; (void)inv_sum;
    for (int r = 0; r < t->R; r++)
        attend_one_ref(t->q + (size_t)r * t->Hq * t->D, t->kc, t->vc, t->D, t->G, t->lo[r], t->hi[r], t->scale,
                       t->softcap, t->out + (size_t)r * t->Hq * t->D, t->scores);
}

// runs of consecutive rows with the same cache_at (one sequence), at most cap rows each: group g is
// rows group_at[g]..group_at[g + 1] - 1; returns how many, the longest in *rows_max
static int make_groups(const int64_t *cache_at, int M, int cap, int *group_at, int *rows_max) {
    int groups = 0;
    *rows_max = 0;
    for (int m = 0, e; m < M; m = e) {
        for (e = m + 1; e < M && e - m < cap && cache_at[e] == cache_at[m]; e++) {}
        group_at[groups++] = m;
        *rows_max = e - m > *rows_max ? e - m : *rows_max;
    }
    group_at[groups] = M;
    return groups;
}
// tasks that leave some threads idle at the end and are too few for that to average out
static inline int uneven(int tasks, int threads) { return tasks % threads != 0 && tasks < 4 * threads; }

// One task: rows m0..m1 - 1 (one group) x query heads g0..g0 + heads - 1 of KV head h.
static void attend_units(const float *q, const uint16_t *k_cache, const uint16_t *v_cache, int L_max, const int *pos,
                         const int64_t *cache_at, int m0, int m1, int Hq, int D, int G, int h, int g0, int heads,
                         float scale, float softcap, int window, float *out, int longest, float *scores,
                         float *keys, float *qpairs, int *pairs, float *inv_sum, int use_ref) {
    const size_t head0 = (size_t)m0 * Hq + (size_t)h * G + (size_t)g0;
    const size_t kv0 = (size_t)cache_at[m0] + (size_t)h * L_max * D;
    attn_task task = {.q = q + head0 * D, .out = out + head0 * D, .kc = k_cache + kv0, .vc = v_cache + kv0, .Hq = Hq,
                      .D = D, .G = heads, .R = m1 - m0, .first = INT_MAX, .last = 0, .scale = scale, .softcap = softcap,
                      .scores = scores, .stride = (size_t)longest};
    for (int r = 0; r < task.R; r++) {
        const int p = pos[m0 + r];
        task.lo[r] = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
        task.hi[r] = p;
        task.first = task.lo[r] < task.first ? task.lo[r] : task.first;
        task.last = p > task.last ? p : task.last;
        for (int g = 0; g < heads; g++) task.row[r * heads + g] = (uint8_t)r;
    }
    attend_task(&task, use_ref, keys, qpairs, pairs, inv_sum);
}

// Attention for rows of several sequences in one parallel region (continuous batching): row m sits
// at position pos[m] of the sequence whose caches start cache_at[m] elements into k_cache/v_cache
// (its slot) and attends to positions lo..pos[m] of that slot only; each row's arithmetic is its own
// (above), so its output is bitwise the one it gets alone. One region instead of one per
// sequence: a parallel region's start and end cost little on an idle CPU and a scheduler's time
// slice on a busy one, paid per layer. Returns 0, -1 for bad shapes, -2 out of memory.
int ap_attention_rows(const float *q, const uint16_t *k_cache, const uint16_t *v_cache, int L_max, const int *pos,
                      const int64_t *cache_at, int M, int Hq, int Hkv, int D, float scale, float softcap, int window,
                      float *out, int nthreads, int use_ref) {
    if (Hkv <= 0 || Hq % Hkv || D % 8 || Hq / Hkv > 64) return -1;
    int longest = 0;
    for (int m = 0; m < M; m++) {
        if (pos[m] < 0 || pos[m] >= L_max || cache_at[m] < 0) return -1;
        longest = pos[m] + 1 > longest ? pos[m] + 1 : longest;
    }
    if (M <= 0) return 0;
    int *group_at = malloc(sizeof(int) * ((size_t)M + 1));
    if (!group_at) return -2;
    const int G = Hq / Hkv, threads = nthreads > 0 ? nthreads : omp_get_max_threads();
    // A task is (group of rows, KV head, a range of its G query heads): a group is a run of consecutive
    // rows of one sequence (one slot), which reads the KV head once for all its rows. Each row's and
    // head's arithmetic is its own, so how rows are grouped and heads split changes no bit. When whole
    // groups x KV heads cannot keep the threads evenly busy, the groups are halved first (a re-read of
    // the KV head per half: a small draft's 3 KV heads at 4 rows on 2 threads become 6 tasks of 2 rows
    // instead of 3); single rows' (group, KV head, query head) units are then cut into one contiguous
    // range a thread (SmolLM2's 3 x 3 heads on 2 threads: 0-4 and 5-8, four KV-head reads; one task a
    // query head read each KV head thrice, and 2 threads ran a row only 1.13x faster than one).
    int cap = ATTN_GROUP_ROWS, rows_max = 0, groups = make_groups(cache_at, M, cap, group_at, &rows_max);
    while (rows_max > 1 && uneven(groups * Hkv, threads)) {
        cap = (rows_max + 1) / 2;
        groups = make_groups(cache_at, M, cap, group_at, &rows_max);
    }
    const int by_range = uneven(groups * Hkv, threads), units = groups * Hkv * G;
    const int tasks = by_range ? threads : groups * Hkv;
    int failed = 0;
    #pragma omp parallel num_threads(threads)
    {
        const size_t pairs_max = (size_t)rows_max * G;
        float *scores = malloc(sizeof(float) * pairs_max * (size_t)longest);
        float *keys = malloc(sizeof(float) * 8 * (size_t)D);  // 4 (AVX2) or 8 (AVX-512) widened keys
        float *qpairs = malloc(sizeof(float) * 2 * pairs_max * (size_t)D), *inv_sum = malloc(sizeof(float) * pairs_max);
        int *pairs = malloc(sizeof(int) * pairs_max);
        const int ok = scores && keys && qpairs && inv_sum && pairs;
        if (!ok) {
            #pragma omp atomic write
            failed = 1;
        }
        // head-major: one thread runs a KV head's groups one after another, so the groups of one
        // sequence (a long prefill's) find that head's keys and values in the cache the first brought
        // them into (a layer's heads at 2,000-4,000 positions are 8-32 MB, more than it holds)
        #pragma omp for schedule(static)
        for (int t = 0; t < tasks; t++) {
            // units u0..u1 - 1, unit u = (KV head u / (groups G), group (u / G) % groups, query head u % G)
            const int u1 = by_range ? (int)((int64_t)units * (t + 1) / tasks) : (t + 1) * G;
            for (int u = by_range ? (int)((int64_t)units * t / tasks) : t * G; ok && u < u1;) {
                const int h = u / (groups * G), grp = (u / G) % groups, g0 = u % G;
                const int heads = G - g0 < u1 - u ? G - g0 : u1 - u;
                attend_units(q, k_cache, v_cache, L_max, pos, cache_at, group_at[grp], group_at[grp + 1], Hq, D, G, h,
                             g0, heads, scale, softcap, window, out, longest, scores, keys, qpairs, pairs, inv_sum, use_ref);
                u += heads;
            }
        }
        free(scores); free(keys); free(qpairs); free(inv_sum); free(pairs);
    }
    free(group_at);
    return failed ? -2 : 0;
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
