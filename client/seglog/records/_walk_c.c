/* seglog.records._walk_c: the records-area walk of a lookup by time, compiled.
 *
 * The reference is walk_records (walk.py) with the comparison of record_timestamps: the first
 * record whose timestampDelta >= target_delta and offsetDelta >= offset_delta_min, every
 * record up to it checked as walk_records checks it, and when none reaches, every record
 * checked and the area filled exactly.  This file keeps every one of its rules:
 *
 *   count >= 0; 0 <= position <= end <= len(data)
 *   before each record: position < end (premature EOF)
 *   length          varint (<= 5 bytes, low 32 bits)   1 <= length <= end - p
 *   attributes      1 byte                             skipped
 *   timestampDelta  varlong (<= 10 bytes, low 64 bits)
 *   offsetDelta     varint
 *   keyLength       varint   -1 <= n <= bytes left in the record, then n bytes skipped
 *   valueLength     varint   the same
 *   headerCount     varint   0 <= n and 2n <= bytes left in the record
 *     keyLength     varint   0 <= n <= bytes left, the key valid UTF-8 (strict, as Python)
 *     valueLength   varint   -1 <= n <= bytes left
 *   the fields end exactly at the record's end; after ``count`` records, at the area's end
 *
 * Every read is bounded by the record's end (the length varint by the area's end).  The
 * reference reads on past them, into the next record or the bytes after the area, but
 * positions only move forward, so a field read there always ends past the record and the
 * reference refuses the record too: same verdict.  A refusal raises the codec's
 * CorruptRecordError naming the record, the byte and the rule; the Python wrapper
 * (walk_compiled.py) reruns the reference for its precise message.
 * Agreement with the reference is checked differentially (tests/unit/seglog/records/
 * test_walk_compiled.py, Hypothesis over valid and hostile areas).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define VARINT_BYTES_MAX 5
#define VARLONG_BYTES_MAX 10
#define CONTINUATION 0x80

static PyObject *corrupt_error; /* seglog.records.errors.CorruptRecordError */

enum { OK = 0, REFUSED = -1, FAILED = -2 /* a Python error is set (not about the bytes) */ };

/* The zigzag varint at *p, read no further than limit: REFUSED when it runs to the limit or
 * has not ended within bytes_max bytes (decode_varint / decode_varlong: Illegal or Truncated). */
static inline int
read_varint(const uint8_t *data, Py_ssize_t limit, Py_ssize_t *p, int bytes_max, int64_t *out)
{
    uint64_t unsigned_value = 0;
    int shift = 0;
    Py_ssize_t position = *p;
    for (int index = 0; index < bytes_max; index++) {
        if (position >= limit)
            return REFUSED;
        uint8_t byte = data[position++];
        unsigned_value |= (uint64_t)(byte & 0x7F) << shift; /* bits past 64 fall off: Kafka keeps the low 64 */
        if (byte < CONTINUATION) {
            if (bytes_max == VARINT_BYTES_MAX)
                unsigned_value &= 0xFFFFFFFFu; /* a varint keeps the low 32 bits */
            *out = (int64_t)((unsigned_value >> 1) ^ (uint64_t)(-(int64_t)(unsigned_value & 1)));
            *p = position;
            return OK;
        }
        shift += 7;
    }
    return REFUSED;
}

static int
refuse(Py_ssize_t index, Py_ssize_t position, const char *rule)
{
    PyErr_Format(corrupt_error, "Invalid record %zd at byte %zd: %s (the compiled walk)", index, position, rule);
    return REFUSED;
}

/* A length-prefixed field: its varint, then its bytes skipped; null_ok allows -1. */
static inline int
skip_field(const uint8_t *data, Py_ssize_t record_end, Py_ssize_t *p, int null_ok, int64_t *size_out)
{
    int64_t size;
    if (read_varint(data, record_end, p, VARINT_BYTES_MAX, &size) != OK)
        return REFUSED;
    if (size < (null_ok ? -1 : 0) || size > record_end - *p)
        return REFUSED;
    if (size > 0)
        *p += (Py_ssize_t)size;
    *size_out = size;
    return OK;
}

static int
is_ascii(const uint8_t *bytes, Py_ssize_t size)
{
    for (Py_ssize_t i = 0; i < size; i++)
        if (bytes[i] >= 0x80)
            return 0;
    return 1;
}

/* The headers of one record from *p (at its header count). */
static int
skip_headers(const uint8_t *data, Py_ssize_t record_end, Py_ssize_t *p, Py_ssize_t index)
{
    int64_t count, size;
    Py_ssize_t start = *p;
    if (read_varint(data, record_end, p, VARINT_BYTES_MAX, &count) != OK)
        return refuse(index, start, "its header count runs past the record or is not a varint");
    if (count < 0 || 2 * count > record_end - *p) /* each header is at least two bytes */
        return refuse(index, start, "invalid number of record headers");
    for (int64_t header = 0; header < count; header++) {
        Py_ssize_t key = *p;
        if (skip_field(data, record_end, p, 0, &size) != OK)
            return refuse(index, key, "a header key length runs past the record");
        const uint8_t *key_bytes = data + *p - size;
        if (!is_ascii(key_bytes, (Py_ssize_t)size)) { /* header keys are strings (Kafka's Header.key()) */
            PyObject *decoded = PyUnicode_DecodeUTF8((const char *)key_bytes, (Py_ssize_t)size, "strict");
            if (decoded == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                    return FAILED;
                PyErr_Clear();
                return refuse(index, key, "a header key is not UTF-8");
            }
            Py_DECREF(decoded);
        }
        Py_ssize_t value = *p;
        if (skip_field(data, record_end, p, 1, &size) != OK)
            return refuse(index, value, "a header value length runs past the record");
    }
    return OK;
}

/* A target as an int64 and whether it lies outside: +1 above every int64, -1 below. */
static int
as_target(PyObject *value, int64_t *out, int *outside)
{
    int overflow = 0;
    long long target = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (target == -1 && overflow == 0 && PyErr_Occurred())
        return FAILED;
    *out = (int64_t)target;
    *outside = overflow;
    return OK;
}

PyDoc_STRVAR(first_reaching_doc,
"first_reaching(data, position, end, count, target_delta, offset_delta_min)\n--\n\n"
"(offsetDelta, timestampDelta) of the first of the ``count`` records in ``data[position:end]``\n"
"(any buffer) with timestampDelta >= target_delta and offsetDelta >= offset_delta_min, every\n"
"record up to it checked as walk_records checks it; None when every record is checked and\n"
"none reaches; CorruptRecordError at the first lie.");

static PyObject *
first_reaching(PyObject *module, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t position, end, count;
    PyObject *target_object, *offset_min_object;
    if (!PyArg_ParseTuple(args, "y*nnnOO:first_reaching", &view, &position, &end, &count, &target_object,
                          &offset_min_object))
        return NULL;
    PyObject *result = NULL;
    int64_t target, offset_min;
    int target_outside, offset_min_outside;
    if (as_target(target_object, &target, &target_outside) != OK ||
        as_target(offset_min_object, &offset_min, &offset_min_outside) != OK)
        goto done;
    const uint8_t *data = (const uint8_t *)view.buf;
    if (count < 0) {
        PyErr_Format(corrupt_error, "Found invalid record count: expected >= 0, found %zd (the compiled walk)", count);
        goto done;
    }
    if (end > view.len || position < 0 || position > end) {
        PyErr_Format(corrupt_error, "Records area [%zd, %zd) is outside the %zd bytes given", position, end, view.len);
        goto done;
    }
    for (Py_ssize_t index = 0; index < count; index++) {
        if (position >= end) {
            refuse(index, position, "premature EOF (fewer records than the batch declares)");
            goto done;
        }
        Py_ssize_t p = position;
        int64_t length, timestamp_delta, offset_delta, size;
        if (read_varint(data, end, &p, VARINT_BYTES_MAX, &length) != OK || length <= 0 || length > end - p) {
            refuse(index, position, "invalid record length");
            goto done;
        }
        Py_ssize_t record_end = p + (Py_ssize_t)length;
        p += 1; /* attributes: unused */
        if (read_varint(data, record_end, &p, VARLONG_BYTES_MAX, &timestamp_delta) != OK ||
            read_varint(data, record_end, &p, VARINT_BYTES_MAX, &offset_delta) != OK) {
            refuse(index, position, "its timestampDelta or offsetDelta runs past the record or is not a varint");
            goto done;
        }
        if (skip_field(data, record_end, &p, 1, &size) != OK) {
            refuse(index, position, "invalid key length");
            goto done;
        }
        if (skip_field(data, record_end, &p, 1, &size) != OK) {
            refuse(index, position, "invalid value length");
            goto done;
        }
        if (p < record_end && data[p] == 0) {
            p += 1; /* no headers: the common record */
        } else {
            int status = skip_headers(data, record_end, &p, index);
            if (status != OK)
                goto done;
        }
        if (p != record_end) {
            refuse(index, position, "its fields do not fill its declared length");
            goto done;
        }
        int time_reaches = target_outside < 0 || (target_outside == 0 && timestamp_delta >= target);
        int offset_reaches = offset_min_outside < 0 || (offset_min_outside == 0 && offset_delta >= offset_min);
        if (time_reaches && offset_reaches) {
            result = Py_BuildValue("(LL)", (long long)offset_delta, (long long)timestamp_delta);
            goto done;
        }
        position = record_end;
    }
    if (position != end) {
        PyErr_Format(corrupt_error, "Incorrect declared batch size, records still remaining: %zd more bytes after "
                     "%zd records at byte %zd (the compiled walk)", end - position, count, position);
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"first_reaching", first_reaching, METH_VARARGS, first_reaching_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "seglog.records._walk_c",
    "The records-area walk of a lookup by time, compiled (see _walk_c.c).", -1, methods,
};

PyMODINIT_FUNC
PyInit__walk_c(void)
{
    PyObject *errors = PyImport_ImportModule("seglog.records.errors");
    if (errors == NULL)
        return NULL;
    corrupt_error = PyObject_GetAttrString(errors, "CorruptRecordError");
    Py_DECREF(errors);
    if (corrupt_error == NULL)
        return NULL;
    return PyModule_Create(&module_def);
}
