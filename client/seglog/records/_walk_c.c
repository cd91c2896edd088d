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
 * first_reaching_each answers several ascending targets in one walk (to the last one's record):
 * the targets of a batched lookup that land in one large batch.  Its verdict is each target's
 * own walk's: it refuses exactly when the walk of some target alone refuses (the last target's
 * walk goes furthest).  One- and two-byte varints, nearly every field, are read inline.
 * Agreement with the reference is checked differentially (tests/unit/seglog/records/
 * test_walk_compiled.py, Hypothesis over valid and hostile areas).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define VARINT_BYTES_MAX 5
#define VARLONG_BYTES_MAX 10
#define CONTINUATION 0x80
#define STEPS_FIRST_CAPACITY 64 /* record_steps: the columns' first room, in steps */
#define STEPS_BLOCK 8 /* step_answers: targets bisected in lockstep */

static PyObject *corrupt_error; /* seglog.records.errors.CorruptRecordError */

enum { OK = 0, REFUSED = -1, FAILED = -2 /* a Python error is set (not about the bytes) */ };

/* The zigzag varint at *p, read no further than limit: REFUSED when it runs to the limit or
 * has not ended within bytes_max bytes (decode_varint / decode_varlong: Illegal or Truncated). */
static inline int
read_varint(const uint8_t *data, Py_ssize_t limit, Py_ssize_t *p, int bytes_max, int64_t *out)
{
    Py_ssize_t at = *p;
    if (at + 1 < limit && data[at] < CONTINUATION) { /* one byte: the common field */
        uint64_t small = data[at];
        *out = (int64_t)((small >> 1) ^ (uint64_t)(-(int64_t)(small & 1)));
        *p = at + 1;
        return OK;
    }
    if (at + 2 < limit && data[at + 1] < CONTINUATION) { /* two bytes */
        uint64_t small = (uint64_t)(data[at] & 0x7F) | ((uint64_t)data[at + 1] << 7);
        *out = (int64_t)((small >> 1) ^ (uint64_t)(-(int64_t)(small & 1)));
        *p = at + 2;
        return OK;
    }
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

/* A sequence's items held by the call: strong references in a C array (release_items drops them),
 * *count set; NULL with an error set.  PySequence_Fast hands back the caller's own list, not a copy,
 * and whatever runs Python code during the call (a collection started by an allocation: a
 * finalizer, a weakref callback; an item's comparison; an argument's __index__) may change that
 * list, freeing the array a borrowed items pointer reads and the items in it.  Taking them
 * allocates no object and runs no Python code, so the call answers the sequence as it was when
 * called.  Every function here reading a caller's sequence reads it through this. */
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
    PyObject **borrowed = PySequence_Fast_ITEMS(fast);
    for (Py_ssize_t k = 0; k < size; k++)
        items[k] = Py_NewRef(borrowed[k]);
    Py_DECREF(fast); /* (a list PySequence_Fast made: its items are held above) */
    *count = size;
    return items;
}

static void
release_items(PyObject **items, Py_ssize_t count)
{
    if (items == NULL)
        return;
    for (Py_ssize_t k = 0; k < count; k++)
        Py_DECREF(items[k]);
    PyMem_Free(items);
}

PyDoc_STRVAR(first_reaching_doc,
"first_reaching(data, position, end, count, target_delta, offset_delta_min)\n--\n\n"
"(offsetDelta, timestampDelta) of the first of the ``count`` records in ``data[position:end]``\n"
"(any buffer) with timestampDelta >= target_delta and offsetDelta >= offset_delta_min, every\n"
"record up to it checked as walk_records checks it; None when every record is checked and\n"
"none reaches; CorruptRecordError at the first lie.");

/* One record at *position, every rule checked: OK with its deltas and *position at its end;
 * REFUSED (CorruptRecordError set) or FAILED (another Python error set). */
static inline int
walk_one(const uint8_t *data, Py_ssize_t end, Py_ssize_t *position, Py_ssize_t index, int64_t *timestamp_delta,
         int64_t *offset_delta)
{
    Py_ssize_t start = *position;
    if (start >= end)
        return refuse(index, start, "premature EOF (fewer records than the batch declares)");
    Py_ssize_t p = start;
    int64_t length, size;
    if (read_varint(data, end, &p, VARINT_BYTES_MAX, &length) != OK || length <= 0 || length > end - p)
        return refuse(index, start, "invalid record length");
    Py_ssize_t record_end = p + (Py_ssize_t)length;
    p += 1; /* attributes: unused */
    if (read_varint(data, record_end, &p, VARLONG_BYTES_MAX, timestamp_delta) != OK ||
        read_varint(data, record_end, &p, VARINT_BYTES_MAX, offset_delta) != OK)
        return refuse(index, start, "its timestampDelta or offsetDelta runs past the record or is not a varint");
    if (skip_field(data, record_end, &p, 1, &size) != OK)
        return refuse(index, start, "invalid key length");
    if (skip_field(data, record_end, &p, 1, &size) != OK)
        return refuse(index, start, "invalid value length");
    if (p < record_end && data[p] == 0) {
        p += 1; /* no headers: the common record */
    } else {
        int status = skip_headers(data, record_end, &p, index);
        if (status != OK)
            return status;
    }
    if (p != record_end)
        return refuse(index, start, "its fields do not fill its declared length");
    *position = record_end;
    return OK;
}

/* The area's arguments checked as walk_records checks them. */
static int
check_area(Py_ssize_t length, Py_ssize_t position, Py_ssize_t end, Py_ssize_t count)
{
    if (count < 0) {
        PyErr_Format(corrupt_error, "Found invalid record count: expected >= 0, found %zd (the compiled walk)", count);
        return REFUSED;
    }
    if (end > length || position < 0 || position > end) {
        PyErr_Format(corrupt_error, "Records area [%zd, %zd) is outside the %zd bytes given", position, end, length);
        return REFUSED;
    }
    return OK;
}

/* After ``count`` records at ``position``: the area must be filled exactly. */
static int
check_filled(Py_ssize_t position, Py_ssize_t end, Py_ssize_t count)
{
    if (position != end) {
        PyErr_Format(corrupt_error, "Incorrect declared batch size, records still remaining: %zd more bytes after "
                     "%zd records at byte %zd (the compiled walk)", end - position, count, position);
        return REFUSED;
    }
    return OK;
}

static inline int
reaches(int64_t value, int64_t target, int outside)
{
    return outside < 0 || (outside == 0 && value >= target);
}

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
    if (check_area(view.len, position, end, count) != OK)
        goto done;
    for (Py_ssize_t index = 0; index < count; index++) {
        int64_t timestamp_delta, offset_delta;
        if (walk_one(data, end, &position, index, &timestamp_delta, &offset_delta) != OK)
            goto done;
        if (reaches(timestamp_delta, target, target_outside) && reaches(offset_delta, offset_min, offset_min_outside)) {
            result = Py_BuildValue("(LL)", (long long)offset_delta, (long long)timestamp_delta);
            goto done;
        }
    }
    if (check_filled(position, end, count) != OK)
        goto done;
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&view);
    return result;
}

PyDoc_STRVAR(first_reaching_each_doc,
"first_reaching_each(data, position, end, count, target_deltas, offset_delta_min)\n--\n\n"
"first_reaching for each of ``target_deltas`` (a sequence of ints, ascending), in one walk:\n"
"a list of (offsetDelta, timestampDelta) or None, one per target. CorruptRecordError when the\n"
"walk of any target alone would raise (the walk of the last target goes furthest).");

static PyObject *
first_reaching_each(PyObject *module, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t position, end, count;
    PyObject *targets_object, *offset_min_object;
    if (!PyArg_ParseTuple(args, "y*nnnOO:first_reaching_each", &view, &position, &end, &count, &targets_object,
                          &offset_min_object))
        return NULL;
    PyObject *result = NULL, *answers = NULL;
    int64_t offset_min, target = 0;
    int offset_min_outside, target_outside = 0;
    Py_ssize_t wanted = 0;
    /* The targets first: the offset floor's __index__, the allocations below (a collection) and the
       targets' comparisons may run Python code that changes the caller's list. */
    PyObject **items = take_items(targets_object, "target_deltas must be a sequence", &wanted);
    if (items == NULL)
        goto done;
    if (as_target(offset_min_object, &offset_min, &offset_min_outside) != OK)
        goto done;
    answers = PyList_New(wanted);
    if (answers == NULL)
        goto done;
    for (Py_ssize_t k = 0; k < wanted; k++) {
        if (!PyLong_Check(items[k])) {
            PyErr_SetString(PyExc_TypeError, "target_deltas must hold ints");
            goto done;
        }
        PyList_SET_ITEM(answers, k, Py_NewRef(Py_None));
    }
    if (wanted == 0) { /* no target: no walk (as no single walk is made) */
        result = Py_NewRef(answers);
        goto done;
    }
    for (Py_ssize_t k = 1; k < wanted; k++) {
        int above = PyObject_RichCompareBool(items[k - 1], items[k], Py_GT);
        if (above < 0)
            goto done;
        if (above) {
            PyErr_SetString(PyExc_ValueError, "target_deltas must ascend");
            goto done;
        }
    }
    const uint8_t *data = (const uint8_t *)view.buf;
    if (check_area(view.len, position, end, count) != OK)
        goto done;
    Py_ssize_t next = 0; /* the first target not yet answered */
    if (wanted > 0 && as_target(items[0], &target, &target_outside) != OK)
        goto done;
    Py_ssize_t index = 0;
    for (; index < count && next < wanted; index++) {
        int64_t timestamp_delta, offset_delta;
        if (walk_one(data, end, &position, index, &timestamp_delta, &offset_delta) != OK)
            goto done;
        if (!reaches(offset_delta, offset_min, offset_min_outside))
            continue;
        PyObject *found = NULL;
        while (next < wanted && reaches(timestamp_delta, target, target_outside)) {
            if (found == NULL) {
                found = Py_BuildValue("(LL)", (long long)offset_delta, (long long)timestamp_delta);
                if (found == NULL)
                    goto done;
            }
            PyList_SetItem(answers, next, Py_NewRef(found)); /* drops the None */
            next++;
            if (next < wanted && as_target(items[next], &target, &target_outside) != OK) {
                Py_DECREF(found);
                goto done;
            }
        }
        Py_XDECREF(found);
    }
    if (next < wanted) { /* some target reached by no record: every record checked, the area filled */
        if (check_filled(position, end, count) != OK)
            goto done;
    }
    result = Py_NewRef(answers);
done:
    Py_XDECREF(answers);
    release_items(items, wanted);
    PyBuffer_Release(&view);
    return result;
}

PyDoc_STRVAR(record_times_doc,
"record_times(data, position, end, count)\n--\n\n"
"The records area walked to its end with every rule of walk_records: (timestamp deltas,\n"
"offset deltas, running maximum of the timestamp deltas) as bytes of native int64s, one of\n"
"each per record; CorruptRecordError as the walk of a target no record reaches refuses.");

static PyObject *
record_times(PyObject *module, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t position, end, count;
    if (!PyArg_ParseTuple(args, "y*nnn:record_times", &view, &position, &end, &count))
        return NULL;
    PyObject *result = NULL, *timestamps = NULL, *offsets = NULL, *reach = NULL;
    const uint8_t *data = (const uint8_t *)view.buf;
    if (check_area(view.len, position, end, count) != OK)
        goto done;
    if (count > (end - position) / 2) { /* each record is at least two bytes: the walk would refuse */
        Py_ssize_t index = 0;
        int64_t timestamp_delta, offset_delta;
        for (; index < count; index++)
            if (walk_one(data, end, &position, index, &timestamp_delta, &offset_delta) != OK)
                goto done;
        refuse(index, position, "premature EOF (fewer records than the batch declares)"); /* not reached */
        goto done;
    }
    timestamps = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)sizeof(int64_t));
    offsets = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)sizeof(int64_t));
    reach = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)sizeof(int64_t));
    if (timestamps == NULL || offsets == NULL || reach == NULL)
        goto done;
    int64_t *timestamp_out = (int64_t *)PyBytes_AS_STRING(timestamps);
    int64_t *offset_out = (int64_t *)PyBytes_AS_STRING(offsets);
    int64_t *reach_out = (int64_t *)PyBytes_AS_STRING(reach);
    for (Py_ssize_t index = 0; index < count; index++) {
        if (walk_one(data, end, &position, index, &timestamp_out[index], &offset_out[index]) != OK)
            goto done;
        reach_out[index] = index > 0 && reach_out[index - 1] > timestamp_out[index] ? reach_out[index - 1]
                                                                                     : timestamp_out[index];
    }
    if (check_filled(position, end, count) != OK)
        goto done;
    result = PyTuple_Pack(3, timestamps, offsets, reach);
done:
    Py_XDECREF(reach);
    Py_XDECREF(timestamps);
    Py_XDECREF(offsets);
    PyBuffer_Release(&view);
    return result;
}

PyDoc_STRVAR(record_steps_doc,
"record_steps(data, position, end, count, base_timestamp, base_offset, floor)\n--\n\n"
"The records area walked to its end with every rule of walk_records: (timestamps, offsets) of its\n"
"steps as bytes of native int64s, a step being a record whose base_timestamp + timestampDelta is\n"
"above floor and above every earlier record's (its offset base_offset + offsetDelta), and whether\n"
"the offset deltas run 0..count-1; CorruptRecordError as the walk of a target no record reaches\n"
"refuses; OverflowError (after a whole walk) when a step's timestamp or offset is past int64.");

static PyObject *
record_steps(PyObject *module, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t position, end, count;
    long long base_timestamp, base_offset, floor;
    if (!PyArg_ParseTuple(args, "y*nnnLLL:record_steps", &view, &position, &end, &count, &base_timestamp,
                          &base_offset, &floor))
        return NULL;
    PyObject *result = NULL, *timestamps = NULL, *offsets = NULL;
    const uint8_t *data = (const uint8_t *)view.buf;
    Py_ssize_t index = 0, steps = 0;
    int64_t timestamp_delta, offset_delta, running = floor, timestamp, offset;
    int in_order = 1, overflow = 0;
    if (check_area(view.len, position, end, count) != OK)
        goto done;
    if (count > (end - position) / 2) { /* each record is at least two bytes: the walk would refuse */
        for (; index < count; index++)
            if (walk_one(data, end, &position, index, &timestamp_delta, &offset_delta) != OK)
                goto done;
        refuse(index, position, "premature EOF (fewer records than the batch declares)"); /* not reached */
        goto done;
    }
    /* The columns grow as steps are found (doubling): a batch's steps are usually far fewer than
       its records, and a lying count must not make the walk allocate by it. */
    Py_ssize_t capacity = count < STEPS_FIRST_CAPACITY ? count : STEPS_FIRST_CAPACITY;
    timestamps = PyBytes_FromStringAndSize(NULL, capacity * (Py_ssize_t)sizeof(int64_t));
    offsets = PyBytes_FromStringAndSize(NULL, capacity * (Py_ssize_t)sizeof(int64_t));
    if (timestamps == NULL || offsets == NULL)
        goto done;
    int64_t *timestamp_out = (int64_t *)PyBytes_AS_STRING(timestamps);
    int64_t *offset_out = (int64_t *)PyBytes_AS_STRING(offsets);
    for (; index < count; index++) {
        if (walk_one(data, end, &position, index, &timestamp_delta, &offset_delta) != OK)
            goto done;
        if (offset_delta != index)
            in_order = 0;
        if (overflow)
            continue; /* (the walk goes on for its verdict) */
        if (__builtin_add_overflow((int64_t)base_timestamp, timestamp_delta, &timestamp)) {
            overflow = timestamp_delta > 0; /* above every int64: a step; below: never one */
            continue;
        }
        if (timestamp > running) {
            if (__builtin_add_overflow((int64_t)base_offset, offset_delta, &offset)) {
                overflow = 1;
                continue;
            }
            if (steps == capacity) {
                capacity = capacity > count - capacity ? count : 2 * capacity;
                if (_PyBytes_Resize(&timestamps, capacity * (Py_ssize_t)sizeof(int64_t)) != 0 ||
                    _PyBytes_Resize(&offsets, capacity * (Py_ssize_t)sizeof(int64_t)) != 0)
                    goto done; /* (each resize frees and clears its object on failure) */
                timestamp_out = (int64_t *)PyBytes_AS_STRING(timestamps);
                offset_out = (int64_t *)PyBytes_AS_STRING(offsets);
            }
            timestamp_out[steps] = running = timestamp;
            offset_out[steps] = offset;
            steps++;
        }
    }
    if (check_filled(position, end, count) != OK)
        goto done;
    if (overflow) {
        PyErr_SetString(PyExc_OverflowError, "a step's timestamp or offset is past int64");
        goto done;
    }
    if (_PyBytes_Resize(&timestamps, steps * (Py_ssize_t)sizeof(int64_t)) != 0 ||
        _PyBytes_Resize(&offsets, steps * (Py_ssize_t)sizeof(int64_t)) != 0)
        goto done; /* (each resize frees and clears its object on failure) */
    result = Py_BuildValue("(OON)", timestamps, offsets, PyBool_FromLong(in_order));
done:
    Py_XDECREF(timestamps);
    Py_XDECREF(offsets);
    PyBuffer_Release(&view);
    return result;
}

/* step_answers: a time-step table's answers to a call's targets (time_steps.py).  The table is two
 * int64 columns of equal length (timestamps strictly ascending, offsets); a target's step is the
 * first whose timestamp >= it (a bisection), answered as answer_type((timestamp, offset)) unless
 * it lies below offset_min or past the table's end (then the target's position goes to ``rest``,
 * or, past the end of a table that covers its whole segment, the answer is None). */

/* A 1-dimensional C-contiguous buffer of native int64s, else ValueError/TypeError. */
static int
int64_column(PyObject *object, const char *name, Py_buffer *view)
{
    if (PyObject_GetBuffer(object, view, PyBUF_FULL_RO) != 0) {
        if (PyErr_ExceptionMatches(PyExc_BufferError) || PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "step_answers: %s must be a buffer of int64s, not %.100s", name,
                         Py_TYPE(object)->tp_name);
        }
        return FAILED;
    }
    const char *format = view->format == NULL ? "B" : view->format;
    if (format[0] == '@' || format[0] == '=' || (format[0] == '<' && PY_LITTLE_ENDIAN) ||
        (format[0] == '>' && !PY_LITTLE_ENDIAN))
        format++;
    int int64 = view->itemsize == 8 && (strcmp(format, "q") == 0 || (sizeof(long) == 8 && strcmp(format, "l") == 0));
    if (!int64 || view->ndim != 1 || !PyBuffer_IsContiguous(view, 'C')) {
        PyErr_Format(PyExc_ValueError,
                     "step_answers: %s must be a 1-dimensional contiguous buffer of int64s "
                     "(format %.20s, item size %zd, %d dimensions)", name, view->format == NULL ? "B" : view->format,
                     view->itemsize, view->ndim);
        PyBuffer_Release(view);
        return FAILED;
    }
    return OK;
}

/* An int as an int64, clamped: a value past int64 compares as past every int64 (its sign says
 * which side).  Returns FAILED (TypeError set) for a non-int. */
static inline int
clamped_int64(PyObject *object, int64_t *out)
{
    if (!PyLong_Check(object)) {
        PyErr_Format(PyExc_TypeError, "step_answers: a target must be an int, not %.100s", Py_TYPE(object)->tp_name);
        return FAILED;
    }
    int overflow = 0;
    long long value = PyLong_AsLongLongAndOverflow(object, &overflow);
    if (value == -1 && PyErr_Occurred())
        return FAILED;
    *out = overflow > 0 ? INT64_MAX : overflow < 0 ? INT64_MIN : (int64_t)value;
    return overflow;
}

PyDoc_STRVAR(step_answers_doc,
"step_answers(timestamps, offsets, targets, offset_min, whole, answer_type)\n--\n\n"
"A time-step table's answers to targets (ints, in any order): for each, the first step whose\n"
"timestamp is >= it, as answer_type((timestamp, offset)) (answer_type: a tuple subclass adding no\n"
"fields, as a NamedTuple), else None; and the positions of the targets the table cannot answer\n"
"(their step's offset is below offset_min, or no step reaches them and not whole), left None.\n"
"timestamps and offsets: 1-dimensional contiguous buffers of int64s of equal length (TypeError or\n"
"ValueError otherwise). Returns (answers, rest).");

static PyObject *
step_answers(PyObject *module, PyObject *args)
{
    PyObject *timestamps_object, *offsets_object, *targets_object, *offset_min_object;
    PyTypeObject *answer_type;
    int whole;
    if (!PyArg_ParseTuple(args, "OOOOpO!:step_answers", &timestamps_object, &offsets_object, &targets_object,
                          &offset_min_object, &whole, &PyType_Type, &answer_type))
        return NULL;
    if (!PyType_IsSubtype(answer_type, &PyTuple_Type) || answer_type->tp_basicsize != PyTuple_Type.tp_basicsize ||
        answer_type->tp_itemsize != PyTuple_Type.tp_itemsize) {
        PyErr_Format(PyExc_TypeError, "step_answers: answer_type must be a tuple subclass adding no fields, not %.100s",
                     answer_type->tp_name);
        return NULL;
    }
    int64_t offset_min;
    if (!PyLong_Check(offset_min_object)) {
        PyErr_Format(PyExc_TypeError, "step_answers: offset_min must be an int, not %.100s",
                     Py_TYPE(offset_min_object)->tp_name);
        return NULL;
    }
    int offset_min_past = clamped_int64(offset_min_object, &offset_min); /* 1: above every int64 */
    if (offset_min_past == FAILED)
        return NULL;
    Py_buffer timestamps_view, offsets_view;
    if (int64_column(timestamps_object, "timestamps", &timestamps_view) != OK)
        return NULL;
    if (int64_column(offsets_object, "offsets", &offsets_view) != OK) {
        PyBuffer_Release(&timestamps_view);
        return NULL;
    }
    PyObject *result = NULL, *answers = NULL, *rest = NULL, **items = NULL;
    Py_ssize_t target_count = 0;
    if (timestamps_view.len != offsets_view.len) {
        PyErr_Format(PyExc_ValueError, "step_answers: %zd timestamps but %zd offsets",
                     timestamps_view.len / 8, offsets_view.len / 8);
        goto done;
    }
    /* Held before any allocation: a collection it starts may change the caller's list (take_items). */
    items = take_items(targets_object, "step_answers: targets must be a sequence of ints", &target_count);
    if (items == NULL)
        goto done;
    const int64_t *steps = (const int64_t *)timestamps_view.buf;
    const int64_t *offsets = (const int64_t *)offsets_view.buf;
    const Py_ssize_t count = timestamps_view.len / 8;
    answers = PyList_New(target_count);
    rest = PyList_New(0);
    if (answers == NULL || rest == NULL)
        goto done;
    /* The targets are bisected a block at a time, in lockstep: each probe of the block is
       prefetched before any is compared, so a table larger than the caches waits for its
       cache misses together, not one after the other. */
    Py_ssize_t previous_index = 0;
    int64_t previous_target = INT64_MIN;
    for (Py_ssize_t first = 0; first < target_count; first += STEPS_BLOCK) {
        const int size = target_count - first < STEPS_BLOCK ? (int)(target_count - first) : STEPS_BLOCK;
        int64_t block[STEPS_BLOCK];
        Py_ssize_t low[STEPS_BLOCK], high[STEPS_BLOCK], middle[STEPS_BLOCK];
        int past[STEPS_BLOCK];
        for (int i = 0; i < size; i++) {
            past[i] = clamped_int64(items[first + i], &block[i]);
            if (past[i] == FAILED)
                goto done;
            /* The first index whose timestamp >= target lies at or after the previous block's
               last target's when this one is not below it (a call's targets usually ascend),
               else at or before it.  A target past int64 is searched as INT64_MAX (its own
               answer: none), so its index bounds the next ones as INT64_MAX's. */
            if (block[i] >= previous_target) {
                low[i] = previous_index;
                high[i] = count;
            } else {
                low[i] = 0;
                high[i] = previous_index;
            }
        }
        for (;;) {
            int searching = 0;
            for (int i = 0; i < size; i++)
                if (low[i] < high[i]) {
                    middle[i] = low[i] + (high[i] - low[i]) / 2;
                    __builtin_prefetch(&steps[middle[i]]);
                    searching = 1;
                }
            if (!searching)
                break;
            for (int i = 0; i < size; i++)
                if (low[i] < high[i]) {
                    if (steps[middle[i]] < block[i])
                        low[i] = middle[i] + 1;
                    else
                        high[i] = middle[i];
                }
        }
        for (int i = 0; i < size; i++)
            if (low[i] < count)
                __builtin_prefetch(&offsets[low[i]]);
        previous_index = low[size - 1];
        previous_target = block[size - 1];
        for (int i = 0; i < size; i++) {
            const Py_ssize_t number = first + i, index = past[i] > 0 ? count : low[i];
            const int answered = index < count && offset_min_past <= 0 && offsets[index] >= offset_min;
            if (!answered && (index < count || !whole)) {
                PyObject *position = PyLong_FromSsize_t(number);
                if (position == NULL || PyList_Append(rest, position) != 0) {
                    Py_XDECREF(position);
                    goto done;
                }
                Py_DECREF(position);
            }
            if (!answered) {
                PyList_SET_ITEM(answers, number, Py_NewRef(Py_None));
                continue;
            }
            PyObject *timestamp = PyLong_FromLongLong(steps[index]);
            PyObject *offset = PyLong_FromLongLong(offsets[index]);
            PyObject *answer = timestamp == NULL || offset == NULL ? NULL : answer_type->tp_alloc(answer_type, 2);
            if (answer == NULL) {
                Py_XDECREF(timestamp);
                Py_XDECREF(offset);
                goto done;
            }
#if PY_VERSION_HEX >= 0x030E0000
            /* tp_alloc zero-fills; from CPython 3.14 (gh-131525) a tuple caches its hash in
               ob_hash, -1 meaning not yet computed: left 0, every answer would hash to 0. */
            ((PyTupleObject *)answer)->ob_hash = -1;
#endif
            PyTuple_SET_ITEM(answer, 0, timestamp);
            PyTuple_SET_ITEM(answer, 1, offset);
            PyList_SET_ITEM(answers, number, answer);
        }
    }
    result = PyTuple_Pack(2, answers, rest);
done:
    Py_XDECREF(answers);
    Py_XDECREF(rest);
    release_items(items, target_count);
    PyBuffer_Release(&timestamps_view);
    PyBuffer_Release(&offsets_view);
    return result;
}

static PyMethodDef methods[] = {
    {"first_reaching", first_reaching, METH_VARARGS, first_reaching_doc},
    {"first_reaching_each", first_reaching_each, METH_VARARGS, first_reaching_each_doc},
    {"record_times", record_times, METH_VARARGS, record_times_doc},
    {"record_steps", record_steps, METH_VARARGS, record_steps_doc},
    {"step_answers", step_answers, METH_VARARGS, step_answers_doc},
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
