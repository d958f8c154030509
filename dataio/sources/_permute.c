/*
 * The shuffle's hot loops: the Feistel order of dataio/sources/permutation.py and the
 * gather of a shuffled batch of Python records.
 *
 * table(out, n, half, keys) fills out[i] = perm[i] for i in range(n) (out: a writable
 * int32 buffer of n items); at(positions, out, n, half, keys) writes perm[p] for each
 * int64 position into an int64 buffer of the same length. perm is the six-round Feistel
 * network over 2 * half bits with splitmix64 round functions, cycle-walked into
 * range(n): exactly what FeistelPermutation computes in Python and NumPy. Both release
 * the GIL: a table of a million positions is ~10 ms of arithmetic.
 *
 * gather(rows, positions) is [rows[p] for p in positions] over a list or tuple and int64
 * positions, or None when a position is outside range(len(rows)) (Python then indexes,
 * negative positions included, and raises). It reads a few rows ahead, so the cache
 * misses of records scattered in memory overlap (~2x faster than itemgetter).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define ROUNDS 6

typedef struct {
    uint64_t n, mask, keys[ROUNDS];
    unsigned half;
} feistel;

static inline uint64_t mix(uint64_t v) {
    v += 0x9E3779B97F4A7C15ULL;
    v = (v ^ (v >> 30)) * 0xBF58476D1CE4E5B9ULL;
    v = (v ^ (v >> 27)) * 0x94D049BB133111EBULL;
    return v ^ (v >> 31);
}

#define LANES 256

/* perm of each of count (<= LANES) values, in place. The values still walking are
 * encrypted together, round by round, so their independent multiplications overlap
 * (one value at a time waits on each multiplication's latency: ~3x slower). */
#if defined(__x86_64__) && defined(__linux__) && !defined(__clang__) && __GNUC__ >= 11
/* 64-bit multiplications in vectors (AVX-512DQ) where the CPU has them: ~2x faster */
__attribute__((target_clones("arch=x86-64-v4", "default")))
#endif
static void permute(const feistel *f, uint64_t *values, int count) {
    uint16_t walking[LANES];
    int pending = count;
    for (int k = 0; k < count; k++) walking[k] = (uint16_t)k;
    while (pending) {
        uint64_t left[LANES], right[LANES];
        for (int j = 0; j < pending; j++) {
            uint64_t v = values[walking[j]];
            left[j] = v >> f->half;
            right[j] = v & f->mask;
        }
        for (int r = 0; r < ROUNDS; r++) {
            const uint64_t key = f->keys[r];
            for (int j = 0; j < pending; j++) {
                uint64_t next = left[j] ^ (mix(right[j] ^ key) & f->mask);
                left[j] = right[j];
                right[j] = next;
            }
        }
        int still = 0;
        for (int j = 0; j < pending; j++) {
            uint64_t v = (left[j] << f->half) | right[j];
            values[walking[j]] = v;
            if (v >= f->n) walking[still++] = walking[j]; /* cycle walking */
        }
        pending = still;
    }
}

static int parse(PyObject *args, Py_buffer *in, Py_buffer *out, feistel *f, int with_in) {
    PyObject *keys;
    unsigned long long n;
    unsigned int half;
    int ok = with_in ? PyArg_ParseTuple(args, "y*w*KIO!", in, out, &n, &half, &PyTuple_Type, &keys)
                     : PyArg_ParseTuple(args, "w*KIO!", out, &n, &half, &PyTuple_Type, &keys);
    if (!ok) return -1;
    if (PyTuple_GET_SIZE(keys) != ROUNDS || half < 1 || half > 31) {
        PyErr_SetString(PyExc_ValueError, "need 6 round keys and 1 <= half <= 31");
        goto fail;
    }
    for (int r = 0; r < ROUNDS; r++) {
        f->keys[r] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(keys, r));
        if (PyErr_Occurred()) goto fail;
    }
    f->n = n;
    f->half = half;
    f->mask = (1ULL << half) - 1;
    if (n > (1ULL << (2 * half))) {
        PyErr_SetString(PyExc_ValueError, "n exceeds the Feistel domain");
        goto fail;
    }
    return 0;
fail:
    if (with_in) PyBuffer_Release(in);
    PyBuffer_Release(out);
    return -1;
}

static PyObject *table(PyObject *self, PyObject *args) {
    Py_buffer out;
    feistel f;
    (void)self;
    if (parse(args, NULL, &out, &f, 0) < 0) return NULL;
    if (f.n > INT32_MAX || (uint64_t)out.len != f.n * sizeof(int32_t)) {
        PyBuffer_Release(&out);
        PyErr_SetString(PyExc_ValueError, "table() needs an int32 buffer of n items");
        return NULL;
    }
    int32_t *data = out.buf;
    Py_BEGIN_ALLOW_THREADS
    uint64_t values[LANES];
    for (uint64_t start = 0; start < f.n; start += LANES) {
        int count = f.n - start < LANES ? (int)(f.n - start) : LANES;
        for (int k = 0; k < count; k++) values[k] = start + (uint64_t)k;
        permute(&f, values, count);
        for (int k = 0; k < count; k++) data[start + (uint64_t)k] = (int32_t)values[k];
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&out);
    Py_RETURN_NONE;
}

static PyObject *at(PyObject *self, PyObject *args) {
    Py_buffer in, out;
    feistel f;
    (void)self;
    if (parse(args, &in, &out, &f, 1) < 0) return NULL;
    Py_ssize_t count = in.len / (Py_ssize_t)sizeof(int64_t);
    if (in.len != out.len || in.len % (Py_ssize_t)sizeof(int64_t)) {
        PyBuffer_Release(&in);
        PyBuffer_Release(&out);
        PyErr_SetString(PyExc_ValueError, "at() needs int64 buffers of equal length");
        return NULL;
    }
    const int64_t *positions = in.buf;
    int64_t *data = out.buf;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (positions[i] < 0 || (uint64_t)positions[i] >= f.n) {
            PyBuffer_Release(&in);
            PyBuffer_Release(&out);
            PyErr_SetString(PyExc_IndexError, "position out of range");
            return NULL;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    uint64_t values[LANES];
    for (Py_ssize_t start = 0; start < count; start += LANES) {
        int lanes = count - start < LANES ? (int)(count - start) : LANES;
        for (int k = 0; k < lanes; k++) values[k] = (uint64_t)positions[start + k];
        permute(&f, values, lanes);
        for (int k = 0; k < lanes; k++) data[start + k] = (int64_t)values[k];
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    Py_RETURN_NONE;
}

/* Read ahead of the gather: a position's list slot, then its object, then (a dict)
 * its keys table, each a few rows before it is needed, so that the cache misses of
 * rows scattered in memory overlap instead of following one another. */
#define SLOT_AHEAD 24
#define OBJECT_AHEAD 16
#define KEYS_AHEAD 8

static PyObject *gather(PyObject *self, PyObject *args) {
    PyObject *rows;
    Py_buffer in;
    (void)self;
    if (!PyArg_ParseTuple(args, "Oy*", &rows, &in)) return NULL;
    if (!PyList_CheckExact(rows) && !PyTuple_CheckExact(rows)) {
        PyBuffer_Release(&in);
        PyErr_SetString(PyExc_TypeError, "gather() needs a list or a tuple");
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(rows), count = in.len / (Py_ssize_t)sizeof(int64_t);
    const int64_t *positions = in.buf;
    if (in.len % (Py_ssize_t)sizeof(int64_t)) {
        PyBuffer_Release(&in);
        PyErr_SetString(PyExc_ValueError, "gather() needs int64 positions");
        return NULL;
    }
    for (Py_ssize_t k = 0; k < count; k++) {
        if (positions[k] < 0 || positions[k] >= n) { /* Python's indexing decides */
            PyBuffer_Release(&in);
            Py_RETURN_NONE;
        }
    }
    PyObject *out = PyList_New(count);
    if (out == NULL) {
        PyBuffer_Release(&in);
        return NULL;
    }
    PyObject **items = PySequence_Fast_ITEMS(rows);
    for (Py_ssize_t k = 0; k < count; k++) {
        if (k + SLOT_AHEAD < count) __builtin_prefetch(&items[positions[k + SLOT_AHEAD]]);
        if (k + OBJECT_AHEAD < count) __builtin_prefetch(items[positions[k + OBJECT_AHEAD]], 1);
        if (k + KEYS_AHEAD < count) {
            PyObject *ahead = items[positions[k + KEYS_AHEAD]];
            if (PyDict_CheckExact(ahead)) {
                const char *keys = (const char *)((PyDictObject *)ahead)->ma_keys;
                __builtin_prefetch(keys);
                __builtin_prefetch(keys + 64);
            }
        }
        PyObject *item = items[positions[k]];
        Py_INCREF(item);
        PyList_SET_ITEM(out, k, item);
    }
    PyBuffer_Release(&in);
    return out;
}

static PyMethodDef methods[] = {
    {"gather", gather, METH_VARARGS, "[rows[p] for p in positions] (None: a p outside 0..n-1)."},
    {"table", table, METH_VARARGS, "Fill an int32 buffer with the permutation of range(n)."},
    {"at", at, METH_VARARGS, "The permuted values of int64 positions, into an int64 buffer."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_permute", "The Feistel shuffle order in C.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__permute(void) { return PyModule_Create(&module); }
