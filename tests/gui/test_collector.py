"""Cyclic garbage is collected on the GUI thread only (``gui.window.collector``)."""

from __future__ import annotations

import gc
import threading
import weakref

from PySide6.QtCore import QObject


def test_garbage_made_anywhere_is_freed_by_the_gui_threads_timer(qtbot, qapp):
    from dmlviewer.gui.window import collector

    c = collector.install(qapp)
    assert collector.install(qapp) is c and not gc.isenabled()
    freed_in: list[str] = []

    class Cyclic(QObject):
        def __del__(self):
            freed_in.append(threading.current_thread().name)

    def make_garbage():
        obj = Cyclic()
        obj.me = obj  # a cycle: only the collector frees it
        ref = weakref.ref(obj)
        del obj
        for _ in range(2 * c.thresholds[0]):  # more cyclic garbage than the first threshold
            cycle = []
            cycle.append(cycle)
        return ref

    refs = []
    worker = threading.Thread(target=lambda: refs.append(make_garbage()), name="worker")
    worker.start()
    worker.join()
    assert refs[0]() is not None  # the worker's allocations collected nothing
    qtbot.waitUntil(lambda: refs[0]() is None, timeout=5000)
    assert freed_in == [threading.main_thread().name]


def test_after_the_start_up_freeze_a_full_collection_walks_only_new_objects_and_still_frees_them(qtbot, qapp):
    """Issue 40: start-up's objects (imports, the window) are exempt from collection, so a full
    collection during a hover walks what was made since; garbage made after it is still freed."""
    from dmlviewer.gui.window import collector
    from dmlviewer.gui.window.main_window import MainWindow

    c = collector.install(qapp)
    window = MainWindow()
    qtbot.addWidget(window)
    try:
        walked_before = len(gc.get_objects())
        frozen = collector.freeze_startup()
        walked_after = len(gc.get_objects())
        assert frozen >= walked_before // 2 and walked_after < walked_before // 20, (walked_before, walked_after)
        freed = []

        class Cyclic:
            def __del__(self):
                freed.append(True)

        obj = Cyclic()
        obj.me = obj
        ref = weakref.ref(obj)
        del obj
        for _ in range(2 * c.thresholds[0]):
            cycle = []
            cycle.append(cycle)
        qtbot.waitUntil(lambda: ref() is None, timeout=5000)
        assert freed == [True]
    finally:
        gc.unfreeze()  # the rest of the test session collects as before
