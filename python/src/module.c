/* flashport._C: the Python functions over the call builder (call.c) and the library's
 * introspection, for flashport/__init__.py to wrap. */
#include "fpy.h"

/* attention(q, k, v, <FPY_OPT_COUNT options>, out, return_lse) -> out, or (out, lse) */
enum { ARG_OPTS = 3, ARG_OUT = ARG_OPTS + FPY_OPT_COUNT, ARG_RETURN_LSE, N_ATTENTION_ARGS };

static int check_nargs(Py_ssize_t nargs, Py_ssize_t want, const char *fn) {
    if (nargs == want) return 0;
    PyErr_Format(PyExc_TypeError, "flashport._C.%s takes %zd arguments (%zd given)", fn, want,
                 nargs);
    return -1;
}

static PyObject *attention(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (check_nargs(nargs, N_ATTENTION_ARGS, "attention")) return NULL;
    const int want_lse = PyObject_IsTrue(args[ARG_RETURN_LSE]);
    if (want_lse < 0) return NULL;
    fpy_call c;
    PyObject *out = NULL, *lse = NULL, *result = NULL;
    if (fpy_call_prepare(&c, args[0], args[1], args[2], args + ARG_OPTS) == 0 &&
        (out = fpy_call_output(&c, FPY_O, args[ARG_OUT])) &&
        (!want_lse || (lse = fpy_call_output(&c, FPY_LSE, NULL))) &&
        fpy_call_repeat(&c, flashport_attention_run, flashport_attention_run_host, 1, NULL) == 0)
        result = want_lse ? PyTuple_Pack(2, out, lse) : Py_NewRef(out);
    fpy_call_release(&c);
    Py_XDECREF(out);
    Py_XDECREF(lse);
    return result;
}

/* backward(q, k, v, out, lse, grad_out, <FPY_OPT_COUNT options>, deterministic, dq, dk, dv)
 * -> (dq, dk, dv): the gradients of sum(grad_out * out), written into dq, dk, dv when given
 * (the strides of q, k, v), else into new arrays like q, k, v. */
enum {
    BWD_OPTS = 6,
    BWD_DETERMINISTIC = BWD_OPTS + FPY_OPT_COUNT,
    BWD_DQ,
    BWD_DK,
    BWD_DV,
    N_BACKWARD_ARGS
};

static PyObject *backward(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (check_nargs(nargs, N_BACKWARD_ARGS, "backward")) return NULL;
    const int deterministic = PyObject_IsTrue(args[BWD_DETERMINISTIC]);
    if (deterministic < 0) return NULL;
    fpy_call c;
    PyObject *dq = NULL, *dk = NULL, *dv = NULL, *result = NULL;
    if (fpy_call_prepare(&c, args[0], args[1], args[2], args + BWD_OPTS) == 0 &&
        fpy_call_input(&c, FPY_O, args[3]) == 0 && fpy_call_input(&c, FPY_LSE, args[4]) == 0 &&
        fpy_call_input(&c, FPY_DO, args[5]) == 0 &&
        (dq = fpy_call_output(&c, FPY_DQ, args[BWD_DQ])) &&
        (dk = fpy_call_output(&c, FPY_DK, args[BWD_DK])) &&
        (dv = fpy_call_output(&c, FPY_DV, args[BWD_DV]))) {
        c.desc.deterministic = deterministic;
        if (fpy_call_repeat(&c, flashport_attention_backward, flashport_attention_backward_host, 1,
                            NULL) == 0)
            result = PyTuple_Pack(3, dq, dk, dv);
    }
    fpy_call_release(&c);
    Py_XDECREF(dq);
    Py_XDECREF(dk);
    Py_XDECREF(dv);
    return result;
}

/* c_call_seconds(repeat, q, k, v, <options>, out): seconds spent in `repeat` library calls on
 * buffers built once, as a C program would make them (bench/python_overhead.py). */
static PyObject *c_call_seconds(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (check_nargs(nargs, 5 + FPY_OPT_COUNT, "c_call_seconds")) return NULL;
    const int repeat = PyLong_AsLong(args[0]);
    if (repeat < 1) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "repeat must be >= 1");
        return NULL;
    }
    fpy_call c;
    double seconds = 0.0;
    PyObject *out = NULL, *result = NULL;
    if (fpy_call_prepare(&c, args[1], args[2], args[3], args + 4) == 0 &&
        (out = fpy_call_output(&c, FPY_O, args[4 + FPY_OPT_COUNT])) &&
        fpy_call_repeat(&c, flashport_attention_run, flashport_attention_run_host, repeat,
                        &seconds) == 0)
        result = PyFloat_FromDouble(seconds);
    fpy_call_release(&c);
    Py_XDECREF(out);
    return result;
}

/* plan(q, k, v, <options>) -> (backend, device, kernel or None, reason, workspace_bytes) */
static PyObject *plan(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (check_nargs(nargs, ARG_OPTS + FPY_OPT_COUNT, "plan")) return NULL;
    fpy_call c;
    PyObject *result = NULL;
    fpy_lease lease;
    if (fpy_call_prepare(&c, args[0], args[1], args[2], args + ARG_OPTS) == 0 &&
        fpy_context_acquire(&c.place, &lease) == 0) {
        flashport_plan_info info;
        flashport_status st = flashport_attention_plan(lease.ctx, &c.desc, &info);
        if (st == FLASHPORT_OK || st == FLASHPORT_ERROR_UNSUPPORTED)
            result = Py_BuildValue("(sizsn)", flashport_context_backend(lease.ctx),
                                   flashport_context_device(lease.ctx),
                                   st == FLASHPORT_OK ? info.kernel : NULL, info.reason,
                                   (Py_ssize_t)info.workspace_bytes);
        else
            fpy_raise_status(st);
        fpy_context_release(&lease);
    }
    fpy_call_release(&c);
    return result;
}

static PyObject *version(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return PyUnicode_FromString(flashport_version_string());
}

/* backends() -> [(name, available, device_count, is_module, reason, location)] */
static PyObject *backends(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    const int n = flashport_backend_count();
    PyObject *list = PyList_New(n);
    for (int i = 0; list && i < n; i++) {
        flashport_backend_info b;
        flashport_status st = flashport_backend_get_info(i, &b);
        PyObject *item =
            st ? fpy_raise_status(st)
               : Py_BuildValue("(sOiOss)", b.name, b.available ? Py_True : Py_False, b.device_count,
                               b.is_module ? Py_True : Py_False, b.reason, b.location);
        if (!item)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, i, item);
    }
    return list;
}

static const char *kind_name(flashport_device_kind k) {
    return k == FLASHPORT_DEVICE_CPU ? "cpu" : k == FLASHPORT_DEVICE_GPU ? "gpu" : "accelerator";
}

/* device(backend, index) -> (name, vendor, kind, memory_bytes, compute_units, details) */
static PyObject *device(PyObject *self, PyObject *args) {
    (void)self;
    const char *backend;
    int index;
    if (!PyArg_ParseTuple(args, "si", &backend, &index)) return NULL;
    flashport_device_info d;
    flashport_status st = flashport_device_get_info(backend, index, &d);
    if (st) return fpy_raise_status(st);
    return Py_BuildValue("(sssKis)", d.name, d.vendor, kind_name(d.kind),
                         (unsigned long long)d.memory_bytes, d.compute_units, d.details);
}

static const char *precision_name(flashport_precision p) {
    switch (p) {
    case FLASHPORT_PRECISION_TF32: return "tf32";
    case FLASHPORT_PRECISION_F16: return "f16";
    case FLASHPORT_PRECISION_FP8: return "fp8";
    default: return "native";
    }
}

/* kernels(backend) -> [(name, precision, description)] */
static PyObject *kernels(PyObject *self, PyObject *arg) {
    (void)self;
    const char *backend = PyUnicode_AsUTF8(arg);
    if (!backend) return NULL;
    const int n = flashport_kernel_count(backend);
    if (n < 0) { /* the status of the same lookup: unknown, or known but not loaded */
        flashport_kernel_info unused;
        return fpy_raise_status(flashport_kernel_get_info(backend, 0, &unused));
    }
    PyObject *list = PyList_New(n);
    for (int i = 0; list && i < n; i++) {
        flashport_kernel_info k;
        flashport_status st = flashport_kernel_get_info(backend, i, &k);
        PyObject *item =
            st ? fpy_raise_status(st)
               : Py_BuildValue("(sss)", k.name, precision_name(k.precision), k.description);
        if (!item)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, i, item);
    }
    return list;
}

/* init(status_classes, specific_classes, kind_for): called once by flashport/__init__.py. */
static PyObject *init(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *status_classes, *specific, *kind_for;
    if (!PyArg_ParseTuple(args, "OOO", &status_classes, &specific, &kind_for)) return NULL;
    if (fpy_errors_init(status_classes, specific) || fpy_kinds_init(kind_for)) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"attention", (PyCFunction)(void (*)(void))attention, METH_FASTCALL,
     "attention(q, k, v, *options, out, return_lse): see flashport.attention"},
    {"backward", (PyCFunction)(void (*)(void))backward, METH_FASTCALL,
     "backward(q, k, v, out, lse, grad_out, *options, deterministic, dq, dk, dv): see "
     "flashport.torch"},
    {"plan", (PyCFunction)(void (*)(void))plan, METH_FASTCALL,
     "plan(q, k, v, *options): see flashport.plan"},
    {"c_call_seconds", (PyCFunction)(void (*)(void))c_call_seconds, METH_FASTCALL,
     "c_call_seconds(repeat, q, k, v, *options, out): seconds spent in repeat library calls"},
    {"version", version, METH_NOARGS, "the library's version string"},
    {"backends", backends, METH_NOARGS, "every backend in auto-selection order"},
    {"device", device, METH_VARARGS, "device(backend, index): one device's description"},
    {"kernels", kernels, METH_O, "kernels(backend): the backend's kernel variants"},
    {"init", init, METH_VARARGS, "init(status_classes, specific_classes, kind_for)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT,
                                    "_C",
                                    "flashport's extension module (use the flashport package)",
                                    -1,
                                    methods,
                                    NULL,
                                    NULL,
                                    NULL,
                                    NULL};

PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&module); }
