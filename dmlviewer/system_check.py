"""Are the system libraries that Qt needs on this machine? Checked before the long install.

The PySide6 wheel bundles Qt but not the system libraries Qt's plugins link against. On a
fresh Debian or Ubuntu machine some are missing, and Qt then aborts at the first window with a
message that names the wrong package. This module runs with the standard library only, so the
README's first command can run it from the clone before anything is installed::

    python3 -m dmlviewer.system_check              # for the app's window (Qt's xcb plugin)
    python3 -m dmlviewer.system_check --offscreen  # for the tests (Qt's offscreen plugin)

It loads each library with the dynamic loader (``ctypes.CDLL``: the same search the loader does
for Qt) and checks that this Python can make a virtual environment with pip (Debian and Ubuntu
ship ``ensurepip`` separately, in ``python3.X-venv``); when something is missing it prints what,
the Debian/Ubuntu packages that hold it in one ``apt-get install`` line, and exits with status 1.
With ``--install`` (the README's commands) it first installs those packages itself where it
can: on Debian and Ubuntu (``apt-get``), as root or through ``sudo`` (which asks for the
password); only when that fails or is not possible does it stop with the line to run.
``--packages`` prints the line for every library, missing or not. The app runs the same check
(without installing) before opening its window.

The library lists are the sonames that the pinned PySide6's plugins need from outside the wheel:
the ``DT_NEEDED`` closure of ``libqxcb.so`` (and of ``libqoffscreen.so`` with the QtGui and
QtWidgets modules), leaving out what the wheel bundles and what every system has (libc, libm,
libstdc++, zlib...). ``tests/test_system_check.py`` recomputes the closure from the installed
PySide6 with ``readelf`` and fails when these lists no longer match it.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import subprocess
import sys
from typing import Callable, Iterable

#: soname -> Debian/Ubuntu package, for what Qt's offscreen plugin, QtGui and QtWidgets need
#: (the tests run there; the app's window needs these too).
BASE_LIBRARIES = {
    "libEGL.so.1": "libegl1",
    "libGL.so.1": "libgl1",
    "libX11.so.6": "libx11-6",
    "libdbus-1.so.3": "libdbus-1-3",
    "libfontconfig.so.1": "libfontconfig1",
    "libfreetype.so.6": "libfreetype6",
    "libglib-2.0.so.0": "libglib2.0-0",
    "libgthread-2.0.so.0": "libglib2.0-0",
    "libxkbcommon.so.0": "libxkbcommon0",
}
#: soname -> package, what Qt's xcb plugin (the window on X11 and XWayland) needs in addition.
XCB_LIBRARIES = {
    "libX11-xcb.so.1": "libx11-xcb1",
    "libxcb.so.1": "libxcb1",
    "libxcb-cursor.so.0": "libxcb-cursor0",
    "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-image.so.0": "libxcb-image0",
    "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-render.so.0": "libxcb-render0",
    "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-shm.so.0": "libxcb-shm0",
    "libxcb-sync.so.1": "libxcb-sync1",
    "libxcb-util.so.1": "libxcb-util1",
    "libxcb-xfixes.so.0": "libxcb-xfixes0",
    "libxcb-xkb.so.1": "libxcb-xkb1",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
}
#: Libraries every Linux system has (not checked, not listed).
ALWAYS_PRESENT = {"ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1", "libc.so.6", "libdl.so.2", "libm.so.6",
                  "libpthread.so.0", "librt.so.1", "libgcc_s.so.1", "libstdc++.so.6", "libz.so.1",
                  "libzstd.so.1"}

#: Browsers the test suite renders the HTML report in (issue 33), by executable name; the
#: offscreen set-up (``--offscreen --install``, the README's test command) installs the first
#: one's Debian/Ubuntu package when none is found. Not needed to run the app.
TEST_BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
BROWSER_PACKAGE = "chromium"

#: The one line that installs everything the app's window needs (for the README).
APT_PREFIX = "sudo apt-get install -y"


def libraries(window: bool = True) -> dict[str, str]:
    """soname -> package of what is needed: for the window (``window``) or only offscreen."""
    return {**BASE_LIBRARIES, **(XCB_LIBRARIES if window else {})}


def _loads(soname: str) -> bool:
    """Whether the dynamic loader finds and loads ``soname`` (with its own dependencies)."""
    try:
        ctypes.CDLL(soname)
    except OSError:
        return False
    return True


def missing_libraries(window: bool = True, loads: Callable[[str], bool] | None = None) -> list[str]:
    """The needed sonames that ``loads`` (default: the dynamic loader) cannot load; empty off
    Linux, where there is nothing to check."""
    if not sys.platform.startswith("linux"):
        return []
    loads = loads or _loads
    return [name for name in libraries(window) if not loads(name)]


def packages(sonames: Iterable[str]) -> list[str]:
    """The Debian/Ubuntu packages holding ``sonames`` (each once, in a stable order)."""
    table = {**BASE_LIBRARIES, **XCB_LIBRARIES}
    return sorted({table[name] for name in sonames})


def install_line(sonames: Iterable[str], extra: Iterable[str] = ()) -> str:
    return f"{APT_PREFIX} {' '.join(sorted(set(packages(sonames)) | set(extra)))}"


def venv_package() -> str | None:
    """The package to install when this Python cannot make a virtual environment with pip
    (its ``ensurepip`` is missing, as on Debian and Ubuntu without ``python3.X-venv``), else None."""
    import importlib

    try:
        usable = hasattr(importlib.import_module("ensurepip"), "bootstrap")
    except ImportError:
        usable = False
    return None if usable else f"python{sys.version_info.major}.{sys.version_info.minor}-venv"


def browser_path(which: Callable[[str], str | None] = shutil.which) -> str | None:
    """The executable of a Chromium-family browser on this machine (:data:`TEST_BROWSERS`), or None."""
    for name in TEST_BROWSERS:
        found = which(name)
        if found:
            return found
    return None


def window_platform() -> bool:
    """Whether Qt will open its window with the xcb plugin (the default on Linux unless
    ``QT_QPA_PLATFORM`` names another one, e.g. offscreen or wayland)."""
    platform = os.environ.get("QT_QPA_PLATFORM", "").split(":")[0].strip().lower()
    return sys.platform.startswith("linux") and platform in ("", "xcb")


def report(missing: list[str], window: bool = True, venv: str | None = None) -> str:
    """What to tell the user about ``missing`` libraries and a missing ``venv`` package."""
    what = "the app's window (Qt's xcb plugin)" if window else "Qt (offscreen)"
    lines = []
    if missing:
        lines.append(f"dmlviewer: {what} needs system libraries that are missing: {', '.join(missing)}.")
    if venv:
        lines.append(f"dmlviewer: this Python cannot create a virtual environment with pip (no ensurepip; "
                     f"it comes with {venv}).")
    lines.append("Install them (Debian/Ubuntu), then run the command again:")
    lines.append(f"    {install_line(missing, [venv] if venv else [])}")
    return "\n".join(lines) + "\n"


def check_before_window(stream=None) -> bool:
    """For the app: True when the window can open; else the report is written to ``stream``
    (stderr) and False is returned, before Qt aborts with a misleading message."""
    if not window_platform():
        return True
    missing = missing_libraries(window=True)
    if missing:
        (stream or sys.stderr).write(report(missing))
        return False
    return True


def install_command(euid: int | None = None, which: Callable[[str], str | None] = shutil.which) -> list[str] | None:
    """The prefix that runs ``apt-get`` with the rights to install (``[apt-get]`` as root,
    ``[sudo, apt-get]`` otherwise), or None where packages cannot be installed that way."""
    if not sys.platform.startswith("linux") or which("apt-get") is None:
        return None
    euid = os.geteuid() if euid is None else euid
    if euid == 0:
        return ["apt-get"]
    return ["sudo", "apt-get"] if which("sudo") is not None else None


def install(names: list[str], run: Callable[..., subprocess.CompletedProcess] | None = None,
            prefix: list[str] | None = None) -> bool:
    """Install the Debian/Ubuntu packages ``names`` (``apt-get update``, then ``apt-get install
    -y --no-install-recommends``, non-interactive); True when apt-get succeeded."""
    prefix = prefix if prefix is not None else install_command()
    run = run or subprocess.run
    if not names or prefix is None:
        return False
    sys.stderr.write(f"dmlviewer: installing the missing system packages: {' '.join(names)}\n")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if prefix[0] == "sudo":  # sudo resets the environment: set the one variable as root
        prefix = ["sudo", "env", "DEBIAN_FRONTEND=noninteractive", *prefix[1:]]
    for args in (["update", "-qq"], ["install", "-y", "-qq", "--no-install-recommends", *names]):
        if run([*prefix, *args], env=env).returncode != 0:
            sys.stderr.write(f"dmlviewer: '{' '.join([*prefix, *args])}' failed\n")
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m dmlviewer.system_check",
        description="Check that the system libraries Qt needs are installed (before installing dmlviewer).")
    parser.add_argument("--offscreen", action="store_true",
                        help="only what Qt needs without a window (the test suite)")
    parser.add_argument("--install", action="store_true",
                        help="install what is missing with apt-get (as root, or through sudo) before "
                             "reporting anything")
    parser.add_argument("--packages", action="store_true",
                        help="print the apt-get line for every needed library, missing or not")
    args = parser.parse_args(argv)
    window = not args.offscreen
    if args.packages:
        sys.stdout.write(install_line(libraries(window)) + "\n")
        return 0
    missing = missing_libraries(window)
    venv = venv_package() if sys.platform.startswith("linux") else None
    # the tests' browser (offscreen set-up only; not needed by the app, so never a failure)
    browser = [BROWSER_PACKAGE] if not window and sys.platform.startswith("linux") and browser_path() is None else []
    if (missing or venv or browser) and args.install:
        if install(packages(missing) + ([venv] if venv else []) + browser):
            missing = missing_libraries(window)
            venv = venv_package() if sys.platform.startswith("linux") else None
    if not window and sys.platform.startswith("linux") and browser_path() is None:
        sys.stderr.write(f"dmlviewer: no Chromium here: the tests that render the HTML report in a browser are "
                         f"skipped (outside CI). Install it with: {APT_PREFIX} {BROWSER_PACKAGE}\n")
    if missing or venv:
        sys.stderr.write(report(missing, window, venv))
        return 1
    sys.stdout.write(f"dmlviewer: the system libraries Qt needs{'' if window else ' (offscreen)'} are present.\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
