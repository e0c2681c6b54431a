"""The device the models run on, as the main window shows and chooses it: the toolbar's combo,
the status bar's label, the device remembered in the settings, and a choice checked before the
session takes it.

The devices torch sees (CPU, each CUDA device, MPS) are discovered on a thread once the window
is on screen (importing torch takes seconds). Until then the models run on the CPU; the device
saved in the settings is taken once the machine is known to have it, else the CPU stays and the
status bar says why (settings from another machine). Moving the models when the session's
device changes is the window's work (``MainWindow._on_device_changed``, which then calls
:meth:`DeviceChoice.show`).
"""

from __future__ import annotations

import logging
import threading

from PySide6.QtCore import QObject, QSettings, Signal
from PySide6.QtWidgets import QComboBox, QWidget

from dmlviewer.gui.common import errors
from dmlviewer.gui.jobs.job_status import FittedLabel

log = logging.getLogger(__name__)


class DeviceChoice(QObject):
    """``combo`` (for the toolbar) and ``label`` (for the status bar) of ``session``'s device;
    ``known`` once the machine's devices are listed (:meth:`discover`); ``settings`` remember
    the device (``options/device``)."""

    _found = Signal(object)  # the discovery thread's list, handed to the GUI thread
    notice = Signal(str)  # a line for the status bar

    def __init__(self, session, settings: QSettings, parent: QWidget) -> None:
        super().__init__(parent)
        self.session = session
        self.settings = settings
        self._parent = parent
        self._saved = str(settings.value("options/device", "cpu") or "cpu")
        self.combo = QComboBox()
        self.combo.setToolTip("Device the model runs on")
        self.combo.addItem("cpu", "cpu")
        self.label = FittedLabel("", max_width=120)
        self.known = False
        self.combo.currentIndexChanged.connect(lambda _i: self.choose(self.combo.currentData()))
        self._found.connect(self._on_devices)

    def discover(self) -> None:
        """List the machine's devices on a thread; then the combo lists them and the saved
        device is taken if the machine has it."""
        threading.Thread(target=self._discover, name="dmlviewer-devices", daemon=True).start()

    def _discover(self) -> None:
        try:
            from dmlviewer.core.models import available_devices

            devices = available_devices()
        except Exception:  # noqa: BLE001 - never block the window on device discovery
            log.exception("device discovery failed")
            devices = ["cpu"]
        try:
            self._found.emit(devices)
        except RuntimeError:  # the window is gone
            pass

    def _on_devices(self, devices: list[str]) -> None:
        # the saved device, unless the session was given another meanwhile (a notebook's)
        wanted = self._saved if not self.known and self.session.device == "cpu" else self.session.device
        self.combo.blockSignals(True)
        self.combo.clear()
        for dev in devices:
            self.combo.addItem(dev, dev)
        self.combo.blockSignals(False)
        self.known = True
        if wanted not in devices:
            log.info("device %s is not on this machine: the models run on the CPU", wanted)
            self.notice.emit(f"Device {wanted} is not on this machine: the models run on the CPU")
            wanted = "cpu"
        self.choose(wanted)
        self.show()

    def choose(self, device: str) -> None:
        """Ask the session for ``device`` (the models follow on its event); a device name that
        cannot be used is said in a dialog and the session's device is shown again."""
        if device == self.session.device or not device:
            return
        try:
            from dmlviewer.core.models import resolve_device

            resolved = str(resolve_device(device))
        except Exception as exc:  # noqa: BLE001
            errors.report_exception(self._parent, "Cannot use device", exc)
            self.show()
            return
        self.session.set_device(resolved)

    def show(self) -> None:
        """The combo and the label show the session's device (added to the combo if missing);
        once the machine's devices are known it is the device remembered for the next start."""
        device = self.session.device
        self.label.setText(f"device: {device}")
        if self.combo.findData(device) < 0:
            self.combo.addItem(device, device)
        self.combo.blockSignals(True)
        self.combo.setCurrentIndex(self.combo.findData(device))
        self.combo.blockSignals(False)
        if self.known:
            self.settings.setValue("options/device", device)
