/* seglog._answers_c: a packed OffsetsForTimes entry's per-target work, compiled: its answers as
 * the admin returns them (packed_answers), and a request's timestamps of one partition in the
 * packed field's wire form (packed_timestamps, parsed by upb: no int converted by its extend).
 *
 * The reference is packed_answers_reference (_lookup_answers.py): for each target of the entry,
 * None when its offset is negative (refused, or no record at or after its time: the proto's -1),
 * else answer_type((offset, timestamp_ms)).  In Python each answer is a call of tuple.__new__
 * through map (an argument tuple, the subclass's instance, a copy of the pair): about 0.2 us a
 * target, the largest piece of the client's own Python in a call of 100 targets.  Here an
 * answer is one allocation of answer_type and two item stores.  Agreement with the reference is checked
 * differentially (tests/unit/seglog/test_lookup_answers.py, Hypothesis over int64 columns).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* Strong references to every item of ``sequence`` (a new array; *count set), taken before any
 * allocation: a collection an allocation starts may run a finalizer that changes a caller's
 * list, and PySequence_Fast hands a list itself, not a copy.  NULL with an error set. */
static PyObject **
take_items(PyObject *sequence, const char *message, Py_ssize_t *count)
{
    PyObject *fast = PySequence_Fast(sequence, message);
    if (fast == NULL)
        return NULL;
    const Py_ssize_t size = PySequence_Fast_GET_SIZE(fast);
    PyObject **items = PyMem_New(PyObject *, size > 0 ? size : 1);
    if (items == NULL) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    PyObject **source = PySequence_Fast_ITEMS(fast);
    for (Py_ssize_t i = 0; i < size; i++)
        items[i] = Py_NewRef(source[i]);
    Py_DECREF(fast);
    *count = size;
    return items;
}

static void
release_items(PyObject **items, Py_ssize_t count)
{
    if (items == NULL)
        return;
    for (Py_ssize_t i = 0; i < count; i++)
        Py_DECREF(items[i]);
    PyMem_Free(items);
}

/* An answer made by tp_alloc is zero-filled; from CPython 3.14 (gh-131525) a tuple caches its
 * hash in ob_hash, where -1 means not yet computed and 0 is taken as the hash itself: without
 * this every answer would hash to 0 and differ in hash from an equal OffsetAndTimestamp. */
static inline void
clear_tuple_hash(PyObject *tuple)
{
#if PY_VERSION_HEX >= 0x030E0000
    ((PyTupleObject *)tuple)->ob_hash = -1;
#else
    (void)tuple;
#endif
}

PyDoc_STRVAR(packed_answers_doc,
"packed_answers(offsets, timestamps_ms, answer_type)\n--\n\n"
"A packed OffsetsForTimes entry's answers, in order: None where the offset is negative, else\n"
"answer_type((offset, timestamp_ms)) (answer_type: a tuple subclass adding no fields, as a\n"
"NamedTuple). offsets and timestamps_ms: sequences of ints of equal length (ValueError or\n"
"TypeError otherwise).");

static PyObject *
packed_answers(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *offsets_object, *timestamps_object;
    PyTypeObject *answer_type;
    if (!PyArg_ParseTuple(args, "OOO!:packed_answers", &offsets_object, &timestamps_object, &PyType_Type,
                          &answer_type))
        return NULL;
    if (!PyType_IsSubtype(answer_type, &PyTuple_Type) || answer_type->tp_basicsize != PyTuple_Type.tp_basicsize ||
        answer_type->tp_itemsize != PyTuple_Type.tp_itemsize) {
        PyErr_Format(PyExc_TypeError, "packed_answers: answer_type must be a tuple subclass adding no fields, not %.100s",
                     answer_type->tp_name);
        return NULL;
    }
    PyObject *answers = NULL, **offsets = NULL, **timestamps = NULL, **built = NULL;
    Py_ssize_t offset_count = 0, timestamp_count = 0, built_count = 0;
    offsets = take_items(offsets_object, "packed_answers: offsets must be a sequence of ints", &offset_count);
    if (offsets == NULL)
        goto done;
    timestamps = take_items(timestamps_object, "packed_answers: timestamps_ms must be a sequence of ints",
                            &timestamp_count);
    if (timestamps == NULL)
        goto done;
    if (offset_count != timestamp_count) {
        PyErr_Format(PyExc_ValueError, "packed_answers: %zd offsets but %zd timestamps", offset_count, timestamp_count);
        goto done;
    }
    /* Every item checked before the first answer is built: a bad column answers nothing. */
    for (Py_ssize_t i = 0; i < offset_count; i++) {
        if (!PyLong_Check(offsets[i]) || !PyLong_Check(timestamps[i])) {
            PyObject *bad = PyLong_Check(offsets[i]) ? timestamps[i] : offsets[i];
            PyErr_Format(PyExc_TypeError, "packed_answers: an offset or timestamp must be an int, not %.100s",
                         Py_TYPE(bad)->tp_name);
            goto done;
        }
    }
    /* The answers go into a C array first and into the list only once all are built: a list
     * from PyList_New holds NULL items until filled, and an allocation of an answer may start a
     * collection whose finalizer reaches the list (gc.get_objects()) and reads them. */
    built = PyMem_New(PyObject *, offset_count > 0 ? offset_count : 1);
    if (built == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < offset_count; i++) {
        /* Its sign (a value past int64 keeps its sign; an exact int runs no Python code). */
        int overflow = 0;
        long long offset = PyLong_AsLongLongAndOverflow(offsets[i], &overflow);
        if (offset == -1 && !overflow && PyErr_Occurred())
            goto done;
        if (overflow < 0 || (!overflow && offset < 0)) {
            built[built_count++] = Py_NewRef(Py_None);
            continue;
        }
        PyObject *answer = answer_type->tp_alloc(answer_type, 2);
        if (answer == NULL)
            goto done;
        clear_tuple_hash(answer);
        PyTuple_SET_ITEM(answer, 0, Py_NewRef(offsets[i]));
        PyTuple_SET_ITEM(answer, 1, Py_NewRef(timestamps[i]));
        built[built_count++] = answer;
    }
    /* PyList_New's only allocations come before the list is tracked by the collector; from here
     * to the return nothing allocates. */
    answers = PyList_New(offset_count);
    if (answers == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < offset_count; i++)
        PyList_SET_ITEM(answers, i, built[i]);
    built_count = 0; /* moved into the list: nothing left to release */
done:
    release_items(built, built_count);
    release_items(offsets, offset_count);
    release_items(timestamps, timestamp_count);
    return answers;
}

/* A varint's bytes (protobuf's base-128, low group first); an int64 is written as its uint64. */
static inline Py_ssize_t
varint_bytes(uint64_t value)
{
    Py_ssize_t size = 1;
    while (value >= 0x80) {
        value >>= 7;
        size++;
    }
    return size;
}

static inline unsigned char *
put_varint(unsigned char *at, uint64_t value)
{
    while (value >= 0x80) {
        *at++ = (unsigned char)(value | 0x80);
        value >>= 7;
    }
    *at++ = (unsigned char)value;
    return at;
}

PyDoc_STRVAR(packed_timestamps_doc,
"packed_timestamps(targets, partition, field_number)\n--\n\n"
"The wire form of a packed repeated int64 field numbered field_number (its key, length and\n"
"varints) holding each target's timestamp in order, when every one of targets is a tuple\n"
"(partition, timestamp) whose first item is partition itself and whose timestamp is an int in\n"
"int64; else None (the caller builds the field the general way, which also refuses what upb\n"
"refuses). An entry's MergeFromString of it appends the timestamps as extend() would.");

static PyObject *
packed_timestamps(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *targets_object, *partition;
    int field_number;
    if (!PyArg_ParseTuple(args, "OOi:packed_timestamps", &targets_object, &partition, &field_number))
        return NULL;
    if (field_number < 1 || field_number > 536870911) { /* protobuf's field numbers: 1 .. 2**29 - 1 */
        PyErr_Format(PyExc_ValueError, "packed_timestamps: field_number %d is not a protobuf field number",
                     field_number);
        return NULL;
    }
    Py_ssize_t count = 0;
    /* Held before any allocation: a collection it starts may change the caller's list. */
    PyObject **items = take_items(targets_object, "packed_timestamps: targets must be a sequence", &count);
    if (items == NULL)
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t body = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *target = items[i];
        if (!PyTuple_CheckExact(target) || PyTuple_GET_SIZE(target) != 2 || PyTuple_GET_ITEM(target, 0) != partition ||
            !PyLong_CheckExact(PyTuple_GET_ITEM(target, 1))) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        int overflow = 0;
        long long timestamp = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(target, 1), &overflow);
        if (timestamp == -1 && !overflow && PyErr_Occurred())
            goto done;
        if (overflow) { /* past int64: upb's own refusal, on the general path */
            result = Py_NewRef(Py_None);
            goto done;
        }
        body += varint_bytes((uint64_t)timestamp);
    }
    const uint64_t key = ((uint64_t)field_number << 3) | 2; /* wire type 2: length-delimited */
    result = PyBytes_FromStringAndSize(NULL, varint_bytes(key) + varint_bytes((uint64_t)body) + body);
    if (result == NULL)
        goto done;
    unsigned char *at = put_varint(put_varint((unsigned char *)PyBytes_AS_STRING(result), key), (uint64_t)body);
    /* The targets are held and tuples (their items fixed), and nothing above ran Python code:
       the timestamps read again are the ones measured. */
    for (Py_ssize_t i = 0; i < count; i++)
        at = put_varint(at, (uint64_t)PyLong_AsLongLong(PyTuple_GET_ITEM(items[i], 1)));
    assert(at == (unsigned char *)PyBytes_AS_STRING(result) + PyBytes_GET_SIZE(result));
done:
    release_items(items, count);
    return result;
}

static PyMethodDef methods[] = {
    {"packed_answers", packed_answers, METH_VARARGS, packed_answers_doc},
    {"packed_timestamps", packed_timestamps, METH_VARARGS, packed_timestamps_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "seglog._answers_c",
    "A packed OffsetsForTimes entry's answers, compiled (see _answers_c.c).", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__answers_c(void)
{
    return PyModule_Create(&module_def);
}
