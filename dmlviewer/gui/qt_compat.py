"""Work-arounds for defects of the Qt binding, applied once when ``dmlviewer.gui`` is imported.

PySide6 6.12.0 on Python < 3.12: ``SignalInstance.emit()`` returns ``True`` without taking a
reference, so every signal emitted from Python lowers ``True``'s reference count by one and,
after a few hundred emissions, Python aborts with "Fatal Python error: bool_dealloc" (a live
GUI emits that many in seconds of mouse movement). Python 3.12 made ``True`` immortal, which
hides the defect there. :func:`guard_bool_refcount` detects the leak by emitting a probe signal
and, only when it is present, raises ``True``'s and ``False``'s reference counts by 2**40, which
makes them as good as immortal (they are static singletons that are never freed anyway).
"""

from __future__ import annotations

import ctypes
import logging
import sys

log = logging.getLogger(__name__)

#: Added to the reference counts of True and False when the leak is detected.
_BALLAST = 1 << 40
_applied = False


def signal_emit_leaks_true() -> bool:
    """True when emitting a signal from Python drops a reference to ``True``."""
    from PySide6.QtCore import QObject, Signal

    class _Probe(QObject):
        ping = Signal()

    probe = _Probe()
    before = sys.getrefcount(True)
    for _ in range(8):
        probe.ping.emit()
    return sys.getrefcount(True) < before


def guard_bool_refcount() -> bool:
    """Apply the reference-count ballast if the leak is present; True if it was applied."""
    global _applied
    if _applied or sys.version_info >= (3, 12) or sys.implementation.name != "cpython":
        return _applied
    if signal_emit_leaks_true():
        for obj in (True, False):
            ctypes.c_ssize_t.from_address(id(obj)).value += _BALLAST
        _applied = True
        log.debug("PySide6 signal emission leaks references to True: ballast applied")
    return _applied
