/*
 * JPEG decode of a region, at a DCT scale, through libjpeg-turbo's own API.
 *
 * A resize-then-crop chain needs only the pixels under its crop box: for the classic
 * "short side to 256, center 224" chain that is about 60% of the image. libjpeg-turbo
 * can skip the IDCT, upsampling and color conversion of the columns left and right of a
 * region (jpeg_crop_scanline), skip the rows above it without producing them
 * (jpeg_skip_scanlines) and stop after its last row, so decoding the region costs
 * measurably less than decoding the image and slicing (~20% here).
 *
 * Column cropping and row skipping start at an iMCU boundary, so the region handed
 * back may be wider and taller than asked; its first and last columns can differ from a full decode (smooth chroma
 * upsampling there has no neighbour), so callers ask for one pixel of margin more than
 * they use. Rows are exact. Warnings (corrupt or truncated data) are errors, as in a
 * strict decode. The GIL is released while libjpeg works, except for the one moment the
 * output bytearray is allocated, once its size is known.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
    int out_of_memory; /* libjpeg could not allocate (not a corrupt file) */
} ErrorManager;

static void fail_exit(j_common_ptr cinfo) {
    ErrorManager *err = (ErrorManager *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, err->message);
    err->out_of_memory = cinfo->err->msg_code == JERR_OUT_OF_MEMORY;
    longjmp(err->jump, 1);
}

/* A warning (level -1) means corrupt or truncated data: treat it as an error. */
static void emit_message(j_common_ptr cinfo, int level) {
    if (level < 0) {
        fail_exit(cinfo);
    }
}

/* Output color space per channel count: 1 gray, 3 RGB, 4 RGBA (alpha 255). */
static int color_space(int channels, J_COLOR_SPACE *space) {
    switch (channels) {
    case 1: *space = JCS_GRAYSCALE; return 0;
    case 3: *space = JCS_RGB; return 0;
#ifdef JCS_EXTENSIONS
    case 4: *space = JCS_EXT_RGBA; return 0;
#endif
    default: return -1;
    }
}

enum { DONE = 0, FAILED = 1, NO_MEMORY = 2, UNSUPPORTED = 3, SHORT = 4 };

PyDoc_STRVAR(decode_region_doc,
"decode_region(data, channels, denom, x0, y0, x1, y1, fast_idct, fast_upsample)\n"
"\n"
"Decode the region [x0, x1) x [y0, y1) (in pixels of the image decoded at 1/denom)\n"
"of a JPEG. Returns (pixels, x, y, width, height): pixels is a bytearray of\n"
"height x width x channels uint8 values covering the decoded region whose top-left\n"
"pixel is (x, y); the region holds the one asked for and may be wider or start\n"
"higher (columns and rows are widened to iMCU boundaries). Returns None\n"
"for color spaces libjpeg cannot convert to the asked channels (CMYK, YCCK, or\n"
"any other that gives a different number of components).\n"
"Raises ValueError on corrupt or truncated data, MemoryError when libjpeg or the\n"
"output cannot be allocated.");

static PyObject *decode_region(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer data;
    int channels, denom, x0, y0, x1, y1, fast_idct, fast_upsample;
    if (!PyArg_ParseTuple(args, "y*iiiiiipp", &data, &channels, &denom, &x0, &y0, &x1, &y1,
                          &fast_idct, &fast_upsample)) {
        return NULL;
    }
    J_COLOR_SPACE chosen;
    if (color_space(channels, &chosen) < 0 || (denom != 1 && denom != 2 && denom != 4 && denom != 8)) {
        PyBuffer_Release(&data);
        PyErr_Format(PyExc_ValueError, "unsupported channels %d or scale 1/%d", channels, denom);
        return NULL;
    }

    volatile J_COLOR_SPACE space = chosen; /* read after setjmp */
    struct jpeg_decompress_struct cinfo;
    ErrorManager err;
    PyObject *volatile out = NULL;
    volatile int status = DONE;
    volatile int started = 0;
    /* volatile: set between setjmp and a longjmp back, and read after it */
    volatile JDIMENSION left = 0, width = 0;
    volatile int top = 0, bottom = 0;

    memset(&cinfo, 0, sizeof(cinfo));
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = fail_exit;
    err.pub.emit_message = emit_message;
    err.message[0] = '\0';
    err.out_of_memory = 0;

    Py_BEGIN_ALLOW_THREADS
    if (setjmp(err.jump)) {
        status = FAILED;
    } else {
        jpeg_create_decompress(&cinfo);
        started = 1;
        jpeg_mem_src(&cinfo, (const unsigned char *)data.buf, (unsigned long)data.len);
        jpeg_read_header(&cinfo, TRUE);
        if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
            status = UNSUPPORTED;
        } else {
            cinfo.out_color_space = space;
            cinfo.scale_num = 1;
            cinfo.scale_denom = (unsigned int)denom;
            cinfo.dct_method = fast_idct ? JDCT_IFAST : JDCT_ISLOW;
            cinfo.do_fancy_upsampling = fast_upsample ? FALSE : TRUE;
            jpeg_start_decompress(&cinfo);
            /* Rows below are sized for `channels` values per pixel: a frame libjpeg
               converts to another count (an unusual color space) would overflow them. */
            if (cinfo.output_components != channels) {
                status = UNSUPPORTED;
                goto finish;
            }
            int full_w = (int)cinfo.output_width, full_h = (int)cinfo.output_height;
            if (x0 < 0) x0 = 0;
            if (y0 < 0) y0 = 0;
            if (x1 > full_w) x1 = full_w;
            if (y1 > full_h) y1 = full_h;
            if (x1 <= x0) { x0 = 0; x1 = full_w; }
            if (y1 <= y0) { y0 = 0; y1 = full_h; }
            JDIMENSION crop_left = (JDIMENSION)x0, crop_width = (JDIMENSION)(x1 - x0);
            if (crop_width < cinfo.output_width) {
                jpeg_crop_scanline(&cinfo, &crop_left, &crop_width);
            }
            left = crop_left;
            width = crop_width;
            /* Skip whole iMCU rows only: libjpeg-turbo's jpeg_skip_scanlines() can hand
               back rows from before the skip when it stops inside a row group with
               merged (fast) upsampling (libjpeg-turbo issue 915); the few rows between
               the boundary and y0 are decoded and returned. */
#if JPEG_LIB_VERSION >= 70
            int imcu_rows = cinfo.max_v_samp_factor * cinfo.min_DCT_v_scaled_size;
#else
            int imcu_rows = cinfo.max_v_samp_factor * cinfo.min_DCT_scaled_size;
#endif
            if (imcu_rows < 1) imcu_rows = 1;
            top = y0 / imcu_rows * imcu_rows;
            bottom = y1;
            size_t row_bytes = (size_t)width * (size_t)channels;
            size_t total = row_bytes * (size_t)(bottom - top);
            Py_BLOCK_THREADS
            out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)total);
            Py_UNBLOCK_THREADS
            if (out == NULL) {
                status = NO_MEMORY;
            } else {
                unsigned char *base = (unsigned char *)PyByteArray_AS_STRING(out);
                /* Both calls return how many rows they got; fewer than asked (a data
                   source that ran dry) must not leave rows unwritten or loop forever. */
                if (top > 0 && jpeg_skip_scanlines(&cinfo, (JDIMENSION)top) != (JDIMENSION)top) {
                    status = SHORT;
                }
                JSAMPROW rows[16];
                while (status == DONE && (int)cinfo.output_scanline < bottom) {
                    int next = (int)cinfo.output_scanline;
                    int count = bottom - next < 16 ? bottom - next : 16;
                    for (int i = 0; i < count; i++) {
                        rows[i] = base + (size_t)(next - top + i) * row_bytes;
                    }
                    if (jpeg_read_scanlines(&cinfo, rows, (JDIMENSION)count) == 0) {
                        status = SHORT;
                    }
                }
            }
        }
    }
finish:
    if (started) {
        jpeg_destroy_decompress(&cinfo); /* also aborts a decode stopped before the end */
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);

    switch (status) {
    case DONE:
        return Py_BuildValue("Niiii", out, (int)left, top, (int)width, bottom - top);
    case UNSUPPORTED:
        Py_RETURN_NONE;
    case NO_MEMORY:
        return NULL; /* PyByteArray_FromStringAndSize set the error */
    case SHORT:
        Py_XDECREF(out);
        PyErr_SetString(PyExc_ValueError, "libjpeg returned fewer scanlines than the image has");
        return NULL;
    default:
        Py_XDECREF(out);
        if (err.out_of_memory) {
            PyErr_Format(PyExc_MemoryError, "libjpeg: %s", err.message);
            return NULL;
        }
        PyErr_Format(PyExc_ValueError, "%s", err.message[0] ? err.message : "libjpeg failed");
        return NULL;
    }
}

PyDoc_STRVAR(version_doc, "version() -> the libjpeg API version this module was built with.");

static PyObject *version(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
#ifdef LIBJPEG_TURBO_VERSION
#define DATAIO_STR2(x) #x
#define DATAIO_STR(x) DATAIO_STR2(x)
    return PyUnicode_FromFormat("libjpeg-turbo %s (API %d)", DATAIO_STR(LIBJPEG_TURBO_VERSION), JPEG_LIB_VERSION);
#else
    return PyUnicode_FromFormat("libjpeg (API %d)", JPEG_LIB_VERSION);
#endif
}

static PyMethodDef methods[] = {
    {"decode_region", decode_region, METH_VARARGS, decode_region_doc},
    {"version", version, METH_NOARGS, version_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_jpeg",
    .m_doc = "Region and DCT-scaled JPEG decodes via libjpeg-turbo.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__jpeg(void) { return PyModule_Create(&module); }
