/* Statuses and the binding's own checks as the exception classes of flashport._errors. */
#include <stdarg.h>
#include <stdio.h>

#include "fpy.h"

enum { N_STATUS = 13 }; /* FLASHPORT_OK .. FLASHPORT_ERROR_BAD_TABLE */

static PyObject *status_class[N_STATUS];
static PyObject *specific_class[FPY_ERR_COUNT];

int fpy_errors_init(PyObject *status_classes, PyObject *specific) {
    if (!PyTuple_Check(status_classes) || PyTuple_GET_SIZE(status_classes) != N_STATUS ||
        !PyTuple_Check(specific) || PyTuple_GET_SIZE(specific) != FPY_ERR_COUNT) {
        PyErr_SetString(PyExc_TypeError, "flashport._C: error classes of the wrong shape");
        return -1;
    }
    for (int i = 0; i < N_STATUS; i++) {
        Py_XSETREF(status_class[i], Py_NewRef(PyTuple_GET_ITEM(status_classes, i)));
    }
    for (int i = 0; i < FPY_ERR_COUNT; i++)
        Py_XSETREF(specific_class[i], Py_NewRef(PyTuple_GET_ITEM(specific, i)));
    return 0;
}

PyObject *fpy_raise_status(flashport_status st) {
    PyObject *cls = ((int)st > 0 && (int)st < N_STATUS) ? status_class[st] : NULL;
    if (!cls || cls == Py_None) cls = status_class[FLASHPORT_ERROR_INTERNAL];
    const char *msg = flashport_last_error();
    if (!msg[0]) msg = flashport_status_string(st);
    PyErr_SetString(cls, msg);
    return NULL;
}

PyObject *fpy_raise(fpy_error kind, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    PyErr_SetString(specific_class[kind], msg);
    return NULL;
}
