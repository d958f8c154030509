/*
 * Fused antialiased bilinear resample + normalize + layout, written into a caller's row.
 *
 * The filter and its coefficients follow Pillow's ImagingResample (a triangle filter
 * whose support grows with the downscale factor, weights normalized per output pixel,
 * sampling clamped to the image, not to the box), so results match Pillow's
 * resize(size, BILINEAR, box=...) to within one level: Pillow rounds its intermediate
 * pass to 8 bits, this keeps it in float.
 *
 * Only the box is computed: for each output row, the vertical pass reads the rows and
 * columns that row's taps touch and writes one intermediate row per channel (planar, so
 * the horizontal taps of one output value are contiguous); the horizontal pass then
 * produces the output row, applies the normalization affine, and writes CHW float32
 * straight into the destination (other layouts go through one planar row buffer). A horizontal flip is a reversed coefficient table; a vertical flip writes
 * rows bottom up.
 *
 * On x86-64 both passes have AVX2/FMA versions picked at run time; elsewhere, or when
 * forced with set_simd(False), the portable loops run (the compiler vectorizes them as
 * far as the target allows). The two agree to float rounding. The GIL is released for
 * the whole computation.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_AVX2_PATH 1
#include <immintrin.h>
#define AVX2_FN static __attribute__((target("avx2,fma")))
#else
#define HAVE_AVX2_PATH 0
#endif

/* Horizontal taps are padded to 4 (mild downscales: two output values per AVX2 vector)
   or to a multiple of 8 (one vector of floats). */
#define TAP_BLOCK 8

typedef struct {
    int *start; /* first source index per output index */
    int *size;  /* number of taps per output index */
    float *w;   /* taps, ksize per output index */
    int ksize;
} Coeffs;

/* Safe to call twice: coeffs_init frees on failure and run() frees again. */
static void coeffs_free(Coeffs *c) {
    free(c->start);
    free(c->size);
    free(c->w);
    c->start = NULL;
    c->size = NULL;
    c->w = NULL;
}

static double triangle(double x) {
    x = fabs(x);
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* Pillow's precompute_coeffs for the bilinear filter (support 1). */
static int coeffs_init(Coeffs *c, int in_size, double in0, double in1, int out_size) {
    double scale = (in1 - in0) / out_size;
    double filterscale = scale < 1.0 ? 1.0 : scale;
    double support = filterscale;
    /* An output index never reads more than the in_size source pixels: capping the
       table there keeps an extreme downscale (support ~ in_size) from overflowing int. */
    double taps = ceil(support) * 2 + 1;
    c->ksize = taps < (double)in_size ? (int)taps : in_size;
    c->start = malloc(sizeof(int) * (size_t)out_size);
    c->size = malloc(sizeof(int) * (size_t)out_size);
    c->w = calloc((size_t)out_size * c->ksize, sizeof(float));
    if (!c->start || !c->size || !c->w) {
        coeffs_free(c);
        return -1;
    }
    double ss = 1.0 / filterscale;
    double *tmp = malloc(sizeof(double) * (size_t)c->ksize);
    if (!tmp) {
        coeffs_free(c);
        return -1;
    }
    for (int xx = 0; xx < out_size; xx++) {
        double center = in0 + (xx + 0.5) * scale;
        /* clamped as doubles: converting an out-of-range double to int is undefined */
        double lo = center - support + 0.5, hi = center + support + 0.5;
        int xmin = lo < 0.0 ? 0 : (lo > (double)in_size ? in_size : (int)lo);
        int xmax = hi > (double)in_size ? in_size : (hi < 0.0 ? 0 : (int)hi);
        xmax -= xmin;
        if (xmax > c->ksize) xmax = c->ksize;
        if (xmax < 0) xmax = 0;
        double ww = 0.0;
        for (int x = 0; x < xmax; x++) {
            double w = triangle((x + xmin - center + 0.5) * ss);
            tmp[x] = w;
            ww += w;
        }
        for (int x = 0; x < xmax; x++) {
            c->w[(size_t)xx * c->ksize + x] = (float)(ww != 0.0 ? tmp[x] / ww : tmp[x]);
        }
        c->start[xx] = xmin;
        c->size[xx] = xmax;
    }
    free(tmp);
    return 0;
}

typedef struct {
    const uint8_t *src;
    int src_h, src_w, channels;
    double box[4];
    void *out;
    int out_h, out_w;
    int chw, out_float, hflip, vflip;
    float scale[4], bias[4];
} Job;

/* Everything one call needs besides the job: coefficient tables in the layout the
   passes read, and the scratch rows. */
typedef struct {
    const Coeffs *cy;
    int x_lo, x_n;  /* source columns the horizontal taps touch */
    int *hstart;    /* per output column (flip applied): first tap, relative to x_lo */
    float *hw;      /* per output column: kpad taps, zero past the real ones */
    int kpad;
    float *planes;  /* C intermediate rows of plane_len floats (zero padded) */
    size_t plane_len;
    float *tmp;     /* interleaved intermediate row (x_n * C floats) */
    float *line;    /* one output row, planar, C * out_w floats */
} Work;

/* -- portable passes ------------------------------------------------------------------ */

/* planes[c][x] = sum_k rows[k][x * C + c] * w[k] for x < x_n. */
static void vertical_scalar(const Work *wk, const uint8_t *restrict s0, size_t stride,
                            const float *restrict w, int taps, int C) {
    size_t n = (size_t)wk->x_n * C;
    float *restrict acc = C == 1 ? wk->planes : wk->tmp;
    for (size_t i = 0; i < n; i++) acc[i] = 0.0f;
    for (int k = 0; k < taps; k++) {
        const uint8_t *restrict row = s0 + (size_t)k * stride;
        float wk_ = w[k];
        for (size_t i = 0; i < n; i++) acc[i] += (float)row[i] * wk_;
    }
    if (C == 1) return;
    for (int c = 0; c < C; c++) {
        float *restrict plane = wk->planes + (size_t)c * wk->plane_len;
        for (int x = 0; x < wk->x_n; x++) plane[x] = acc[(size_t)x * C + c];
    }
}

/* dst[ox] = affine(sum_k plane[hstart[ox] + k] * hw[ox][k]) for ox < n. The common tap
   widths get constant trip counts, which the compiler unrolls and vectorizes. */
static inline void horizontal_taps(const Work *wk, const float *restrict plane,
                                   float *restrict dst, int n, int affine, float scale,
                                   float bias, const int kpad) {
    for (int ox = 0; ox < n; ox++) {
        const float *p = plane + wk->hstart[ox];
        const float *w = wk->hw + (size_t)ox * kpad;
        float acc = 0.0f;
        for (int k = 0; k < kpad; k++) acc += p[k] * w[k];
        dst[ox] = affine ? acc * scale + bias : acc;
    }
}

static void horizontal_scalar(const Work *wk, const float *restrict plane, float *restrict dst,
                              int n, int affine, float scale, float bias) {
    if (wk->kpad == 4)
        horizontal_taps(wk, plane, dst, n, affine, scale, bias, 4);
    else if (wk->kpad == 8)
        horizontal_taps(wk, plane, dst, n, affine, scale, bias, 8);
    else
        horizontal_taps(wk, plane, dst, n, affine, scale, bias, wk->kpad);
}

static void to_u8_scalar(const float *restrict v, uint8_t *restrict out, int n) {
    for (int i = 0; i < n; i++) {
        float r = floorf(v[i] + 0.5f);
        out[i] = (uint8_t)(r < 0.0f ? 0.0f : (r > 255.0f ? 255.0f : r));
    }
}

/* -- AVX2 / FMA passes ---------------------------------------------------------------- */

#if HAVE_AVX2_PATH
/* 8 bytes -> 8 floats */
AVX2_FN inline __m256 load8_u8(const uint8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

/* pf_a, pf_b: source rows the next output row needs that this one does not read; they are
   prefetched alongside (the hardware prefetcher only follows the rows being read). */
AVX2_FN void vertical_avx2(const Work *wk, const uint8_t *restrict s0, size_t stride,
                           const float *restrict w, int taps, int C, const uint8_t *pf_a,
                           const uint8_t *pf_b) {
    size_t n = (size_t)wk->x_n * C;
    size_t i = 0;
    if (C == 3) {
        /* 8 pixels (24 values) at a time, split into planes in registers: each channel's
           lanes come from disjoint lanes of the three vectors, so two blends and one
           permute gather them */
        float *r = wk->planes, *g = r + wk->plane_len, *b = g + wk->plane_len;
        const __m256i ir = _mm256_setr_epi32(0, 3, 6, 1, 4, 7, 2, 5);
        const __m256i ig = _mm256_setr_epi32(1, 4, 7, 2, 5, 0, 3, 6);
        const __m256i ib = _mm256_setr_epi32(2, 5, 0, 3, 6, 1, 4, 7);
        for (; i + 24 <= n; i += 24) {
            _mm_prefetch((const char *)(pf_a + i), _MM_HINT_T0);
            _mm_prefetch((const char *)(pf_b + i), _MM_HINT_T0);
            __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps();
            for (int k = 0; k < taps; k++) {
                const uint8_t *row = s0 + (size_t)k * stride + i;
                __m256 wv = _mm256_broadcast_ss(w + k);
                a0 = _mm256_fmadd_ps(load8_u8(row), wv, a0);
                a1 = _mm256_fmadd_ps(load8_u8(row + 8), wv, a1);
                a2 = _mm256_fmadd_ps(load8_u8(row + 16), wv, a2);
            }
            /* a0 = r0 g0 b0 r1 g1 b1 r2 g2, a1 = b2 r3 g3 b3 r4 g4 b4 r5,
               a2 = g5 b5 r6 g6 b6 r7 g7 b7 */
            __m256 rr = _mm256_blend_ps(_mm256_blend_ps(a0, a1, 0x92), a2, 0x24);
            __m256 gg = _mm256_blend_ps(_mm256_blend_ps(a0, a1, 0x24), a2, 0x49);
            __m256 bb = _mm256_blend_ps(_mm256_blend_ps(a0, a1, 0x49), a2, 0x92);
            size_t x = i / 3;
            _mm256_storeu_ps(r + x, _mm256_permutevar8x32_ps(rr, ir));
            _mm256_storeu_ps(g + x, _mm256_permutevar8x32_ps(gg, ig));
            _mm256_storeu_ps(b + x, _mm256_permutevar8x32_ps(bb, ib));
        }
        for (; i < n; i++) {
            float acc = 0.0f;
            for (int k = 0; k < taps; k++) acc += (float)s0[(size_t)k * stride + i] * w[k];
            wk->planes[(i % 3) * wk->plane_len + i / 3] = acc;
        }
        return;
    }
    float *acc = C == 1 ? wk->planes : wk->tmp;
    for (; i + 16 <= n; i += 16) {
        _mm_prefetch((const char *)(pf_a + i), _MM_HINT_T0);
        _mm_prefetch((const char *)(pf_b + i), _MM_HINT_T0);
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        for (int k = 0; k < taps; k++) {
            const uint8_t *row = s0 + (size_t)k * stride + i;
            __m256 wv = _mm256_broadcast_ss(w + k);
            a0 = _mm256_fmadd_ps(load8_u8(row), wv, a0);
            a1 = _mm256_fmadd_ps(load8_u8(row + 8), wv, a1);
        }
        _mm256_storeu_ps(acc + i, a0);
        _mm256_storeu_ps(acc + i + 8, a1);
    }
    for (; i < n; i++) {
        float a = 0.0f;
        for (int k = 0; k < taps; k++) a += (float)s0[(size_t)k * stride + i] * w[k];
        acc[i] = a;
    }
    if (C == 1) return;
    for (int c = 0; c < C; c++) {
        float *plane = wk->planes + (size_t)c * wk->plane_len;
        for (int x = 0; x < wk->x_n; x++) plane[x] = acc[(size_t)x * C + c];
    }
}

/* Lane i of the result is the sum of the lanes of v_i: a transposing tree of adds. */
AVX2_FN inline __m256 sum_lanes8(__m256 v0, __m256 v1, __m256 v2, __m256 v3, __m256 v4,
                                 __m256 v5, __m256 v6, __m256 v7) {
    __m256 t0 = _mm256_hadd_ps(_mm256_hadd_ps(v0, v1), _mm256_hadd_ps(v2, v3));
    __m256 t1 = _mm256_hadd_ps(_mm256_hadd_ps(v4, v5), _mm256_hadd_ps(v6, v7));
    return _mm256_add_ps(_mm256_permute2f128_ps(t0, t1, 0x20),
                         _mm256_permute2f128_ps(t0, t1, 0x31));
}

/* One output value's taps (kpad of them) times its weights, as a vector to be summed. */
AVX2_FN inline __m256 taps_product(const float *p, const float *w, int kpad) {
    __m256 a = _mm256_mul_ps(_mm256_loadu_ps(p), _mm256_load_ps(w));
    for (int k = TAP_BLOCK; k < kpad; k += TAP_BLOCK)
        a = _mm256_fmadd_ps(_mm256_loadu_ps(p + k), _mm256_load_ps(w + k), a);
    return a;
}

/* Eight output columns at a time, every channel: one product vector per output value,
   then one tree of horizontal adds for eight values. kpad == 4 (downscales below about
   1.5x) packs two output values per vector; kpad == 8 (below about 3.5x) has its own
   loop, so the eight tap pointers stay in registers. */
AVX2_FN void horizontal_avx2(const Work *wk, int C, float *const *dst, int n, int affine,
                             const float *scale, const float *bias) {
    const int kpad = wk->kpad;
    const size_t pl = wk->plane_len;
    const int *hs = wk->hstart;
    const float *hw = wk->hw;
    const float *planes = wk->planes;
    int ox = 0;
    if (kpad == 4) {
        const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        for (; ox + 8 <= n; ox += 8, hs += 8, hw += 32) {
            const float *p0 = planes + hs[0], *p1 = planes + hs[1], *p2 = planes + hs[2];
            const float *p3 = planes + hs[3], *p4 = planes + hs[4], *p5 = planes + hs[5];
            const float *p6 = planes + hs[6], *p7 = planes + hs[7];
            for (int c = 0; c < C; c++) {
                size_t o = (size_t)c * pl;
                /* [taps of value i | taps of value k] times their weights */
#define T4(i, k)                                                                          \
    _mm256_mul_ps(_mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(p##i + o)), \
                                       _mm_loadu_ps(p##k + o), 1),                       \
                  _mm256_load_ps(hw + 4 * i))
                __m256 h1 = _mm256_hadd_ps(T4(0, 1), T4(2, 3));
                __m256 h2 = _mm256_hadd_ps(T4(4, 5), T4(6, 7));
#undef T4
                /* lanes hold values 0 2 4 6 | 1 3 5 7 */
                __m256 sum = _mm256_permutevar8x32_ps(_mm256_hadd_ps(h1, h2), order);
                if (affine) sum = _mm256_fmadd_ps(sum, _mm256_set1_ps(scale[c]),
                                                  _mm256_set1_ps(bias[c]));
                _mm256_storeu_ps(dst[c] + ox, sum);
            }
        }
    } else if (kpad == 8) {
        for (; ox + 8 <= n; ox += 8, hs += 8, hw += 64) {
            const float *p0 = planes + hs[0], *p1 = planes + hs[1], *p2 = planes + hs[2];
            const float *p3 = planes + hs[3], *p4 = planes + hs[4], *p5 = planes + hs[5];
            const float *p6 = planes + hs[6], *p7 = planes + hs[7];
            for (int c = 0; c < C; c++) {
                size_t o = (size_t)c * pl;
#define T8(i) _mm256_mul_ps(_mm256_loadu_ps(p##i + o), _mm256_load_ps(hw + 8 * i))
                __m256 sum = sum_lanes8(T8(0), T8(1), T8(2), T8(3), T8(4), T8(5), T8(6), T8(7));
#undef T8
                if (affine) sum = _mm256_fmadd_ps(sum, _mm256_set1_ps(scale[c]),
                                                  _mm256_set1_ps(bias[c]));
                _mm256_storeu_ps(dst[c] + ox, sum);
            }
        }
    } else {
        for (; ox + 8 <= n; ox += 8, hs += 8, hw += (size_t)8 * kpad) {
            for (int c = 0; c < C; c++) {
                const float *p = planes + (size_t)c * pl;
#define TK(i) taps_product(p + hs[i], hw + (size_t)(i) * kpad, kpad)
                __m256 sum = sum_lanes8(TK(0), TK(1), TK(2), TK(3), TK(4), TK(5), TK(6), TK(7));
#undef TK
                if (affine) sum = _mm256_fmadd_ps(sum, _mm256_set1_ps(scale[c]),
                                                  _mm256_set1_ps(bias[c]));
                _mm256_storeu_ps(dst[c] + ox, sum);
            }
        }
    }
    if (ox < n) {
        Work rest = *wk;
        rest.hstart += ox;
        rest.hw += (size_t)ox * kpad;
        for (int c = 0; c < C; c++)
            horizontal_scalar(&rest, planes + (size_t)c * pl, dst[c] + ox, n - ox, affine,
                              scale[c], bias[c]);
    }
}

AVX2_FN void to_u8_avx2(const float *restrict v, uint8_t *restrict out, int n) {
    const __m256 lo = _mm256_setzero_ps(), hi = _mm256_set1_ps(255.0f);
    const __m256 half = _mm256_set1_ps(0.5f);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_add_ps(_mm256_min_ps(_mm256_max_ps(_mm256_loadu_ps(v + i), lo), hi), half);
        __m256i q = _mm256_cvttps_epi32(x); /* floor(x + 0.5) for x >= 0 */
        __m128i w16 = _mm_packus_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
        _mm_storel_epi64((__m128i *)(out + i), _mm_packus_epi16(w16, w16));
    }
    to_u8_scalar(v + i, out + i, n - i);
}
#endif

/* -- driver --------------------------------------------------------------------------- */

static int use_simd = -1; /* -1: not decided yet */

static int simd_supported(void) {
#if HAVE_AVX2_PATH
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

/* Write one finished output row (planar, line[c * out_w + x]) where it belongs. */
static void emit_row(const Job *j, const float *restrict line, int dy, int C, int simd) {
    int W = j->out_w;
    size_t plane = (size_t)j->out_h * W;
    size_t row0 = (size_t)dy * W;
    if (j->chw && !j->out_float) {
        for (int c = 0; c < C; c++) {
            uint8_t *dst = (uint8_t *)j->out + (size_t)c * plane + row0;
#if HAVE_AVX2_PATH
            if (simd) {
                to_u8_avx2(line + (size_t)c * W, dst, W);
                continue;
            }
#endif
            to_u8_scalar(line + (size_t)c * W, dst, W);
        }
        return;
    }
    (void)simd;
    /* HWC */
    for (int c = 0; c < C; c++) {
        const float *src = line + (size_t)c * W;
        if (j->out_float) {
            float *dst = (float *)j->out + row0 * C + c;
            for (int x = 0; x < W; x++) dst[(size_t)x * C] = src[x];
        } else {
            uint8_t *dst = (uint8_t *)j->out + row0 * C + c;
            for (int x = 0; x < W; x++) {
                float r = floorf(src[x] + 0.5f);
                dst[(size_t)x * C] = (uint8_t)(r < 0.0f ? 0.0f : (r > 255.0f ? 255.0f : r));
            }
        }
    }
}

static void resample_rows(const Job *j, const Work *wk, int simd) {
    const int C = j->channels;
    const size_t src_stride = (size_t)j->src_w * C;
    const Coeffs *cy = wk->cy;
    const int direct = j->chw && j->out_float; /* the horizontal pass writes the output */
    const size_t out_plane = (size_t)j->out_h * j->out_w;
    for (int oy = 0; oy < j->out_h; oy++) {
        const uint8_t *s0 = j->src + (size_t)cy->start[oy] * src_stride + (size_t)wk->x_lo * C;
        const float *w = cy->w + (size_t)oy * cy->ksize;
        int dy = j->vflip ? j->out_h - 1 - oy : oy;
#if HAVE_AVX2_PATH
        if (simd) {
            /* rows of the next output row's taps past this one's last row */
            const uint8_t *pf_a = s0, *pf_b = s0;
            if (oy + 1 < j->out_h) {
                int first = cy->start[oy] + cy->size[oy], last = cy->start[oy + 1] + cy->size[oy + 1] - 1;
                if (first < cy->start[oy + 1]) first = cy->start[oy + 1];
                if (first <= last) {
                    pf_a = s0 + (size_t)(first - cy->start[oy]) * src_stride;
                    pf_b = s0 + (size_t)(last - cy->start[oy]) * src_stride;
                }
            }
            vertical_avx2(wk, s0, src_stride, w, cy->size[oy], C, pf_a, pf_b);
        } else
#endif
            vertical_scalar(wk, s0, src_stride, w, cy->size[oy], C);
        float *dst[4];
        for (int c = 0; c < C; c++)
            dst[c] = direct ? (float *)j->out + c * out_plane + (size_t)dy * j->out_w
                            : wk->line + (size_t)c * j->out_w;
#if HAVE_AVX2_PATH
        if (simd) {
            horizontal_avx2(wk, C, dst, j->out_w, j->out_float, j->scale, j->bias);
        } else
#endif
        {
            for (int c = 0; c < C; c++)
                horizontal_scalar(wk, wk->planes + (size_t)c * wk->plane_len, dst[c], j->out_w,
                                  j->out_float, j->scale[c], j->bias[c]);
        }
        if (!direct) emit_row(j, wk->line, dy, C, simd);
    }
}

static void *alloc_zeroed(size_t count, size_t size) {
    size_t bytes = (count * size + 31) / 32 * 32;
    void *p = aligned_alloc(32, bytes ? bytes : 32);
    if (p) memset(p, 0, bytes);
    return p;
}

/* Returns 0 on success, -1 when memory ran out. */
static int run(const Job *j, int simd) {
    Coeffs cx = {0}, cy = {0};
    Work wk = {0};
    int C = j->channels, status = -1;
    if (coeffs_init(&cx, j->src_w, j->box[0], j->box[2], j->out_w) < 0) return -1;
    if (coeffs_init(&cy, j->src_h, j->box[1], j->box[3], j->out_h) < 0) goto done;
    int x_lo = j->src_w, x_hi = 0, taps = 1;
    for (int i = 0; i < j->out_w; i++) {
        if (cx.start[i] < x_lo) x_lo = cx.start[i];
        if (cx.start[i] + cx.size[i] > x_hi) x_hi = cx.start[i] + cx.size[i];
        if (cx.size[i] > taps) taps = cx.size[i];
    }
    if (x_hi < x_lo) x_hi = x_lo;
    wk.cy = &cy;
    wk.x_lo = x_lo;
    wk.x_n = x_hi - x_lo;
    wk.kpad = taps <= 4 ? 4 : (taps + TAP_BLOCK - 1) / TAP_BLOCK * TAP_BLOCK;
    /* padded so a full kpad read from any column's first tap stays inside, on zeros */
    wk.plane_len = (size_t)wk.x_n + wk.kpad + TAP_BLOCK;
    wk.hstart = malloc(sizeof(int) * (size_t)j->out_w);
    wk.hw = alloc_zeroed((size_t)j->out_w * wk.kpad, sizeof(float));
    wk.planes = alloc_zeroed(wk.plane_len * C, sizeof(float));
    wk.tmp = alloc_zeroed((size_t)wk.x_n * C + 1, sizeof(float));
    wk.line = alloc_zeroed((size_t)j->out_w * C, sizeof(float));
    if (!wk.hstart || !wk.hw || !wk.planes || !wk.tmp || !wk.line) goto done;
    for (int ox = 0; ox < j->out_w; ox++) {
        int sx = j->hflip ? j->out_w - 1 - ox : ox;
        wk.hstart[ox] = cx.start[sx] - x_lo;
        memcpy(wk.hw + (size_t)ox * wk.kpad, cx.w + (size_t)sx * cx.ksize,
               sizeof(float) * (size_t)cx.size[sx]);
    }
    resample_rows(j, &wk, simd);
    status = 0;
done:
    free(wk.hstart);
    free(wk.hw);
    free(wk.planes);
    free(wk.tmp);
    free(wk.line);
    coeffs_free(&cx);
    coeffs_free(&cy);
    return status;
}

static int read_floats(PyObject *obj, float *dst, int n, float fill, const char *what) {
    for (int i = 0; i < 4; i++) dst[i] = fill;
    if (obj == Py_None) return 0;
    PyObject *seq = PySequence_Fast(obj, what);
    if (!seq) return -1;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
    if (len != n) {
        PyErr_Format(PyExc_ValueError, "%s needs %d values, got %zd", what, n, len);
        Py_DECREF(seq);
        return -1;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        double v = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, i));
        if (v == -1.0 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
        dst[i] = (float)v;
    }
    Py_DECREF(seq);
    return 0;
}

PyDoc_STRVAR(resample_into_doc,
             "resample_into(src, src_h, src_w, channels, box, out, out_h, out_w, chw, "
             "out_float, scale, bias, hflip, vflip)\n\n"
             "Resample the box (left, top, right, bottom) of a uint8 HWC image into out.");

static PyObject *resample_into(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer src, out;
    Job j;
    PyObject *scale_obj, *bias_obj;
    if (!PyArg_ParseTuple(args, "y*iii(dddd)w*iippOOpp", &src, &j.src_h, &j.src_w, &j.channels,
                          &j.box[0], &j.box[1], &j.box[2], &j.box[3], &out, &j.out_h, &j.out_w,
                          &j.chw, &j.out_float, &scale_obj, &bias_obj, &j.hflip, &j.vflip)) {
        return NULL;
    }
    PyObject *result = NULL;
    size_t item = j.out_float ? sizeof(float) : 1;
    /* sides below INT_MAX - 64: tap counts (up to a side) are padded to whole vectors */
    if (j.channels < 1 || j.channels > 4 || j.src_h < 1 || j.src_w < 1 || j.out_h < 1 ||
        j.out_w < 1 || j.src_h > INT_MAX - 64 || j.src_w > INT_MAX - 64) {
        PyErr_SetString(PyExc_ValueError, "resample_into: bad sizes or channel count");
    } else if ((size_t)src.len < (size_t)j.src_h * j.src_w * j.channels) {
        PyErr_SetString(PyExc_ValueError, "resample_into: source buffer is too small");
    } else if ((size_t)out.len != (size_t)j.out_h * j.out_w * j.channels * item) {
        PyErr_SetString(PyExc_ValueError, "resample_into: output buffer has the wrong size");
    } else if (!(j.box[0] >= 0 && j.box[1] >= 0 && j.box[2] <= j.src_w && j.box[3] <= j.src_h &&
                 j.box[0] < j.box[2] && j.box[1] < j.box[3])) {
        PyErr_SetString(PyExc_ValueError, "resample_into: box outside the image");
    } else if (read_floats(scale_obj, j.scale, j.channels, 1.0f, "scale") == 0 &&
               read_floats(bias_obj, j.bias, j.channels, 0.0f, "bias") == 0) {
        j.src = src.buf;
        j.out = out.buf;
        int status, simd = use_simd;
        Py_BEGIN_ALLOW_THREADS status = run(&j, simd);
        Py_END_ALLOW_THREADS if (status < 0) PyErr_NoMemory();
        else {
            Py_INCREF(Py_None);
            result = Py_None;
        }
    }
    PyBuffer_Release(&src);
    PyBuffer_Release(&out);
    return result;
}

PyDoc_STRVAR(set_simd_doc,
             "set_simd(enabled)\n\n"
             "Use the SIMD passes when enabled and the CPU has them, else the portable ones "
             "(for tests). Returns the name of the passes now in use.");

static const char *simd_name(void) { return use_simd ? "avx2" : "portable"; }

static PyObject *set_simd(PyObject *Py_UNUSED(self), PyObject *arg) {
    int enabled = PyObject_IsTrue(arg);
    if (enabled < 0) return NULL;
    use_simd = enabled && simd_supported();
    return PyUnicode_FromString(simd_name());
}

PyDoc_STRVAR(simd_doc, "simd()\n\nThe name of the passes in use: 'avx2' or 'portable'.");

static PyObject *simd(PyObject *Py_UNUSED(self), PyObject *Py_UNUSED(noargs)) {
    return PyUnicode_FromString(simd_name());
}

static PyMethodDef methods[] = {
    {"resample_into", resample_into, METH_VARARGS, resample_into_doc},
    {"set_simd", set_simd, METH_O, set_simd_doc},
    {"simd", simd, METH_NOARGS, simd_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_resample",
    .m_doc = "Fused image resampling kernels.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__resample(void) {
    use_simd = simd_supported();
    return PyModule_Create(&module);
}
