/* A run of records sharing one timestamp, encoded in C (see encode_compiled.py).
 *
 * The producer's batches are mostly runs: send_many's records share a millisecond, and so do
 * the records send appends within one. RecordBatchBuilder.extend encodes a run; in Python that
 * is a list of eight parts a record joined at build time, about 0.6 us a record. Here the run's
 * bytes are written in one pass: Kafka's v2 record layout (DefaultRecord.writeTo), every
 * length and delta a zigzag varint:
 *
 *   length  attributes(0)  timestampDelta(varlong)  offsetDelta  keyLength  key
 *   valueLength  value  headerCount(0)
 *
 * A null key or value is length -1 and no bytes. Anything else than bytes or None, a run whose
 * offsets would pass INT32_MAX, or a delta that is not an int64, is not encoded here: the
 * function returns None and the caller takes its Python path, which refuses or converts it with
 * the codec's own messages.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static size_t
varint_size(uint64_t zigzagged)
{
    size_t size = 1;
    while (zigzagged >= 0x80) {
        zigzagged >>= 7;
        size++;
    }
    return size;
}

static uint64_t
zigzag(int64_t value)
{
    return ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
}

static char *
put_varint(char *out, uint64_t zigzagged)
{
    while (zigzagged >= 0x80) {
        *out++ = (char)((zigzagged & 0x7f) | 0x80);
        zigzagged >>= 7;
    }
    *out++ = (char)zigzagged;
    return out;
}

/* A field's length: its bytes' length, -1 for None, -2 for anything else (not encoded here). */
static Py_ssize_t
field_length(PyObject *field)
{
    if (field == Py_None)
        return -1;
    if (PyBytes_CheckExact(field))
        return PyBytes_GET_SIZE(field);
    return -2;
}

static PyObject *encode_lists(PyObject *keys, PyObject *values, Py_ssize_t count, long long first_delta,
                              long long timestamp_delta);

PyDoc_STRVAR(encode_run_doc,
"encode_run(keys, values, first_offset_delta, timestamp_delta, count) -> bytes | None\n\n"
"The count records (key, value) of a run sharing one timestamp delta, offset deltas counting\n"
"from first_offset_delta, as Kafka v2 records without headers; None where a key or value is\n"
"not bytes or None, either list is not count long (the caller counted the records it will\n"
"claim), or a delta is out of range. Arguments of the wrong types raise TypeError.");

static PyObject *
encode_run(PyObject *self, PyObject *args)
{
    PyObject *keys_arg, *values_arg;
    long long first_delta, timestamp_delta;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "OOLLn", &keys_arg, &values_arg, &first_delta, &timestamp_delta, &count)) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError)) { /* a delta past int64: Python's paths refuse it */
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        return NULL;
    }
    if (!PyList_CheckExact(keys_arg) || !PyList_CheckExact(values_arg))
        Py_RETURN_NONE;
    /* count is what the caller will claim as the batch's records: lists changed since it
     * counted them (another thread, a finalizer) are left to its record-by-record paths. */
    /* Offset deltas up to INT32_MAX - 1 (a batch holds at most INT32_MAX records). */
    if (count < 1 || PyList_GET_SIZE(values_arg) != count || PyList_GET_SIZE(keys_arg) != count || first_delta < 0 || first_delta > INT32_MAX
            || first_delta + count - 1 > INT32_MAX - 1)
        Py_RETURN_NONE;
    /* Copies of the lists, made before anything is read: an allocation may run a collection and
     * its finalizers (Python code) that could change the caller's lists between the two passes
     * below; nobody else holds these, and bytes never change. */
    PyObject *keys = PyList_GetSlice(keys_arg, 0, count);
    if (keys == NULL)
        return NULL;
    PyObject *values = PyList_GetSlice(values_arg, 0, count);
    if (values == NULL) {
        Py_DECREF(keys);
        return NULL;
    }
    PyObject *encoded;
    if (PyList_GET_SIZE(keys) != count || PyList_GET_SIZE(values) != count) {
        encoded = Py_NewRef(Py_None); /* changed by a collection between the two copies */
    }
    else {
        encoded = encode_lists(keys, values, count, first_delta, timestamp_delta);
    }
    Py_DECREF(keys);
    Py_DECREF(values);
    return encoded;
}

static PyObject *
encode_lists(PyObject *keys_arg, PyObject *values_arg, Py_ssize_t count, long long first_delta,
             long long timestamp_delta)
{
    uint64_t timestamp_zigzag = zigzag((int64_t)timestamp_delta);
    size_t fixed = 1 + varint_size(timestamp_zigzag) + 1; /* attributes, timestampDelta, headerCount */
    size_t total = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t key_length = field_length(PyList_GET_ITEM(keys_arg, i));
        Py_ssize_t value_length = field_length(PyList_GET_ITEM(values_arg, i));
        if (key_length == -2 || value_length == -2)
            Py_RETURN_NONE;
        size_t body = fixed + varint_size(zigzag(first_delta + i))
            + varint_size(zigzag(key_length)) + (key_length > 0 ? (size_t)key_length : 0)
            + varint_size(zigzag(value_length)) + (value_length > 0 ? (size_t)value_length : 0);
        if (body > INT32_MAX)
            Py_RETURN_NONE;
        total += varint_size(zigzag((int64_t)body)) + body;
        if (total > (size_t)PY_SSIZE_T_MAX / 2)
            Py_RETURN_NONE;
    }
    PyObject *encoded = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (encoded == NULL)
        return NULL;
    char *out = PyBytes_AS_STRING(encoded);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *key = PyList_GET_ITEM(keys_arg, i);
        PyObject *value = PyList_GET_ITEM(values_arg, i);
        Py_ssize_t key_length = field_length(key);
        Py_ssize_t value_length = field_length(value);
        uint64_t offset_zigzag = zigzag(first_delta + i);
        size_t body = fixed + varint_size(offset_zigzag)
            + varint_size(zigzag(key_length)) + (key_length > 0 ? (size_t)key_length : 0)
            + varint_size(zigzag(value_length)) + (value_length > 0 ? (size_t)value_length : 0);
        out = put_varint(out, zigzag((int64_t)body));
        *out++ = 0; /* attributes */
        out = put_varint(out, timestamp_zigzag);
        out = put_varint(out, offset_zigzag);
        out = put_varint(out, zigzag(key_length));
        if (key_length > 0) {
            memcpy(out, PyBytes_AS_STRING(key), (size_t)key_length);
            out += key_length;
        }
        out = put_varint(out, zigzag(value_length));
        if (value_length > 0) {
            memcpy(out, PyBytes_AS_STRING(value), (size_t)value_length);
            out += value_length;
        }
        *out++ = 0; /* headerCount */
    }
    if (out != PyBytes_AS_STRING(encoded) + total) {
        Py_DECREF(encoded);
        PyErr_SetString(PyExc_AssertionError, "encode_run wrote another size than it computed");
        return NULL;
    }
    return encoded;
}

static PyMethodDef methods[] = {
    {"encode_run", encode_run, METH_VARARGS, encode_run_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "seglog.records._encode_c",
    "A run of records sharing one timestamp, encoded in C (see _encode_c.c).", -1, methods,
};

PyMODINIT_FUNC
PyInit__encode_c(void)
{
    return PyModule_Create(&module_def);
}
