/*
 * Array kinds: for each Python type of array seen, how to export it through DLPack and how to
 * allocate outputs of the same kind. flashport._arrays.kind_for answers for a type once; the
 * answer is kept here, so that a call costs a pointer comparison per array.
 */
#include "dlpack_abi.h"
#include "fpy.h"

/* One entry per type ever seen, never freed: entries stay where they are, so a call can keep a
 * pointer to its kind whatever other types it meets. */
static fpy_kind **kinds;
static int n_kinds;
static PyObject *kind_for_fn;
static PyObject *str_dlpack, *str_dlpack_device, *kw_version, *kw_version_stream, *kw_stream,
    *max_version;

int fpy_kinds_init(PyObject *kind_for) {
    if (!PyCallable_Check(kind_for)) {
        PyErr_SetString(PyExc_TypeError, "flashport._C: kind_for must be callable");
        return -1;
    }
    Py_XSETREF(kind_for_fn, Py_NewRef(kind_for));
    if (!str_dlpack) {
        str_dlpack = PyUnicode_InternFromString("__dlpack__");
        str_dlpack_device = PyUnicode_InternFromString("__dlpack_device__");
        kw_version = Py_BuildValue("(s)", "max_version");
        kw_version_stream = Py_BuildValue("(ss)", "max_version", "stream");
        kw_stream = Py_BuildValue("(s)", "stream");
        max_version = Py_BuildValue("(ii)", 1, 0);
        if (!str_dlpack || !str_dlpack_device || !kw_version || !kw_version_stream || !kw_stream ||
            !max_version)
            return -1;
    }
    return 0;
}

static PyObject *none_to_null(PyObject *o) { return o == Py_None ? NULL : Py_NewRef(o); }

fpy_kind *fpy_kind_of(PyObject *obj) {
    PyTypeObject *type = Py_TYPE(obj);
    for (int i = 0; i < n_kinds; i++)
        if (kinds[i]->type == type) return kinds[i];
    if (!kind_for_fn) {
        PyErr_SetString(PyExc_RuntimeError, "flashport._C used before flashport was imported");
        return NULL;
    }
    PyObject *r = PyObject_CallOneArg(kind_for_fn, (PyObject *)type);
    if (!r) return NULL;
    PyObject *export_fn, *empty_like, *empty_f32, *current_stream;
    int pass_stream;
    fpy_kind *k = NULL, **grown = NULL;
    if (PyArg_ParseTuple(r, "OpOOO", &export_fn, &pass_stream, &empty_like, &empty_f32,
                         &current_stream) &&
        (k = PyMem_Calloc(1, sizeof *k)) &&
        (grown = PyMem_Realloc(kinds, sizeof *kinds * (size_t)(n_kinds + 1)))) {
        *k = (fpy_kind){.type = (PyTypeObject *)Py_NewRef((PyObject *)type),
                        .export_fn = none_to_null(export_fn),
                        .pass_stream = pass_stream,
                        .versioned = -1,
                        .empty_like = none_to_null(empty_like),
                        .empty_f32 = none_to_null(empty_f32),
                        .current_stream = none_to_null(current_stream)};
        kinds = grown;
        kinds[n_kinds++] = k;
    } else if (!PyErr_Occurred()) {
        PyErr_NoMemory();
    }
    if (k && !grown) {
        PyMem_Free(k);
        k = NULL;
    }
    Py_DECREF(r);
    return k;
}

int fpy_dlpack_device(PyObject *obj, const char *name, int *type, int *index) {
    PyObject *r = PyObject_CallMethodNoArgs(obj, str_dlpack_device);
    if (!r) {
        if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_Clear();
            fpy_raise(FPY_ERR_ARGUMENT,
                      "%s must be an array with __dlpack__ (NumPy, torch, CuPy); "
                      "got %s",
                      name, Py_TYPE(obj)->tp_name);
        }
        return -1;
    }
    int ok = PyArg_ParseTuple(r, "ii", type, index);
    Py_DECREF(r);
    return ok ? 0 : -1;
}

/* __dlpack__(max_version=(1, 0)[, stream=...]); producers that predate DLPack 1.0 refuse the
 * keyword, and are asked without it from then on. */
static PyObject *call_dlpack(fpy_kind *kind, PyObject *obj, int64_t stream) {
    PyObject *s = NULL;
    /* The DLPack protocol reserves stream 0; the legacy default stream is 1. */
    if (kind->pass_stream && stream >= 0 && !(s = PyLong_FromLongLong(stream == 0 ? 1 : stream)))
        return NULL;
    PyObject *r;
    for (;;) {
        const int versioned = kind->versioned != 0;
        PyObject *args[3] = {obj, NULL, NULL};
        int n = 1;
        if (versioned) args[n++] = max_version;
        if (s) args[n++] = s;
        PyObject *names = versioned ? (s ? kw_version_stream : kw_version) : (s ? kw_stream : NULL);
        r = PyObject_VectorcallMethod(str_dlpack, args, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, names);
        if (r && versioned) kind->versioned = 1;
        if (r || !versioned || kind->versioned == 1 || !PyErr_ExceptionMatches(PyExc_TypeError))
            break;
        PyErr_Clear();
        kind->versioned = 0;
    }
    Py_XDECREF(s);
    return r;
}

PyObject *fpy_export(fpy_kind *kind, PyObject *obj, const char *name, int64_t stream) {
    if (kind->export_fn) return PyObject_CallOneArg(kind->export_fn, obj);
    PyObject *r = call_dlpack(kind, obj, stream);
    if (!r && PyErr_ExceptionMatches(PyExc_AttributeError)) {
        PyErr_Clear();
        fpy_raise(FPY_ERR_ARGUMENT,
                  "%s must be an array with __dlpack__ (NumPy, torch, CuPy); got %s", name,
                  Py_TYPE(obj)->tp_name);
    }
    return r;
}
