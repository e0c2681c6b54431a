"""Python's cyclic garbage collector, run on the GUI thread only.

A Qt object that ends up in a reference cycle is freed whenever the collector runs, and the
collector runs in whichever thread happens to allocate at the time: often a worker thread
building a model. Its C++ destructor then runs outside the GUI thread, calls back into Python
for overridden methods and waits for the GIL there, while the GUI thread waits for the worker:
the app hangs or crashes (seen as a hang in the test suite, with the worker thread inside
``gc_collect_main`` -> ``QObject::~QObject``). The remedy is the usual one for Qt bindings:
automatic collection is switched off and a timer on the GUI thread collects, generation by
generation, with the interpreter's own thresholds.

A full collection walks every tracked object: about 110,000 once torch, Qt and the window are
loaded, 40-60 ms on a 2-core laptop, which the hand on the mouse feels as a hitch when it lands
during a hover (issue 40). :func:`freeze_startup` moves what start-up made (modules, classes,
the window's widgets: alive for the whole session) into the permanent generation, so a full
collection walks only what was made since. It is called once the window is built and before any
file is opened, so that a dataset or model the user later closes is still collected.
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QObject, QTimer

#: Milliseconds between checks of the allocation counts.
INTERVAL_MS = 500


class GuiThreadCollector(QObject):
    """Collects garbage from a GUI-thread timer (see the module docstring)."""

    def __init__(self, parent: QObject | None = None, interval_ms: int = INTERVAL_MS) -> None:
        super().__init__(parent)
        self.thresholds = gc.get_threshold()
        gc.disable()
        self.timer = QTimer(self, interval=interval_ms)
        self.timer.timeout.connect(self.check)
        self.timer.start()

    def check(self) -> int:
        """Collect the oldest generation whose allocation count is over its threshold;
        returns the generation collected (-1: none)."""
        counts = gc.get_count()
        for generation in (2, 1, 0):
            if counts[generation] > self.thresholds[generation]:
                gc.collect(generation)
                return generation
        return -1


def freeze_startup() -> int:
    """Free the garbage there is, then exempt every object alive now from later collections
    (``gc.freeze``; see the module docstring). Returns the number of objects frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def install(app: QObject) -> GuiThreadCollector:
    """The application's collector (created once, owned by ``app``); automatic collection off."""
    existing = app.findChild(GuiThreadCollector)
    if existing is None:
        return GuiThreadCollector(app)
    gc.disable()
    return existing
