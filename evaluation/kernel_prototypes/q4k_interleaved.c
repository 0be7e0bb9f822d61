// Prototype: Q4_K with 16 weight rows interleaved (lanes = weight rows), activations broadcast 4 bytes
// at a time, VNNI vpdpbusd; the per-super-block float epilogue is shared by 16 weight rows.
//
// Arithmetic (the definition every path must follow, for any number of activation rows):
//   per (weight row n, activation row r): acc = macc = 0; for each super-block b in order:
//     isum = sum_j sc[j] * sum_{i in sub-block j} q[i] * x[i]        (exact int)
//     msum = sum_j mn[j] * s32[j]                                       (exact int)
//     acc  = acc  + (d * dx) * (float)isum;  macc = macc + (dmin * dx) * (float)msum
//   y = acc - macc
// The scalar reference below and the AVX-512 path give the same bits (checked in main).
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; } block_q4_K;
#define G 16  // weight rows per interleaved group

static float h2f(uint16_t h) { return _cvtsh_ss(h); }
static void q4k_scales(const uint8_t *s, uint8_t sc[8], uint8_t mn[8]) {
    for (int j = 0; j < 4; j++) { sc[j] = s[j] & 63; mn[j] = s[j + 4] & 63; }
    for (int j = 4; j < 8; j++) {
        sc[j] = (uint8_t)((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
        mn[j] = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}
static int q4k_value(const block_q4_K *b, int e) {  // element e (0..255) of a super-block: 0..15
    const uint8_t *qs = b->qs + 32 * (e / 64);
    return (e % 64) < 32 ? (qs[e % 32] & 15) : (qs[e % 32] >> 4);
}

// repacked group of 16 rows, one super-block
typedef struct {
    float d[G], dmin[G];
    int32_t sc[8][G];        // widened at repack (prototype: simplest; a real layout keeps u8)
    int16_t mn[4][G][2];     // (mn[2p], mn[2p+1]) per lane, for vpdpwssd with s32 pairs
    uint8_t qs[32][64];      // 32 blocks of 64 B: low nibbles = group 2t (16 rows x 4 elems), high = 2t+1
} group_sb;

static void repack(const block_q4_K *rows[G], int nb, group_sb *out) {
    for (int b = 0; b < nb; b++) {
        group_sb *g = &out[b];
        for (int l = 0; l < G; l++) {
            const block_q4_K *blk = &rows[l][b];
            uint8_t sc[8], mn[8]; q4k_scales(blk->scales, sc, mn);
            g->d[l] = h2f(blk->d); g->dmin[l] = h2f(blk->dmin);
            for (int j = 0; j < 8; j++) g->sc[j][l] = sc[j];
            for (int p = 0; p < 4; p++) { g->mn[p][l][0] = mn[2 * p]; g->mn[p][l][1] = mn[2 * p + 1]; }
            for (int t = 0; t < 32; t++)        // groups 2t and 2t+1 of 4 elements: elements 8t..8t+7
                for (int e = 0; e < 4; e++) {
                    int lo = q4k_value(blk, 8 * t + e), hi = q4k_value(blk, 8 * t + 4 + e);
                    g->qs[t][4 * l + e] = (uint8_t)(lo | (hi << 4));
                }
        }
    }
}

// reference: straight from the definition, on the original blocks
static float dot_ref(const block_q4_K *w, const int8_t *x, const float *dx, const int16_t *s32, int nb) {
    float acc = 0.0f, macc = 0.0f;
    for (int b = 0; b < nb; b++) {
        uint8_t sc[8], mn[8]; q4k_scales(w[b].scales, sc, mn);
        int isum = 0, msum = 0;
        for (int j = 0; j < 8; j++) {
            int s = 0;
            for (int i = 0; i < 32; i++) s += q4k_value(&w[b], 32 * j + i) * x[256 * b + 32 * j + i];
            isum += sc[j] * s; msum += mn[j] * s32[8 * b + j];
        }
        acc = acc + (h2f(w[b].d) * dx[b]) * (float)isum;
        macc = macc + (h2f(w[b].dmin) * dx[b]) * (float)msum;
    }
    return acc - macc;
}

// AVX-512: one group of 16 weight rows x R activation rows (R <= 8)
static void group_avx512(const group_sb *g, int nb, const int8_t *x, const float *dx, const int16_t *s32,
                         int K, int R, float *out /* [R][G] */) {
    __m512 acc[8], macc[8];
    for (int r = 0; r < R; r++) { acc[r] = _mm512_setzero_ps(); macc[r] = _mm512_setzero_ps(); }
    const __m512i low4 = _mm512_set1_epi8(15);
    for (int b = 0; b < nb; b++, g++) {
        __m512i isum[8], msum[8];
        for (int r = 0; r < R; r++) { isum[r] = _mm512_setzero_si512(); msum[r] = _mm512_setzero_si512(); }
        for (int j = 0; j < 8; j++) {  // sub-block j: elements 32j..32j+31 = blocks t = 4j..4j+3
            __m512i part[8];
            for (int r = 0; r < R; r++) part[r] = _mm512_setzero_si512();
            for (int t = 4 * j; t < 4 * j + 4; t++) {
                const __m512i packed = _mm512_loadu_si512(g->qs[t]);
                const __m512i q0 = _mm512_and_si512(packed, low4), q1 = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low4);
                for (int r = 0; r < R; r++) {
                    const int8_t *xr = x + (size_t)r * K + 256 * b + 8 * t;
                    int32_t x0, x1; memcpy(&x0, xr, 4); memcpy(&x1, xr + 4, 4);
                    part[r] = _mm512_dpbusd_epi32(part[r], q0, _mm512_set1_epi32(x0));
                    part[r] = _mm512_dpbusd_epi32(part[r], q1, _mm512_set1_epi32(x1));
                }
            }
            const __m512i sc = _mm512_loadu_si512(g->sc[j]);
            for (int r = 0; r < R; r++) isum[r] = _mm512_add_epi32(isum[r], _mm512_mullo_epi32(part[r], sc));
        }
        for (int p = 0; p < 4; p++) {
            const __m512i mn = _mm512_loadu_si512(g->mn[p]);
            for (int r = 0; r < R; r++) {
                int32_t pair; memcpy(&pair, s32 + (size_t)r * (K / 32) + 8 * b + 2 * p, 4);
                msum[r] = _mm512_dpwssd_epi32(msum[r], mn, _mm512_set1_epi32(pair));
            }
        }
        const __m512 d = _mm512_loadu_ps(g->d), dmin = _mm512_loadu_ps(g->dmin);
        for (int r = 0; r < R; r++) {
            const __m512 sx = _mm512_set1_ps(dx[(size_t)r * (K / 256) + b]);
            acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(_mm512_mul_ps(d, sx), _mm512_cvtepi32_ps(isum[r])));
            macc[r] = _mm512_add_ps(macc[r], _mm512_mul_ps(_mm512_mul_ps(dmin, sx), _mm512_cvtepi32_ps(msum[r])));
        }
    }
    for (int r = 0; r < R; r++) _mm512_storeu_ps(out + r * G, _mm512_sub_ps(acc[r], macc[r]));
}

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }

int main(void) {
    const int N = 8960, K = 1536, nb = K / 256, M = 16;
    block_q4_K *W = aligned_alloc(64, sizeof(block_q4_K) * (size_t)N * nb);
    srand(1);
    for (size_t i = 0; i < (size_t)N * nb; i++) {
        uint8_t *p = (uint8_t *)&W[i]; for (size_t k = 0; k < sizeof(block_q4_K); k++) p[k] = rand();
        W[i].d = 0x1400 + (rand() & 0x3ff); W[i].dmin = 0x1000 + (rand() & 0x3ff);
    }
    group_sb *P = aligned_alloc(64, sizeof(group_sb) * (size_t)(N / G) * nb);
    for (int n = 0; n < N; n += G) {
        const block_q4_K *rows[G]; for (int l = 0; l < G; l++) rows[l] = W + (size_t)(n + l) * nb;
        repack(rows, nb, P + (size_t)(n / G) * nb);
    }
    // activations: int8 with per-256 scales and per-32 sums, as the engine's quantizer makes them
    int8_t *x = malloc((size_t)M * K); float *dx = malloc(sizeof(float) * M * nb); int16_t *s32 = malloc(2 * M * (K / 32));
    for (int i = 0; i < M * K; i++) x[i] = (int8_t)(rand() % 255 - 127);
    for (int i = 0; i < M * nb; i++) dx[i] = 0.01f + (rand() % 1000) * 1e-5f;
    for (int r = 0; r < M; r++) for (int g = 0; g < K / 32; g++) { int s = 0; for (int i = 0; i < 32; i++) s += x[r * K + 32 * g + i]; s32[r * (K / 32) + g] = (int16_t)s; }
    float *y = malloc(sizeof(float) * M * N), *tile = malloc(sizeof(float) * 8 * G);
    // correctness: every row count, against the reference
    int bad = 0;
    for (int R = 1; R <= 8; R++)
        for (int n = 0; n < N; n += G * 97) {
            group_avx512(P + (size_t)(n / G) * nb, nb, x, dx, s32, K, R, tile);
            for (int r = 0; r < R; r++) for (int l = 0; l < G; l++) {
                float ref = dot_ref(W + (size_t)(n + l) * nb, x + r * K, dx + r * nb, s32 + r * (K / 32), nb);
                if (memcmp(&ref, &tile[r * G + l], 4)) bad++;
            }
        }
    printf("bitwise vs reference: %s\n", bad ? "DIFFERS" : "equal for R = 1..8");
    int Ms[] = {1, 2, 4, 8, 16};
    for (int mi = 0; mi < 5; mi++) {
        int Mr = Ms[mi]; double best = 1e9;
        for (int rep = 0; rep < 30; rep++) {
            double t0 = now();
            #pragma omp parallel for schedule(static) num_threads(2)
            for (int grp = 0; grp < N / G; grp++) {
                float t[8 * G];
                for (int r0 = 0; r0 < Mr; r0 += 8) {
                    int R = Mr - r0 < 8 ? Mr - r0 : 8;
                    group_avx512(P + (size_t)grp * nb, nb, x + (size_t)r0 * K, dx + r0 * nb, s32 + r0 * (K / 32), K, R, t);
                    for (int r = 0; r < R; r++) memcpy(y + (size_t)(r0 + r) * N + grp * G, t + r * G, sizeof(float) * G);
                }
            }
            double el = now() - t0; if (el < best) best = el;
        }
        printf("M=%2d %.3f ms\n", Mr, best * 1e3);
    }
    return bad != 0;
}
