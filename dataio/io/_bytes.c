/*
 * A Python bytes object to be filled in place: the destination of large downloads.
 *
 * A large remote read streams its body in pieces straight into the bytes it returns, so
 * no full-size intermediate (a Rust buffer, a list of parts to join) is allocated and
 * faulted in. blank(n) returns the new bytes and a writable memoryview of its storage;
 * the caller fills every byte, releases the view, and only then hands the bytes out (a
 * bytes object is immutable once shared; before that it is just memory, as it is for C
 * code that builds one with PyBytes_FromStringAndSize(NULL, n)).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#ifdef __linux__
#include <sys/mman.h>
#include <unistd.h>
#endif

/* Large destinations are backed by transparent huge pages where the system grants them
   on request (THP "madvise" mode) and faulted in with one call (MADV_POPULATE_WRITE,
   Linux 5.14+) before the body arrives. Filling a fresh 256 MiB bytes object page by
   page took 65,536 faults, each a trap and, in a VM, often a trip to the host: a read
   from moto reached ~700 MB/s with populated small pages, ~930 with populated huge pages
   (boto3, which faults its bytes page by page: ~800). Both are hints: an older kernel or
   THP "never" ignores them and the pages fault in as the body is written. */
#define HUGE_FROM (4 << 20)
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

static void prepare(char *start, Py_ssize_t n) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (n < HUGE_FROM) return;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t begin = ((uintptr_t)start + page - 1) / page * page;
    uintptr_t end = ((uintptr_t)start + (uintptr_t)n) / page * page;
    if (end > begin) {
        Py_BEGIN_ALLOW_THREADS
        (void)madvise((void *)begin, end - begin, MADV_HUGEPAGE);
        (void)madvise((void *)begin, end - begin, MADV_POPULATE_WRITE);
        Py_END_ALLOW_THREADS
    }
#else
    (void)start;
    (void)n;
#endif
}

/* The view's owner: exports the bytes' storage writable and holds a reference to the
   bytes, so the memoryview keeps them alive however long it outlives the caller's
   reference (PyMemoryView_FromMemory would hold none: a view used after the bytes were
   freed would write into freed memory). */
typedef struct {
    PyObject_HEAD
    PyObject *data; /* the bytes object */
} Filler;

static int filler_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    PyObject *data = ((Filler *)self)->data;
    return PyBuffer_FillInfo(view, self, PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data), 0,
                             flags);
}

static void filler_dealloc(PyObject *self) {
    Py_XDECREF(((Filler *)self)->data);
    PyObject_Free(self);
}

static PyBufferProcs filler_as_buffer = {
    .bf_getbuffer = filler_getbuffer,
    .bf_releasebuffer = NULL,
};

static PyTypeObject FillerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "dataio.io._bytes.Filler",
    .tp_basicsize = sizeof(Filler),
    .tp_dealloc = filler_dealloc,
    .tp_as_buffer = &filler_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The writable view's owner: holds the bytes object being filled.",
};

PyDoc_STRVAR(blank_doc,
"blank(n) -> (bytes, memoryview)\n"
"\n"
"A new, uninitialized bytes object of n > 0 bytes and a writable view of it (the view\n"
"keeps the bytes alive). Fill all of it and release the view before the bytes object\n"
"is used anywhere else.");

static PyObject *blank(PyObject *self, PyObject *arg) {
    (void)self;
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (n <= 0) {
        PyErr_SetString(PyExc_ValueError, "blank() needs a positive size");
        return NULL;
    }
    PyObject *data = PyBytes_FromStringAndSize(NULL, n);
    if (data == NULL) {
        return NULL;
    }
    prepare(PyBytes_AS_STRING(data), n);
    Filler *owner = PyObject_New(Filler, &FillerType);
    if (owner == NULL) {
        Py_DECREF(data);
        return NULL;
    }
    Py_INCREF(data);
    owner->data = data;
    PyObject *view = PyMemoryView_FromObject((PyObject *)owner);
    Py_DECREF(owner); /* the view holds it now */
    if (view == NULL) {
        Py_DECREF(data);
        return NULL;
    }
    return Py_BuildValue("NN", data, view);
}

static PyMethodDef methods[] = {
    {"blank", blank, METH_O, blank_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_bytes",
    .m_doc = "Bytes objects filled in place by downloads.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__bytes(void) {
    if (PyType_Ready(&FillerType) < 0) {
        return NULL;
    }
    return PyModule_Create(&module);
}
