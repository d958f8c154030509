/*
 * The common case of a tar walk in C: consecutive plain members held whole in a buffer.
 *
 * dataio.io.tar.walk parses each header in Python (~6 us a member); a WebDataset pass over
 * small samples spends more time there than copying the bytes. scan() takes the members
 * that need none of walk()'s special cases - a ustar or GNU header with a valid checksum,
 * octal size and checksum fields, a regular file (types '0', '\0', '7'; not a name ending
 * in '/'), no prefix field, the header, data and padding all inside the buffer, a size
 * within max_member_bytes and within the archive's length - and stops at the first header
 * that is anything else (end of archive, a pax or long-name header, a cut or garbled one,
 * a member past the buffer's end). walk() then takes that header in Python, with all its
 * checks and messages, and hands the rest back here. scan() refuses nothing itself, so
 * what it accepts is exactly what walk() accepts, parsed the same way.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define BLOCK 512

/* A header number as walk()'s _number reads octal text: up to the first NUL, spaces
   around digits. Anything else (base-256, signs, other characters): -1 (walk decides). */
static long long octal(const unsigned char *field, int width) {
    int end = 0;
    while (end < width && field[end] != 0) end++;
    int i = 0;
    while (i < end && field[i] == ' ') i++;
    long long value = 0;
    int digits = 0;
    while (i < end && field[i] >= '0' && field[i] <= '7') {
        if (digits >= 21) return -1; /* larger than any size walk() would accept */
        value = value * 8 + (field[i] - '0');
        digits++;
        i++;
    }
    while (i < end && field[i] == ' ') i++;
    return i == end ? value : -1;
}

/* The checksum as stored, as tar computes it (checksum field as spaces), and as old tar
   programs did with signed chars. */
static int checksum_ok(const unsigned char *block) {
    long long stored = octal(block + 148, 8);
    if (stored < 0) return 0;
    long long unsigned_sum = 256, signed_sum = 256;
    for (int i = 0; i < BLOCK; i++) {
        if (i >= 148 && i < 156) continue;
        unsigned_sum += block[i];
        signed_sum += (signed char)block[i];
    }
    return stored == unsigned_sum || stored == signed_sum;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer view;
    Py_ssize_t pos;
    long long offset, total, max_member;
    if (!PyArg_ParseTuple(args, "y*nLLL", &view, &pos, &offset, &total, &max_member)) return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const unsigned char *buf = (const unsigned char *)view.buf;
    const Py_ssize_t length = view.len;
    while (pos >= 0 && length - pos >= BLOCK) {
        const unsigned char *block = buf + pos;
        const unsigned char kind = block[156];
        if (kind != '0' && kind != 0 && kind != '7') break;
        if (block[345] != 0) break; /* a prefix (or GNU times there): walk() joins it */
        if (!checksum_ok(block)) break;
        long long size = octal(block + 124, 12);
        if (size < 0 || size > max_member) break;
        if (total >= 0 && size > total - (offset + BLOCK)) break;
        Py_ssize_t padded = (Py_ssize_t)((size + BLOCK - 1) / BLOCK * BLOCK);
        if (length - pos - BLOCK < padded) break;
        Py_ssize_t name_len = 0;
        while (name_len < 100 && block[name_len] != 0) name_len++;
        if (kind == 0 && name_len > 0 && block[name_len - 1] == '/') break;
        PyObject *name = PyUnicode_DecodeUTF8((const char *)block, name_len, "surrogateescape");
        PyObject *data = name == NULL ? NULL
                                      : PyBytes_FromStringAndSize((const char *)block + BLOCK,
                                                                  (Py_ssize_t)size);
        PyObject *at = data == NULL ? NULL : PyLong_FromLongLong(offset);
        PyObject *item = at == NULL ? NULL : PyTuple_Pack(3, name, at, data);
        Py_XDECREF(name);
        Py_XDECREF(data);
        Py_XDECREF(at);
        if (item == NULL || PyList_Append(out, item) < 0) {
            Py_XDECREF(item);
            Py_DECREF(out);
            PyBuffer_Release(&view);
            return NULL;
        }
        Py_DECREF(item);
        pos += BLOCK + padded;
        offset += BLOCK + padded;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(Nn)", out, pos);
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(buffer, pos, offset, total, max_member) -> ([(name, offset, data), ...], pos)\n\n"
     "The plain members of a tar held whole in buffer from pos on (offset: the archive "
     "offset of pos; total: the archive's length or -1), up to the first header walk() "
     "must see itself; the position after them."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_tarscan", "Plain tar members in C (see dataio.io.tar.walk).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__tarscan(void) { return PyModule_Create(&module); }
