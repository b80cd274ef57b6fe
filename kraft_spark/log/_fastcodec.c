/* Kafka v2 record batches in C: the per-record loops of kraft_spark/log/codec.py.
 *
 * encode_batch(batch) -> bytearray
 *     The whole batch (header + records) with the CRC field left as zero; the caller fills it
 *     in with the crc32c package, which is faster than a portable C loop. Byte-identical to
 *     the pure-Python encoder (tests/log/test_fastcodec.py checks it).
 *
 * decode_records(buf, pos, end, count, base_ts, record_type, error_type, direct) -> tuple
 *     The record section of one batch whose header the caller has already checked. Accepts
 *     exactly the inputs _decode_records_unchecked in codec.py accepts, with the same result,
 *     and raises error_type (CorruptRecordError) for the others. With `direct`, records are
 *     built by filling the four slots of a fresh record_type object instead of calling
 *     record_type(...): the caller vouches that __init__ would only store its arguments.
 *
 * Safety rules kept throughout: every length read from input is checked against the end of
 * its record before it is used; every varint is at most 10 bytes and must fit 64 bits; sizes
 * are added with overflow checks; every Python object whose bytes are copied is held by an
 * owned reference (and is immutable: bytes or str) from the moment it is measured until it is
 * copied, so no Python code running in between can change a length under us.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>

#define HEADER_SIZE 61
#define LOG_OVERHEAD 12
#define CONTROL_FLAG 0x20
#define MAGIC 2
#define MIN_RECORD_BYTES 7
/* batchLength is an int32 and counts the bytes after itself. */
#define MAX_BATCH_BYTES ((uint64_t)INT32_MAX + LOG_OVERHEAD)

static PyObject *s_records, *s_base_offset, *s_epoch, *s_is_control, *s_producer_id,
    *s_producer_epoch, *s_base_sequence, *s_key, *s_value, *s_timestamp_ms, *s_headers;

/* ------------------------------------------------------------------------------------------ */
/* varints */

static inline uint64_t zigzag(int64_t n) {
    return ((uint64_t)n << 1) ^ (uint64_t)(n >> 63);
}

static inline Py_ssize_t uvarint_size(uint64_t u) {
    Py_ssize_t n = 1;
    while (u >= 0x80) {
        u >>= 7;
        n++;
    }
    return n;
}

static inline char *put_uvarint(char *p, uint64_t u) {
    while (u >= 0x80) {
        *p++ = (char)((u & 0x7F) | 0x80);
        u >>= 7;
    }
    *p++ = (char)u;
    return p;
}

static inline char *put_be(char *p, uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; i--) {
        p[i] = (char)(v & 0xFF);
        v >>= 8;
    }
    return p + bytes;
}

/* ------------------------------------------------------------------------------------------ */
/* record fields
 *
 * Record is a slotted dataclass. PyObject_GetAttr on it costs about as much as the rest of the
 * encoding of a small record, so, like CPython's own LOAD_ATTR_SLOT specialisation, the
 * slot offsets of the record type are cached and guarded by the type's version tag (which
 * changes whenever the class or one of its bases is modified). Any other type, or a modified
 * one, goes through PyObject_GetAttr. */

enum { F_TIMESTAMP, F_KEY, F_VALUE, F_HEADERS, N_FIELDS };
static PyObject **field_names[N_FIELDS] = {&s_timestamp_ms, &s_key, &s_value, &s_headers};

static PyTypeObject *slot_type;  /* owned; NULL until a record type qualifies */
static unsigned int slot_tag;
static Py_ssize_t slot_offset[N_FIELDS];
/* Instances of slot_type hold nothing but the four slots and are made by object.__new__, so a
 * zeroed allocation with the four slots filled is a complete object (memory-wise; whether it
 * equals what __init__ would build is the caller's call: the `direct` flag of decode_records). */
static int slot_direct_ok;

static void learn_slots_of(PyTypeObject *type) {
    Py_ssize_t offsets[N_FIELDS];
    if (type->tp_getattro != PyObject_GenericGetAttr)
        return;
    for (int f = 0; f < N_FIELDS; f++) {
        PyObject *d = PyObject_GetAttr((PyObject *)type, *field_names[f]);
        if (d == NULL) {
            PyErr_Clear();
            return;
        }
        int ok = Py_IS_TYPE(d, &PyMemberDescr_Type) &&
                 ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX &&
                 PyType_IsSubtype(type, ((PyDescrObject *)d)->d_type);
        if (ok)
            offsets[f] = ((PyMemberDescrObject *)d)->d_member->offset;
        Py_DECREF(d);
        if (!ok)
            return;
    }
    unsigned int tag = type->tp_version_tag; /* assigned by the lookups above */
    if (tag == 0)
        return;
    int distinct = 1;
    for (int f = 0; f < N_FIELDS; f++)
        for (int g = 0; g < f; g++)
            distinct &= offsets[f] != offsets[g];
    /* The whole cache is consistent before the old type is released (which may run code). */
    PyTypeObject *old = slot_type;
    Py_INCREF(type);
    slot_type = type;
    slot_tag = tag;
    memcpy(slot_offset, offsets, sizeof(offsets));
    slot_direct_ok = distinct && type->tp_itemsize == 0 && type->tp_dictoffset == 0 &&
                     type->tp_weaklistoffset == 0 &&
                     type->tp_basicsize ==
                         (Py_ssize_t)(sizeof(PyObject) + N_FIELDS * sizeof(PyObject *)) &&
                     type->tp_new == PyBaseObject_Type.tp_new &&
                     type->tp_alloc == PyType_GenericAlloc;
    Py_XDECREF(old);
}

/* Never raises. The type is held while its attributes are looked up (a metaclass could run
 * code that drops the last other reference). */
static void learn_slots(PyTypeObject *type) {
    Py_INCREF(type);
    learn_slots_of(type);
    Py_DECREF(type);
}

static inline int slots_known(PyTypeObject *type) {
    return type == slot_type && type->tp_version_tag == slot_tag;
}

/* A new reference to field f of record r, or NULL with an exception set. */
static inline PyObject *record_field(PyObject *r, int f) {
    PyTypeObject *type = Py_TYPE(r);
    if (slots_known(type)) {
        PyObject *v = *(PyObject **)((char *)r + slot_offset[f]);
        if (v == NULL) {
            PyErr_Format(PyExc_AttributeError, "record has no attribute %U", *field_names[f]);
            return NULL;
        }
        Py_INCREF(v);
        return v;
    }
    return PyObject_GetAttr(r, *field_names[f]);
}

/* ------------------------------------------------------------------------------------------ */
/* encoding */

typedef struct {
    PyObject *key;   /* owned bytes, or NULL for None */
    PyObject *value; /* owned bytes, or NULL for None */
    int64_t ts_delta;
    Py_ssize_t first_header; /* index into the header array */
    Py_ssize_t header_count;
    Py_ssize_t body; /* record bytes after its length varint */
} enc_record;

typedef struct {
    PyObject *name;    /* owned str */
    const char *utf8;  /* cached by the str itself, valid while name is alive */
    Py_ssize_t name_len;
    PyObject *value;   /* owned bytes, or NULL for None */
} enc_header;

typedef struct {
    enc_record *records;
    Py_ssize_t nrecords; /* filled so far (all of them own their references) */
    enc_header *headers;
    Py_ssize_t nheaders;
    Py_ssize_t cap_headers;
} enc_state;

static void enc_state_free(enc_state *st) {
    for (Py_ssize_t i = 0; i < st->nrecords; i++) {
        Py_XDECREF(st->records[i].key);
        Py_XDECREF(st->records[i].value);
    }
    for (Py_ssize_t i = 0; i < st->nheaders; i++) {
        Py_XDECREF(st->headers[i].name);
        Py_XDECREF(st->headers[i].value);
    }
    PyMem_Free(st->records);
    PyMem_Free(st->headers);
}

/* Adds n to *acc; fails once the batch cannot fit an int32 batchLength. *acc stays at most
 * MAX_BATCH_BYTES between calls and n < 2^63, so the uint64 sum cannot wrap. */
static int add_size(uint64_t *acc, uint64_t n) {
    *acc += n;
    if (*acc > MAX_BATCH_BYTES) {
        PyErr_SetString(PyExc_ValueError,
                        "record batch too large: batchLength does not fit an int32");
        return -1;
    }
    return 0;
}

/* None -> *out = NULL; bytes -> new reference; other buffers -> an owned bytes copy (so the
 * length cannot change before it is copied). Anything else is a TypeError. */
static int as_bytes(PyObject *obj, PyObject **out, const char *what) {
    if (obj == Py_None) {
        *out = NULL;
        return 0;
    }
    if (PyBytes_Check(obj)) {
        Py_INCREF(obj);
        *out = obj;
        return 0;
    }
    if (PyObject_CheckBuffer(obj)) {
        *out = PyBytes_FromObject(obj);
        return *out == NULL ? -1 : 0;
    }
    PyErr_Format(PyExc_TypeError, "%s must be bytes or None, not %.100s", what,
                 Py_TYPE(obj)->tp_name);
    return -1;
}

/* A batch-level integer field, range-checked as struct.pack would (ValueError if it does not
 * fit, as codec.py turns struct.error into ValueError). */
static int batch_int(PyObject *batch, PyObject *name, int64_t lo, int64_t hi, int64_t *out) {
    PyObject *obj = PyObject_GetAttr(batch, name);
    if (obj == NULL)
        return -1;
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_ValueError, "batch field %U must be an int, not %.100s", name,
                     Py_TYPE(obj)->tp_name);
        Py_DECREF(obj);
        return -1;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    Py_DECREF(obj);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow || v < lo || v > hi) {
        PyErr_Format(PyExc_ValueError, "batch field %U is out of range", name);
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

/* Appends the headers of one record to st->headers (which then owns their references) and adds
 * their encoded size, header count included, to *body. */
static int measure_headers(enc_state *st, enc_record *rec, PyObject *headers, uint64_t *body) {
    PyObject *seq = PySequence_Fast(headers, "record headers must be a sequence");
    if (seq == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    rec->first_header = st->nheaders;
    rec->header_count = 0;
    if (add_size(body, (uint64_t)uvarint_size(zigzag(n))) < 0)
        goto fail;
    if (n > 0 && st->nheaders + n > st->cap_headers) {
        Py_ssize_t cap = st->cap_headers * 2;
        if (cap < st->nheaders + n)
            cap = st->nheaders + n;
        /* Not PyMem_Resize: it overwrites st->headers with NULL on failure. */
        enc_header *grown = (size_t)cap > PY_SSIZE_T_MAX / sizeof(enc_header)
                                ? NULL
                                : PyMem_Realloc(st->headers, (size_t)cap * sizeof(enc_header));
        if (grown == NULL) {
            PyErr_NoMemory();
            goto fail;
        }
        st->headers = grown;
        st->cap_headers = cap;
    }
    for (Py_ssize_t j = 0; j < n; j++) {
        /* seq is a tuple or a list; a list could shrink if turning a pair that is neither a
         * tuple nor a list into a sequence runs Python code, hence the re-check. */
        if (j >= PySequence_Fast_GET_SIZE(seq)) {
            PyErr_SetString(PyExc_RuntimeError, "record headers changed during encoding");
            goto fail;
        }
        PyObject *item = PySequence_Fast_GET_ITEM(seq, j);
        Py_INCREF(item);
        PyObject *pair = PySequence_Fast(item, "a record header must be a (name, value) pair");
        Py_DECREF(item);
        if (pair == NULL)
            goto fail;
        if (PySequence_Fast_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_ValueError, "a record header must be a (name, value) pair");
            Py_DECREF(pair);
            goto fail;
        }
        PyObject *name = PySequence_Fast_GET_ITEM(pair, 0);
        PyObject *value = PySequence_Fast_GET_ITEM(pair, 1);
        if (!PyUnicode_Check(name)) {
            PyErr_Format(PyExc_TypeError, "header name must be str, not %.100s",
                         Py_TYPE(name)->tp_name);
            Py_DECREF(pair);
            goto fail;
        }
        enc_header *h = &st->headers[st->nheaders];
        h->utf8 = PyUnicode_AsUTF8AndSize(name, &h->name_len);
        if (h->utf8 == NULL || as_bytes(value, &h->value, "header value") < 0) {
            Py_DECREF(pair);
            goto fail;
        }
        Py_INCREF(name);
        h->name = name;
        st->nheaders++;
        rec->header_count++;
        Py_DECREF(pair);
        Py_ssize_t vlen = h->value == NULL ? -1 : PyBytes_GET_SIZE(h->value);
        if (add_size(body, (uint64_t)uvarint_size(zigzag(h->name_len))) < 0 ||
            add_size(body, (uint64_t)h->name_len) < 0 ||
            add_size(body, (uint64_t)uvarint_size(zigzag(vlen))) < 0 ||
            add_size(body, vlen < 0 ? 0 : (uint64_t)vlen) < 0)
            goto fail;
    }
    Py_DECREF(seq);
    return 0;
fail:
    Py_DECREF(seq);
    return -1;
}

/* Reads record i into st->records[i] (which then owns its references) and adds its encoded
 * size to *total. Record 0 sets *base_ts; *max_ts follows the largest timestamp. */
static int measure_record(enc_state *st, PyObject *r, Py_ssize_t i, int64_t *base_ts,
                          int64_t *max_ts, uint64_t *total) {
    enc_record *rec = &st->records[i];
    rec->key = rec->value = NULL;
    rec->first_header = rec->header_count = 0;
    st->nrecords = i + 1; /* from here on rec is released by enc_state_free */

    PyObject *obj = record_field(r, F_TIMESTAMP);
    if (obj == NULL)
        return -1;
    int overflow = 0;
    long long ts = PyLong_AsLongLongAndOverflow(obj, &overflow);
    Py_DECREF(obj);
    if (ts == -1 && PyErr_Occurred())
        return -1;
    if (overflow) {
        PyErr_Format(PyExc_ValueError, "record %zd: timestamp does not fit a signed 64-bit int",
                     i);
        return -1;
    }
    if (i == 0)
        *base_ts = *max_ts = ts;
    else if (ts > *max_ts)
        *max_ts = ts;
    int64_t b = *base_ts;
    if ((b < 0 && ts > INT64_MAX + b) || (b > 0 && ts < INT64_MIN + b)) {
        PyErr_Format(PyExc_ValueError,
                     "record %zd: timestamp delta does not fit a signed 64-bit varlong", i);
        return -1;
    }
    rec->ts_delta = (int64_t)ts - b;

    obj = record_field(r, F_KEY);
    if (obj == NULL)
        return -1;
    int rc = as_bytes(obj, &rec->key, "record key");
    Py_DECREF(obj);
    if (rc < 0)
        return -1;
    obj = record_field(r, F_VALUE);
    if (obj == NULL)
        return -1;
    rc = as_bytes(obj, &rec->value, "record value");
    Py_DECREF(obj);
    if (rc < 0)
        return -1;

    Py_ssize_t klen = rec->key == NULL ? -1 : PyBytes_GET_SIZE(rec->key);
    Py_ssize_t vlen = rec->value == NULL ? -1 : PyBytes_GET_SIZE(rec->value);
    uint64_t body = 1 + (uint64_t)uvarint_size(zigzag(rec->ts_delta)) +
                    (uint64_t)uvarint_size(zigzag(i)) + (uint64_t)uvarint_size(zigzag(klen)) +
                    (uint64_t)uvarint_size(zigzag(vlen));
    if (add_size(&body, klen < 0 ? 0 : (uint64_t)klen) < 0 ||
        add_size(&body, vlen < 0 ? 0 : (uint64_t)vlen) < 0)
        return -1;

    obj = record_field(r, F_HEADERS);
    if (obj == NULL)
        return -1;
    if (PyTuple_CheckExact(obj) && PyTuple_GET_SIZE(obj) == 0) {
        rc = add_size(&body, 1); /* header count 0 */
    } else {
        rc = measure_headers(st, rec, obj, &body);
    }
    Py_DECREF(obj);
    if (rc < 0)
        return -1;
    rec->body = (Py_ssize_t)body; /* <= MAX_BATCH_BYTES */
    if (add_size(total, body) < 0 || add_size(total, (uint64_t)uvarint_size(body << 1)) < 0)
        return -1;
    return 0;
}

static inline char *put_bytes_or_null(char *p, PyObject *b) {
    if (b == NULL) {
        *p++ = 1; /* zigzag(-1) */
        return p;
    }
    Py_ssize_t n = PyBytes_GET_SIZE(b);
    p = put_uvarint(p, zigzag(n));
    memcpy(p, PyBytes_AS_STRING(b), (size_t)n);
    return p + n;
}

static PyObject *encode_batch(PyObject *self, PyObject *batch) {
    (void)self;
    enc_state st = {NULL, 0, NULL, 0, 0};
    PyObject *seq = NULL, *out = NULL;
    int64_t base_offset, epoch, producer_id, producer_epoch, base_sequence;

    PyObject *records = PyObject_GetAttr(batch, s_records);
    if (records == NULL)
        return NULL;
    seq = PySequence_Fast(records, "batch records must be a sequence");
    Py_DECREF(records);
    if (seq == NULL)
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    if (count == 0) {
        PyErr_SetString(PyExc_ValueError, "a record batch needs at least one record");
        goto done;
    }
    if (count > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "too many records for one batch");
        goto done;
    }
    st.records = PyMem_New(enc_record, (size_t)count);
    if (st.records == NULL) {
        PyErr_NoMemory();
        goto done;
    }

    {
        PyTypeObject *type = Py_TYPE(PySequence_Fast_GET_ITEM(seq, 0));
        if (!slots_known(type))
            learn_slots(type);
    }
    int64_t base_ts = 0, max_ts = INT64_MIN;
    uint64_t total = HEADER_SIZE;
    for (Py_ssize_t i = 0; i < count; i++) {
        /* PySequence_Fast_GET_ITEM is borrowed from seq; seq is a tuple or a list we hold, and
         * a list could shrink if Python code runs (a property getter), hence the re-check. */
        if (i >= PySequence_Fast_GET_SIZE(seq)) {
            PyErr_SetString(PyExc_RuntimeError, "batch records changed during encoding");
            goto done;
        }
        PyObject *r = PySequence_Fast_GET_ITEM(seq, i);
        Py_INCREF(r);
        int rc = measure_record(&st, r, i, &base_ts, &max_ts, &total);
        Py_DECREF(r);
        if (rc < 0)
            goto done;
    }

    int is_control;
    {
        PyObject *obj = PyObject_GetAttr(batch, s_is_control);
        if (obj == NULL)
            goto done;
        is_control = PyObject_IsTrue(obj);
        Py_DECREF(obj);
        if (is_control < 0)
            goto done;
    }
    if (batch_int(batch, s_base_offset, INT64_MIN, INT64_MAX, &base_offset) < 0 ||
        batch_int(batch, s_epoch, INT32_MIN, INT32_MAX, &epoch) < 0 ||
        batch_int(batch, s_producer_id, INT64_MIN, INT64_MAX, &producer_id) < 0 ||
        batch_int(batch, s_producer_epoch, INT16_MIN, INT16_MAX, &producer_epoch) < 0 ||
        batch_int(batch, s_base_sequence, INT32_MIN, INT32_MAX, &base_sequence) < 0)
        goto done;

    out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (out == NULL)
        goto done;
    char *start = PyByteArray_AS_STRING(out);
    char *p = start;
    p = put_be(p, (uint64_t)base_offset, 8);
    p = put_be(p, total - LOG_OVERHEAD, 4);
    p = put_be(p, (uint64_t)epoch, 4);
    *p++ = MAGIC;
    p = put_be(p, 0, 4); /* CRC, filled in by the caller */
    p = put_be(p, is_control ? CONTROL_FLAG : 0, 2);
    p = put_be(p, (uint64_t)(count - 1), 4);
    p = put_be(p, (uint64_t)base_ts, 8);
    p = put_be(p, (uint64_t)max_ts, 8);
    p = put_be(p, (uint64_t)producer_id, 8);
    p = put_be(p, (uint64_t)producer_epoch, 2);
    p = put_be(p, (uint64_t)base_sequence, 4);
    p = put_be(p, (uint64_t)count, 4);

    for (Py_ssize_t i = 0; i < count; i++) {
        enc_record *rec = &st.records[i];
        p = put_uvarint(p, zigzag(rec->body));
        *p++ = 0; /* attributes */
        p = put_uvarint(p, zigzag(rec->ts_delta));
        p = put_uvarint(p, zigzag(i));
        p = put_bytes_or_null(p, rec->key);
        p = put_bytes_or_null(p, rec->value);
        p = put_uvarint(p, zigzag(rec->header_count));
        for (Py_ssize_t j = 0; j < rec->header_count; j++) {
            enc_header *h = &st.headers[rec->first_header + j];
            p = put_uvarint(p, zigzag(h->name_len));
            memcpy(p, h->utf8, (size_t)h->name_len);
            p += h->name_len;
            p = put_bytes_or_null(p, h->value);
        }
    }
    if ((uint64_t)(p - start) != total) { /* cannot happen; never return a torn batch */
        PyErr_SetString(PyExc_SystemError, "_fastcodec: encoded size mismatch");
        Py_CLEAR(out);
    }
done:
    enc_state_free(&st);
    Py_XDECREF(seq);
    return out;
}

/* ------------------------------------------------------------------------------------------ */
/* decoding */

typedef struct {
    const unsigned char *buf;
    PyObject *error; /* CorruptRecordError */
    Py_ssize_t record;
} dec_ctx;

static int corrupt(dec_ctx *c, const char *fmt, ...) {
    char text[200];
    va_list ap;
    va_start(ap, fmt);
    PyOS_vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    PyErr_Format(c->error, "record %zd %s", c->record, text);
    return -1;
}

/* A zig-zag varint at *pos that must end before limit: at most 10 bytes, fitting 64 bits (the
 * same acceptance rule as varint.decode_zigzag, non-canonical encodings included). */
static inline int read_varint(dec_ctx *c, Py_ssize_t *pos, Py_ssize_t limit, int64_t *out) {
    const unsigned char *b = c->buf;
    Py_ssize_t p = *pos;
    if (p < limit && b[p] < 0x80) { /* the common case: one byte */
        uint64_t u = b[p];
        *out = (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
        *pos = p + 1;
        return 0;
    }
    uint64_t u = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (p >= limit)
            return corrupt(c, "has a varint at byte %zd that runs past the end of its record",
                           *pos);
        unsigned char byte = b[p++];
        if (shift == 63 && (byte & 0x7F) > 1)
            return corrupt(c, "has a varint at byte %zd that overflows 64 bits", *pos);
        u |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            *out = (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
            *pos = p;
            return 0;
        }
    }
    return corrupt(c, "has a varint at byte %zd longer than 10 bytes", *pos);
}

static PyObject *decode_headers(dec_ctx *c, Py_ssize_t *pos, Py_ssize_t rec_end) {
    int64_t count;
    if (read_varint(c, pos, rec_end, &count) < 0)
        return NULL;
    /* Each header takes at least two bytes, so this also bounds the tuple allocated. */
    if (count < 0 || count > (rec_end - *pos) / 2) {
        corrupt(c, "has header count %lld", (long long)count);
        return NULL;
    }
    /* Built as a list, then copied: a tuple with empty slots must never be reachable (through
     * the garbage collector) while allocations run. */
    PyObject *headers = PyList_New(0);
    if (headers == NULL)
        return NULL;
    for (Py_ssize_t j = 0; j < (Py_ssize_t)count; j++) {
        int64_t nlen, vlen;
        if (read_varint(c, pos, rec_end, &nlen) < 0)
            goto fail;
        if (nlen < 0 || nlen > rec_end - *pos) {
            corrupt(c, "has header name length %lld", (long long)nlen);
            goto fail;
        }
        PyObject *name = PyUnicode_DecodeUTF8((const char *)c->buf + *pos, (Py_ssize_t)nlen,
                                              "strict");
        if (name == NULL) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                corrupt(c, "has a header name that is not UTF-8");
            }
            goto fail;
        }
        *pos += (Py_ssize_t)nlen;
        if (read_varint(c, pos, rec_end, &vlen) < 0) {
            Py_DECREF(name);
            goto fail;
        }
        if (vlen < -1 || vlen > rec_end - *pos) {
            Py_DECREF(name);
            corrupt(c, "has header value length %lld", (long long)vlen);
            goto fail;
        }
        PyObject *value;
        if (vlen == -1) {
            value = Py_NewRef(Py_None);
        } else {
            value = PyBytes_FromStringAndSize((const char *)c->buf + *pos, (Py_ssize_t)vlen);
            if (value == NULL) {
                Py_DECREF(name);
                goto fail;
            }
            *pos += (Py_ssize_t)vlen;
        }
        PyObject *pair = PyTuple_New(2);
        if (pair == NULL) {
            Py_DECREF(name);
            Py_DECREF(value);
            goto fail;
        }
        PyTuple_SET_ITEM(pair, 0, name);
        PyTuple_SET_ITEM(pair, 1, value);
        int rc = PyList_Append(headers, pair);
        Py_DECREF(pair);
        if (rc < 0)
            goto fail;
    }
    Py_SETREF(headers, PyList_AsTuple(headers));
    return headers;
fail:
    Py_DECREF(headers);
    return NULL;
}

/* The bytes at [pos, pos + len) or None for len == -1 (len >= -1 and in bounds: checked). */
static inline PyObject *bytes_or_none(dec_ctx *c, Py_ssize_t *pos, int64_t len) {
    if (len < 0)
        return Py_NewRef(Py_None);
    PyObject *b = PyBytes_FromStringAndSize((const char *)c->buf + *pos, (Py_ssize_t)len);
    *pos += (Py_ssize_t)len;
    return b;
}

static PyObject *decode_records(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "decode_records(buf, pos, end, count, base_ts, "
                                         "record_type, error_type, direct)");
        return NULL;
    }
    PyObject *buf = args[0], *record_type = args[5];
    if (!PyBytes_Check(buf)) {
        PyErr_SetString(PyExc_TypeError, "decode_records needs bytes");
        return NULL;
    }
    if (!PyType_Check(args[6]) ||
        !PyType_IsSubtype((PyTypeObject *)args[6], (PyTypeObject *)PyExc_Exception)) {
        PyErr_SetString(PyExc_TypeError, "error_type must be an exception class");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    Py_ssize_t end = PyLong_AsSsize_t(args[2]);
    Py_ssize_t count = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred())
        return NULL;
    int overflow = 0;
    long long base_ts = PyLong_AsLongLongAndOverflow(args[4], &overflow);
    if (base_ts == -1 && PyErr_Occurred())
        return NULL;
    if (overflow || pos < 0 || end < pos || end > PyBytes_GET_SIZE(buf) || count < 1) {
        PyErr_SetString(PyExc_ValueError, "decode_records: arguments out of range");
        return NULL;
    }
    if (!PyType_Check(record_type)) {
        PyErr_SetString(PyExc_TypeError, "record_type must be a class");
        return NULL;
    }
    int direct = PyObject_IsTrue(args[7]);
    if (direct < 0)
        return NULL;
    PyTypeObject *rtype = (PyTypeObject *)record_type;
    if (direct) {
        if (!slots_known(rtype))
            learn_slots(rtype);
        direct = slots_known(rtype) && slot_direct_ok;
    }
    dec_ctx c = {(const unsigned char *)PyBytes_AS_STRING(buf), args[6], 0};
    if (count > (end - pos) / MIN_RECORD_BYTES) {
        PyErr_Format(c.error, "record count %zd cannot fit in %zd bytes", count, end - pos);
        return NULL;
    }
    PyObject *out = PyList_New(0); /* a list until complete: see decode_headers */
    if (out == NULL)
        return NULL;
    const unsigned char *b = c.buf;
    for (Py_ssize_t i = 0; i < count; i++) {
        c.record = i;
        int64_t length, ts_delta, offset_delta, klen, vlen;
        if (pos >= end) {
            corrupt(&c, "starts past the end of the batch");
            goto fail;
        }
        if (read_varint(&c, &pos, end, &length) < 0)
            goto fail;
        if (length < MIN_RECORD_BYTES - 1 || length > end - pos) {
            corrupt(&c, "has an invalid length %lld", (long long)length);
            goto fail;
        }
        Py_ssize_t rec_end = pos + (Py_ssize_t)length;
        pos += 1; /* record attributes: unused by v2, not checked (as in codec.py) */
        if (read_varint(&c, &pos, rec_end, &ts_delta) < 0 ||
            read_varint(&c, &pos, rec_end, &offset_delta) < 0)
            goto fail;
        if (offset_delta != i) {
            corrupt(&c, "has offset delta %lld", (long long)offset_delta);
            goto fail;
        }
        /* A null key must be the one-byte -1 (a longer -1 is rejected, as in codec.py). */
        if (pos < rec_end && b[pos] == 1) {
            klen = -1;
            pos += 1;
        } else {
            if (read_varint(&c, &pos, rec_end, &klen) < 0)
                goto fail;
            if (klen < 0 || klen > rec_end - pos) {
                corrupt(&c, "has key length %lld", (long long)klen);
                goto fail;
            }
        }
        PyObject *key = bytes_or_none(&c, &pos, klen);
        if (key == NULL)
            goto fail;
        if (read_varint(&c, &pos, rec_end, &vlen) < 0) {
            Py_DECREF(key);
            goto fail;
        }
        if (vlen < -1) {
            Py_DECREF(key);
            corrupt(&c, "has value length %lld", (long long)vlen);
            goto fail;
        }
        if (vlen > rec_end - pos) {
            Py_DECREF(key);
            corrupt(&c, "has a value that runs past the record");
            goto fail;
        }
        PyObject *value = bytes_or_none(&c, &pos, vlen);
        if (value == NULL) {
            Py_DECREF(key);
            goto fail;
        }
        PyObject *headers;
        if (pos >= rec_end) {
            corrupt(&c, "has no header count");
            headers = NULL;
        } else if (b[pos] == 0) {
            headers = PyTuple_New(0);
            pos += 1;
        } else {
            headers = decode_headers(&c, &pos, rec_end);
        }
        if (headers == NULL) {
            Py_DECREF(key);
            Py_DECREF(value);
            goto fail;
        }
        int64_t ts;
        const char *problem = NULL;
        if (pos != rec_end)
            problem = "has bytes left over";
        else if ((base_ts < 0 && ts_delta < INT64_MIN - base_ts) ||
                 (base_ts > 0 && ts_delta > INT64_MAX - base_ts))
            problem = "has a timestamp out of range";
        if (problem != NULL) {
            Py_DECREF(key);
            Py_DECREF(value);
            Py_DECREF(headers);
            corrupt(&c, "%s", problem);
            goto fail;
        }
        ts = (int64_t)base_ts + ts_delta;
        PyObject *ts_obj = PyLong_FromLongLong(ts);
        if (ts_obj == NULL) {
            Py_DECREF(key);
            Py_DECREF(value);
            Py_DECREF(headers);
            goto fail;
        }
        PyObject *fields[N_FIELDS];
        fields[F_KEY] = key;
        fields[F_VALUE] = value;
        fields[F_TIMESTAMP] = ts_obj;
        fields[F_HEADERS] = headers;
        PyObject *record;
        /* Re-checked per record: the constructor of a previous record may have run Python code
         * that modified the class. */
        if (direct && slots_known(rtype)) {
            record = rtype->tp_alloc(rtype, 0); /* zeroed */
            if (record != NULL) {
                for (int f = 0; f < N_FIELDS; f++) /* the record takes the four references */
                    *(PyObject **)((char *)record + slot_offset[f]) = fields[f];
            } else {
                for (int f = 0; f < N_FIELDS; f++)
                    Py_DECREF(fields[f]);
            }
        } else {
            record = PyObject_Vectorcall(record_type, (PyObject *const[]){key, value, ts_obj,
                                                                          headers},
                                         4, NULL);
            for (int f = 0; f < N_FIELDS; f++)
                Py_DECREF(fields[f]);
        }
        if (record == NULL)
            goto fail;
        int rc = PyList_Append(out, record);
        Py_DECREF(record);
        if (rc < 0)
            goto fail;
    }
    if (pos != end) {
        PyErr_Format(c.error, "%zd bytes after the last record of the batch", end - pos);
        goto fail;
    }
    Py_SETREF(out, PyList_AsTuple(out));
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* module */

static PyMethodDef methods[] = {
    {"encode_batch", (PyCFunction)encode_batch, METH_O,
     "encode_batch(batch) -> bytearray: the Kafka v2 bytes of batch, CRC field zero."},
    {"decode_records", (PyCFunction)(void (*)(void))decode_records, METH_FASTCALL,
     "decode_records(buf, pos, end, count, base_ts, record_type, error_type, direct) -> tuple"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "kraft_spark.log._fastcodec",
    "Kafka v2 record batch encoding and decoding in C (see kraft_spark/log/codec.py).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__fastcodec(void) {
    struct {
        PyObject **slot;
        const char *text;
    } names[] = {
        {&s_records, "records"},
        {&s_base_offset, "base_offset"},
        {&s_epoch, "epoch"},
        {&s_is_control, "is_control"},
        {&s_producer_id, "producer_id"},
        {&s_producer_epoch, "producer_epoch"},
        {&s_base_sequence, "base_sequence"},
        {&s_key, "key"},
        {&s_value, "value"},
        {&s_timestamp_ms, "timestamp_ms"},
        {&s_headers, "headers"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (*names[i].slot == NULL) {
            *names[i].slot = PyUnicode_InternFromString(names[i].text);
            if (*names[i].slot == NULL)
                return NULL;
        }
    }
    return PyModule_Create(&module);
}
