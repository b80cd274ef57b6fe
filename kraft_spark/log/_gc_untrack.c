/* untrack_batch(batch, batch_type, record_type) -> int
 *
 * Takes a record batch the log keeps for a while (its tail cache holds ~50,000 of them under
 * load) out of the cyclic garbage collector's lists: the Batch object, its tuple of records,
 * and each Record. Returns how many objects it untracked.
 *
 * Why: every young and older collection walks each tracked object that is alive. The cached
 * records were ~70-90 % of what a leader's collections walked at 13k appends/s (93k-178k
 * Records per older collection; 15-60 ms of CPU each, 150+ ms of wall time on a busy 2-core
 * machine), and a collection holds the event loop.
 *
 * Safety: an untracked object can never be freed by the collector, so untracking is only
 * sound for objects that can never be part of a reference cycle. This function checks that
 * itself instead of trusting the caller: it untracks nothing unless `batch` is exactly
 * `batch_type` and `records` exactly a tuple, and a record only when it is exactly
 * `record_type` whose four slots (key, value, timestamp_ms, headers: looked up by name on
 * the type) hold bytes or None, an int, and a tuple of (str, bytes-or-None) pairs. Such an
 * object graph holds no reference to anything mutable, so it cannot close a cycle. The
 * Batch's own other fields are checked the same way (ints, a bool, bytes or None).
 * Objects are freed by reference counting as before; untracking an object twice or freeing
 * an untracked one is fine (PyObject_GC_UnTrack tolerates it and dealloc checks).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

/* The value of slot `name` of `obj` (borrowed; NULL if unset), or sets *bad when the type has
 * no such member slot. */
static PyObject *slot_value(PyObject *obj, const char *name, int *bad) {
    PyTypeObject *t = Py_TYPE(obj);
    PyMemberDef *m = t->tp_members;
    for (; m != NULL && m->name != NULL; m++) {
        if (strcmp(m->name, name) == 0 && m->type == T_OBJECT_EX)
            return *(PyObject **)((char *)obj + m->offset);
    }
    *bad = 1;
    return NULL;
}

static int is_bytes_or_none(PyObject *o) { return o == Py_None || PyBytes_CheckExact(o); }

static int headers_acyclic(PyObject *h) {
    if (!PyTuple_CheckExact(h))
        return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(h); i++) {
        PyObject *pair = PyTuple_GET_ITEM(h, i);
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2 ||
            !PyUnicode_CheckExact(PyTuple_GET_ITEM(pair, 0)) ||
            !is_bytes_or_none(PyTuple_GET_ITEM(pair, 1)))
            return 0;
    }
    return 1;
}

static int record_acyclic(PyObject *r) {
    int bad = 0;
    PyObject *key = slot_value(r, "key", &bad);
    PyObject *value = slot_value(r, "value", &bad);
    PyObject *ts = slot_value(r, "timestamp_ms", &bad);
    PyObject *headers = slot_value(r, "headers", &bad);
    return !bad && key != NULL && value != NULL && ts != NULL && headers != NULL &&
           is_bytes_or_none(key) && is_bytes_or_none(value) && PyLong_CheckExact(ts) &&
           headers_acyclic(headers);
}

static int batch_fields_acyclic(PyObject *b) {
    static const char *ints[] = {"base_offset", "epoch", "producer_id", "producer_epoch",
                                 "base_sequence", "_size"};
    int bad = 0;
    for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
        PyObject *v = slot_value(b, ints[i], &bad);
        if (bad || v == NULL || !PyLong_CheckExact(v))
            return 0;
    }
    PyObject *control = slot_value(b, "is_control", &bad);
    PyObject *wire = slot_value(b, "_wire", &bad);
    return !bad && control != NULL && PyBool_Check(control) && wire != NULL &&
           (wire == Py_None || PyBytes_CheckExact(wire));
}

static void untrack(PyObject *o, long *count) {
    if (PyObject_GC_IsTracked(o)) {
        PyObject_GC_UnTrack(o);
        (*count)++;
    }
}

static PyObject *untrack_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "untrack_batch(batch, batch_type, record_type)");
        return NULL;
    }
    PyObject *batch = args[0];
    if (!PyType_Check(args[1]) || !PyType_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "batch_type and record_type must be types");
        return NULL;
    }
    PyTypeObject *btype = (PyTypeObject *)args[1], *rtype = (PyTypeObject *)args[2];
    long count = 0;
    if (Py_TYPE(batch) != btype || !batch_fields_acyclic(batch))
        return PyLong_FromLong(0);
    int bad = 0;
    PyObject *records = slot_value(batch, "records", &bad);
    if (bad || records == NULL || !PyTuple_CheckExact(records))
        return PyLong_FromLong(0);
    Py_ssize_t n = PyTuple_GET_SIZE(records);
    int all = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PyTuple_GET_ITEM(records, i);
        if (Py_TYPE(r) == rtype && record_acyclic(r)) {
            PyObject *h = slot_value(r, "headers", &bad);
            for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(h); j++)
                untrack(PyTuple_GET_ITEM(h, j), &count);
            untrack(h, &count);
            untrack(r, &count);
        } else {
            all = 0;
        }
    }
    /* A container may only be untracked when everything it holds is (or cannot cycle). */
    if (all) {
        untrack(records, &count);
        untrack(batch, &count);
    }
    return PyLong_FromLong(count);
}

static PyMethodDef methods[] = {
    {"untrack_batch", (PyCFunction)(void (*)(void))untrack_batch, METH_FASTCALL,
     "untrack_batch(batch, batch_type, record_type) -> int: objects taken out of the cyclic "
     "garbage collector (only ones that cannot be part of a cycle)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "kraft_spark.log._gc_untrack",
    "Long-lived record batches taken out of the cyclic garbage collector (see tail_cache.py).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__gc_untrack(void) { return PyModule_Create(&module); }
