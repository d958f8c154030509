/*
 * Fused antialiased bilinear resample + normalize + layout, written into a caller's row.
 *
 * The filter and its coefficients follow Pillow's ImagingResample (a triangle filter
 * whose support grows with the downscale factor, weights normalized per output pixel,
 * sampling clamped to the image, not to the box), so results match Pillow's
 * resize(size, BILINEAR, box=...) to within one level: Pillow rounds its intermediate
 * pass to 8 bits, this keeps it in float.
 *
 * For each output row, the vertical pass runs first over contiguous source rows (it
 * vectorizes over the whole row) into one small intermediate row; the horizontal pass
 * then produces each output pixel and writes it straight to its place: CHW or HWC,
 * mirrored if asked, as float32 (x * scale + bias) or uint8.
 * The GIL is released for the whole computation.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <xmmintrin.h>
#include <emmintrin.h>
#endif

typedef struct {
    int *start; /* first source index per output index */
    int *size;  /* number of taps per output index */
    float *w;   /* taps, ksize per output index */
    int ksize;
} Coeffs;

static void coeffs_free(Coeffs *c) {
    free(c->start);
    free(c->size);
    free(c->w);
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
    c->ksize = (int)ceil(support) * 2 + 1;
    c->start = malloc(sizeof(int) * out_size);
    c->size = malloc(sizeof(int) * out_size);
    c->w = calloc((size_t)out_size * c->ksize, sizeof(float));
    if (!c->start || !c->size || !c->w) {
        coeffs_free(c);
        return -1;
    }
    double ss = 1.0 / filterscale;
    double *tmp = malloc(sizeof(double) * c->ksize);
    if (!tmp) {
        coeffs_free(c);
        return -1;
    }
    for (int xx = 0; xx < out_size; xx++) {
        double center = in0 + (xx + 0.5) * scale;
        int xmin = (int)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int xmax = (int)(center + support + 0.5);
        if (xmax > in_size) xmax = in_size;
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

/* tmp[i] = sum_k rows[k][i] * w[k] for i < n: the vertical pass over one output row. */
static void vertical(float *restrict tmp, const uint8_t *restrict s0, size_t stride,
                     const float *restrict w, int taps, size_t n) {
    size_t i = 0;
#ifdef __SSE2__
    const __m128i zero = _mm_setzero_si128();
    for (; i + 16 <= n; i += 16) {
        __m128 a0 = _mm_setzero_ps(), a1 = _mm_setzero_ps();
        __m128 a2 = _mm_setzero_ps(), a3 = _mm_setzero_ps();
        for (int k = 0; k < taps; k++) {
            __m128i v = _mm_loadu_si128((const __m128i *)(s0 + (size_t)k * stride + i));
            __m128i lo = _mm_unpacklo_epi8(v, zero), hi = _mm_unpackhi_epi8(v, zero);
            __m128 wk = _mm_set1_ps(w[k]);
            a0 = _mm_add_ps(a0, _mm_mul_ps(_mm_cvtepi32_ps(_mm_unpacklo_epi16(lo, zero)), wk));
            a1 = _mm_add_ps(a1, _mm_mul_ps(_mm_cvtepi32_ps(_mm_unpackhi_epi16(lo, zero)), wk));
            a2 = _mm_add_ps(a2, _mm_mul_ps(_mm_cvtepi32_ps(_mm_unpacklo_epi16(hi, zero)), wk));
            a3 = _mm_add_ps(a3, _mm_mul_ps(_mm_cvtepi32_ps(_mm_unpackhi_epi16(hi, zero)), wk));
        }
        _mm_storeu_ps(tmp + i, a0);
        _mm_storeu_ps(tmp + i + 4, a1);
        _mm_storeu_ps(tmp + i + 8, a2);
        _mm_storeu_ps(tmp + i + 12, a3);
    }
#endif
    for (; i < n; i++) {
        float acc = 0.0f;
        for (int k = 0; k < taps; k++) acc += (float)s0[(size_t)k * stride + i] * w[k];
        tmp[i] = acc;
    }
}

/* Write one finished output row (line: out_w pixels of 4 floats, already mirrored and
   normalized) to its place in the destination. */
static inline void emit_row(const Job *j, const float *restrict line, int dy, const int C,
                            const int chw, const int out_float) {
    int W = j->out_w;
    size_t plane = (size_t)j->out_h * W;
    size_t row0 = (size_t)dy * W;
    int x = 0;
    if (out_float && chw) {
        float *out = (float *)j->out;
#ifdef __SSE2__
        if (C == 3 || C == 4) {
            for (; x + 4 <= W; x += 4) {
                __m128 p0 = _mm_loadu_ps(line + (size_t)x * 4);
                __m128 p1 = _mm_loadu_ps(line + (size_t)x * 4 + 4);
                __m128 p2 = _mm_loadu_ps(line + (size_t)x * 4 + 8);
                __m128 p3 = _mm_loadu_ps(line + (size_t)x * 4 + 12);
                _MM_TRANSPOSE4_PS(p0, p1, p2, p3);
                _mm_storeu_ps(out + row0 + x, p0);
                _mm_storeu_ps(out + plane + row0 + x, p1);
                _mm_storeu_ps(out + 2 * plane + row0 + x, p2);
                if (C == 4) _mm_storeu_ps(out + 3 * plane + row0 + x, p3);
            }
        }
#endif
        for (; x < W; x++)
            for (int c = 0; c < C; c++) out[(size_t)c * plane + row0 + x] = line[(size_t)x * 4 + c];
        return;
    }
#ifdef __SSE2__
    if (!out_float && chw && (C == 3 || C == 4)) {
        uint8_t *out = (uint8_t *)j->out;
        const __m128 lo = _mm_setzero_ps(), hi = _mm_set1_ps(255.0f), half = _mm_set1_ps(0.5f);
        for (; x + 4 <= W; x += 4) {
            __m128 p[4];
            for (int i = 0; i < 4; i++) p[i] = _mm_loadu_ps(line + (size_t)(x + i) * 4);
            _MM_TRANSPOSE4_PS(p[0], p[1], p[2], p[3]);
            for (int c = 0; c < C; c++) {
                __m128 v = _mm_add_ps(_mm_min_ps(_mm_max_ps(p[c], lo), hi), half);
                __m128i n = _mm_cvttps_epi32(v); /* floor(v + 0.5) for v >= 0 */
                n = _mm_packus_epi16(_mm_packs_epi32(n, n), n);
                int32_t four = _mm_cvtsi128_si32(n);
                memcpy(out + (size_t)c * plane + row0 + x, &four, 4);
            }
        }
    }
#endif
    for (; x < W; x++) {
        for (int c = 0; c < C; c++) {
            size_t at = chw ? (size_t)c * plane + row0 + x : (row0 + x) * C + c;
            float v = line[(size_t)x * 4 + c];
            if (out_float) {
                ((float *)j->out)[at] = v;
            } else {
                float r = floorf(v + 0.5f);
                ((uint8_t *)j->out)[at] = (uint8_t)(r < 0.0f ? 0.0f : (r > 255.0f ? 255.0f : r));
            }
        }
    }
}

/* Both passes for all output rows; inlined per (C, chw, out_float) so loops specialize. */
static inline void resample_rows(const Job *j, const Coeffs *cx, const Coeffs *cy,
                                 float *restrict tmp, float *restrict line, int x_lo, int x_n,
                                 const int C, const int chw, const int out_float) {
    size_t src_stride = (size_t)j->src_w * C;
    size_t row_len = (size_t)x_n * C;
#ifdef __SSE2__
    const __m128 scale = _mm_loadu_ps(j->scale), bias = _mm_loadu_ps(j->bias);
#endif
    for (int oy = 0; oy < j->out_h; oy++) {
        const uint8_t *s0 = j->src + (size_t)cy->start[oy] * src_stride + (size_t)x_lo * C;
        vertical(tmp, s0, src_stride, cy->w + (size_t)oy * cy->ksize, cy->size[oy], row_len);
        for (int ox = 0; ox < j->out_w; ox++) {
            int dx = j->hflip ? j->out_w - 1 - ox : ox;
            const float *wx = cx->w + (size_t)ox * cx->ksize;
            const float *p = tmp + (size_t)(cx->start[ox] - x_lo) * C;
            float *acc = line + (size_t)dx * 4;
            int taps = cx->size[ox];
#ifdef __SSE2__
            if (C > 1) {
                /* one vector per tap holds every channel (lanes past C are ignored; tmp
                   is padded so the last load stays inside it) */
                __m128 a = _mm_setzero_ps();
                for (int k = 0; k < taps; k++)
                    a = _mm_add_ps(a, _mm_mul_ps(_mm_loadu_ps(p + k * C), _mm_set1_ps(wx[k])));
                if (out_float) a = _mm_add_ps(_mm_mul_ps(a, scale), bias);
                _mm_storeu_ps(acc, a);
                continue;
            }
#endif
            for (int c = 0; c < 4; c++) acc[c] = 0.0f;
            for (int k = 0; k < taps; k++)
                for (int c = 0; c < C; c++) acc[c] += p[k * C + c] * wx[k];
            if (out_float)
                for (int c = 0; c < C; c++) acc[c] = acc[c] * j->scale[c] + j->bias[c];
        }
        emit_row(j, line, j->vflip ? j->out_h - 1 - oy : oy, C, chw, out_float);
    }
}

#define DISPATCH(C)                                                                    \
    do {                                                                               \
        if (j->chw && j->out_float) resample_rows(j, &cx, &cy, tmp, line, x_lo, x_n, C, 1, 1); \
        else if (j->chw) resample_rows(j, &cx, &cy, tmp, line, x_lo, x_n, C, 1, 0);    \
        else if (j->out_float) resample_rows(j, &cx, &cy, tmp, line, x_lo, x_n, C, 0, 1); \
        else resample_rows(j, &cx, &cy, tmp, line, x_lo, x_n, C, 0, 0);                \
    } while (0)

/* Returns 0 on success, -1 when memory ran out. */
static int run(const Job *j) {
    Coeffs cx = {0}, cy = {0};
    int C = j->channels;
    if (coeffs_init(&cx, j->src_w, j->box[0], j->box[2], j->out_w) < 0) return -1;
    if (coeffs_init(&cy, j->src_h, j->box[1], j->box[3], j->out_h) < 0) {
        coeffs_free(&cx);
        return -1;
    }
    int x_lo = j->src_w, x_hi = 0;
    for (int i = 0; i < j->out_w; i++) {
        if (cx.start[i] < x_lo) x_lo = cx.start[i];
        if (cx.start[i] + cx.size[i] > x_hi) x_hi = cx.start[i] + cx.size[i];
    }
    if (x_hi < x_lo) x_hi = x_lo;
    int x_n = x_hi - x_lo;
    /* one intermediate row, reused (it stays in L1), padded for 4-float loads, and one
       output row of 4-float pixels */
    float *tmp = calloc((size_t)x_n * C + 4, sizeof(float));
    float *line = calloc((size_t)j->out_w * 4, sizeof(float));
    if (!tmp || !line) {
        free(tmp);
        free(line);
        coeffs_free(&cx);
        coeffs_free(&cy);
        return -1;
    }
    switch (C) {
        case 1: DISPATCH(1); break;
        case 3: DISPATCH(3); break;
        case 4: DISPATCH(4); break;
        default: DISPATCH(2); break;
    }
    free(tmp);
    free(line);
    coeffs_free(&cx);
    coeffs_free(&cy);
    return 0;
}

static int read_floats(PyObject *obj, float *dst, int n, float fill, const char *what) {
    for (int i = 0; i < 4; i++) dst[i] = fill; /* every lane: unused ones enter vector math */
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

static PyObject *resample_into(PyObject *self, PyObject *args) {
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
    if (j.channels < 1 || j.channels > 4 || j.src_h < 1 || j.src_w < 1 || j.out_h < 1 ||
        j.out_w < 1) {
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
        int status;
        Py_BEGIN_ALLOW_THREADS status = run(&j);
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

static PyMethodDef methods[] = {
    {"resample_into", resample_into, METH_VARARGS, resample_into_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_resample", "Fused image resampling kernels.", -1, methods,
};

PyMODINIT_FUNC PyInit__resample(void) { return PyModule_Create(&module); }
