"""flashport.backends() and flashport.info(): what flashport-info shows, as Python values."""
from collections import namedtuple

from . import _C
from ._errors import BackendUnavailableError, Error

Backend = namedtuple("Backend", "name available device_count is_module reason location")
Backend.__doc__ = """One backend of this build, in auto-selection order: whether it can run here
(and why not), its device count, and where it was loaded from ("built-in" or the module file)."""


def backends():
    """Every backend this build knows, in auto-selection order, as Backend tuples."""
    return [Backend(*b) for b in _C.backends()]


def _device(backend, index):
    try:
        name, vendor, kind, memory, units, details = _C.device(backend, index)
    except Error as e:
        return {"index": index, "error": str(e)}
    return {"index": index, "name": name, "vendor": vendor, "kind": kind,
            "memory_bytes": memory, "compute_units": units, "details": details}


def _kernels(backend):
    try:
        return [{"name": n, "precision": p, "description": d} for n, p, d in _C.kernels(backend)]
    except BackendUnavailableError:  # not built, or its module not loaded: no variants to list
        return []


def info(backend=None):
    """The structure of `flashport-info --json`: the version and, for every backend (or the one
    named), its availability, devices and kernel variants."""
    chosen = [b for b in backends() if backend is None or b.name == backend]
    if backend is not None and not chosen:
        _C.kernels(backend)  # raises UnknownBackendError with the library's message
    return {
        "version": _C.version(),
        "backends": [{
            "name": b.name, "available": b.available, "reason": b.reason,
            "module": b.is_module, "location": b.location,
            "devices": [_device(b.name, d) for d in range(b.device_count)],
            "kernels": _kernels(b.name),
        } for b in chosen],
    }


def format_info(data):
    """info()'s structure as text, in the layout of flashport-info."""
    lines = ["flashport %s" % data["version"], "backends, in auto-selection order:"]
    for b in data["backends"]:
        count = len(b["devices"])
        state = ("available, %d device%s" % (count, "" if count == 1 else "s")
                 if b["available"] else "unavailable")
        lines.append("%-10s %s  [%s]" % (b["name"], state, b["location"] or "not loaded"))
        if not b["available"]:
            lines.append("           reason: %s" % b["reason"])
        for d in b["devices"]:
            if "error" in d:
                lines.append("    device %d: %s" % (d["index"], d["error"]))
                continue
            lines.append("    device %d: %s (%s, %s), %.1f GiB, %d compute units" % (
                d["index"], d["name"], d["vendor"], d["kind"], d["memory_bytes"] / 2.0 ** 30,
                d["compute_units"]))
            if d["details"]:
                lines.append("      " + d["details"])
        for k in b["kernels"]:
            lines.append("    kernel %-26s %-6s %s" % (k["name"], k["precision"],
                                                      k["description"]))
    return "\n".join(lines)
