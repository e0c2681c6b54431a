"""The system-library check that runs before the long install (README's first command) and
before the app opens its window.

Three levels: the check's logic against a simulated library lookup; its lists against what the
installed PySide6 really links to (``readelf`` on the plugins); and, where the test may use a
private mount namespace (root, ``unshare``), the real command on a machine state where some of
the libraries are absent (bind-mounting ``/dev/null`` over them, so the dynamic loader fails on
them as it does when they are not installed).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dmlviewer import system_check
from dmlviewer.system_check import BASE_LIBRARIES, XCB_LIBRARIES

ROOT = Path(__file__).resolve().parents[1]
HIDDEN = ("libxcb-icccm.so.4", "libxcb-keysyms.so.1")  # what a fresh Debian 12 lacked


def test_missing_libraries_are_named_with_the_packages_to_install(monkeypatch):
    monkeypatch.setattr(system_check.sys, "platform", "linux")
    present = lambda name: name not in HIDDEN  # noqa: E731 - a simulated loader
    assert system_check.missing_libraries(window=True, loads=present) == list(HIDDEN)
    assert system_check.missing_libraries(window=False, loads=present) == []  # offscreen needs no xcb
    assert system_check.missing_libraries(window=True, loads=lambda name: True) == []
    text = system_check.report(list(HIDDEN))
    assert "libxcb-icccm.so.4, libxcb-keysyms.so.1" in text
    assert text.splitlines()[-1].strip() == "sudo apt-get install -y libxcb-icccm4 libxcb-keysyms1"
    # nothing installed: one line with every package, each once
    everything = system_check.missing_libraries(window=True, loads=lambda name: False)
    line = system_check.install_line(everything)
    assert len(everything) == len(BASE_LIBRARIES) + len(XCB_LIBRARIES)
    assert line.split()[4:] == sorted(set(BASE_LIBRARIES.values()) | set(XCB_LIBRARIES.values()))


def test_the_app_reports_instead_of_letting_qt_abort(monkeypatch, capsys):
    monkeypatch.setattr(system_check.sys, "platform", "linux")
    monkeypatch.setattr(system_check, "_loads", lambda name: name not in HIDDEN)
    monkeypatch.delenv("QT_QPA_PLATFORM", raising=False)
    assert system_check.window_platform()
    assert system_check.check_before_window() is False
    assert "apt-get install -y libxcb-icccm4 libxcb-keysyms1" in capsys.readouterr().err
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")  # no window: nothing to check
    assert system_check.check_before_window() is True
    assert system_check.main(["--offscreen"]) == 0


def test_a_python_without_ensurepip_is_told_which_venv_package_to_install(monkeypatch, capsys):
    monkeypatch.setattr(system_check.sys, "platform", "linux")
    monkeypatch.setattr(system_check, "_loads", lambda name: name not in HIDDEN)
    monkeypatch.setitem(sys.modules, "ensurepip", None)  # import ensurepip now raises ImportError
    version = f"python{sys.version_info.major}.{sys.version_info.minor}-venv"
    assert system_check.venv_package() == version
    assert system_check.main([]) == 1
    err = capsys.readouterr().err
    assert "cannot create a virtual environment" in err
    assert err.splitlines()[-1].split()[4:] == sorted(["libxcb-icccm4", "libxcb-keysyms1", version])


def _needed(path: Path) -> list[str]:
    out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", out)


def _external_closure(starts: list[Path], bundle: dict[str, Path]) -> set[str]:
    """Sonames needed by ``starts`` and the bundled libraries they pull in, outside the bundle."""
    seen, external, todo = set(), set(), list(starts)
    while todo:
        for name in _needed(todo.pop()):
            if name in bundle:
                if name not in seen:
                    seen.add(name)
                    todo.append(bundle[name])
            else:
                external.add(name)
    return external


@pytest.mark.skipif(shutil.which("readelf") is None or not sys.platform.startswith("linux"),
                    reason="needs readelf on Linux")
def test_the_lists_match_what_the_installed_pyside6_links_to():
    import PySide6
    import shiboken6

    root = Path(PySide6.__file__).parent
    bundle = {p.name: p for folder in (root, root / "Qt" / "lib", Path(shiboken6.__file__).parent)
              for p in folder.glob("*.so*")}
    plugins = root / "Qt" / "plugins" / "platforms"
    modules = [*root.glob("QtGui*.so"), *root.glob("QtWidgets*.so"), *root.glob("QtCore*.so")]
    offscreen = _external_closure([plugins / "libqoffscreen.so", *modules], bundle) - system_check.ALWAYS_PRESENT
    window = _external_closure([plugins / "libqxcb.so"], bundle) - system_check.ALWAYS_PRESENT
    assert offscreen == set(BASE_LIBRARIES)
    assert window - offscreen == set(XCB_LIBRARIES)


def _library_file(soname: str) -> Path | None:
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.strip().startswith(soname + " "):
            return Path(line.rsplit("=>", 1)[1].strip()).resolve()
    return None


def _namespace_works() -> bool:
    if not sys.platform.startswith("linux") or os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True)
    return done.returncode == 0


def _readme_command(marker: str) -> str:
    readme = (ROOT / "README.md").read_text()
    return re.search(rf"<!-- {marker} -->\s*```bash\n(.+?)\n```", readme, re.S).group(1).strip()


@pytest.mark.skipif(not _namespace_works(), reason="needs root and unshare (a private mount namespace)")
def test_on_a_machine_without_the_libraries_the_readme_command_stops_before_installing(tmp_path):
    """Hide two libraries (and, separately, ensurepip) in a private mount namespace: the README's
    first command stops at its check, before the install, naming the packages; ``dmlviewer
    gui`` prints the same advice instead of Qt's abort."""
    import ensurepip

    files = [_library_file(name) for name in HIDDEN]
    if any(f is None for f in files):
        pytest.skip("the libraries are not installed here: nothing to hide")
    demo = _readme_command("demo-command")
    check, rest = demo.split(" && ", 1)
    assert check == "python3 -m dmlviewer.system_check --install" and rest.startswith("python3 -m venv .venv")
    python = sys.executable  # the check as the README runs it, with this interpreter
    # apt-get is a stand-in that records its arguments and installs nothing (the bind mounts
    # keep the libraries hidden), so the check must then stop with the line to run
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "apt-get").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path}/apt-calls\n")
    (fake / "apt-get").chmod(0o755)
    hide = " && ".join(f"mount --bind /dev/null {f}" for f in files)
    script = (f"{hide} && cd {ROOT} && ({python} -m dmlviewer.{check.split('dmlviewer.')[1]} && touch {tmp_path}/went-on); "
              f"echo rc=$?; {python} -m dmlviewer gui; echo gui_rc=$?")
    env = {k: v for k, v in os.environ.items() if k != "QT_QPA_PLATFORM"}
    env["DISPLAY"] = ":0"
    env["PATH"] = f"{fake}:{env['PATH']}"
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                          capture_output=True, text=True, env=env, timeout=120)
    out = done.stdout + done.stderr
    assert "rc=1" in out and not (tmp_path / "went-on").exists(), out  # stopped before the install
    calls = (tmp_path / "apt-calls").read_text().splitlines()
    assert calls == ["update -qq", "install -y -qq --no-install-recommends libxcb-icccm4 libxcb-keysyms1"], calls
    assert out.count("sudo apt-get install -y libxcb-icccm4 libxcb-keysyms1") == 2, out
    assert "gui_rc=1" in out and "xcb-cursor0" not in out  # not Qt's misleading message

    empty = tmp_path / "empty"
    empty.mkdir()
    script = f"mount --bind {empty} {Path(ensurepip.__file__).parent} && cd {ROOT} && {python} -m dmlviewer.system_check"
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                          capture_output=True, text=True, env=env, timeout=120)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}-venv"
    assert done.returncode == 1 and done.stderr.splitlines()[-1].split() == ["sudo", "apt-get", "install", "-y",
                                                                             version], done.stderr
    # outside the namespace everything is back
    assert subprocess.run([python, "-m", "dmlviewer.system_check"], cwd=ROOT, capture_output=True).returncode == 0


def test_install_runs_apt_get_and_the_check_goes_on_when_it_worked(monkeypatch, capsys):
    """--install: apt-get update and install of exactly the missing packages (as root directly,
    otherwise through sudo); when the libraries load afterwards the command succeeds."""
    present = {"libxcb-icccm.so.4": False}
    calls = []

    def run(args, env):
        calls.append(args)
        if "install" in args:
            present["libxcb-icccm.so.4"] = True
        return subprocess.CompletedProcess(args, 0)

    monkeypatch.setattr(system_check, "_loads", lambda name: present.get(name, True))
    monkeypatch.setattr(system_check, "venv_package", lambda: None)
    install_command = system_check.install_command
    monkeypatch.setattr(system_check, "install_command", lambda: ["apt-get"])
    monkeypatch.setattr(system_check.subprocess, "run", run)
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delenv("QT_QPA_PLATFORM", raising=False)
    assert system_check.main(["--install"]) == 0
    assert calls == [["apt-get", "update", "-qq"],
                     ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "libxcb-icccm4"]]
    assert "installing the missing system packages: libxcb-icccm4" in capsys.readouterr().err
    # without --install nothing is run; a failed apt-get leaves the report and status 1
    present["libxcb-icccm.so.4"] = False
    calls.clear()
    assert system_check.main([]) == 1 and calls == []
    monkeypatch.setattr(system_check.subprocess, "run", lambda args, env: calls.append(args) or
                        subprocess.CompletedProcess(args, 100))
    assert system_check.main(["--install"]) == 1 and len(calls) == 1
    assert "sudo apt-get install -y libxcb-icccm4" in capsys.readouterr().err
    # who runs apt-get
    which = {"apt-get": "/usr/bin/apt-get", "sudo": "/usr/bin/sudo"}.get
    assert install_command(euid=0, which=which) == ["apt-get"]
    assert install_command(euid=1000, which=which) == ["sudo", "apt-get"]
    assert install_command(euid=1000, which=lambda name: None) is None


def test_ci_still_finds_the_test_command():
    """.ci/run extracts the test command with its own awk program: it must find the README's."""
    awk = re.search(r"awk '(.+?)' README.md", (ROOT / ".ci" / "run").read_text()).group(1)
    cmd = subprocess.run(["awk", awk, str(ROOT / "README.md")], capture_output=True, text=True).stdout.strip()
    assert cmd == _readme_command("test-command")
    assert cmd.startswith("python3 -m dmlviewer.system_check --offscreen --install && python3 -m venv .venv")
    assert "pytest" in cmd and "\n" not in cmd


def test_the_offscreen_set_up_installs_the_tests_browser(monkeypatch, capsys):
    """--offscreen --install (the README's test command) also installs Chromium, which the
    report's browser test needs, when no Chromium-family browser is found; the app's set-up
    (without --offscreen) does not, and a browser that cannot be installed is a note, not a
    failure."""
    calls = []
    installed = {"chromium": False}

    def run(args, env):
        calls.append(args)
        if "install" in args:
            installed["chromium"] = True
        return subprocess.CompletedProcess(args, 0)

    which = lambda name: "/usr/bin/chromium" if name == "chromium" and installed["chromium"] else None  # noqa: E731
    monkeypatch.setattr(system_check, "_loads", lambda name: True)
    monkeypatch.setattr(system_check, "venv_package", lambda: None)
    monkeypatch.setattr(system_check, "install_command", lambda: ["apt-get"])
    monkeypatch.setattr(system_check.subprocess, "run", run)
    monkeypatch.setattr(system_check.shutil, "which", which)
    monkeypatch.setattr(system_check, "browser_path", lambda which=which: system_check.TEST_BROWSERS[0]
                        if installed["chromium"] else None)
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delenv("QT_QPA_PLATFORM", raising=False)
    assert system_check.main(["--install"]) == 0 and calls == []  # the app needs no browser
    assert system_check.main(["--offscreen", "--install"]) == 0
    assert calls[-1] == ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"]
    calls.clear()
    assert system_check.main(["--offscreen", "--install"]) == 0 and calls == []  # there now
    installed["chromium"] = False
    monkeypatch.setattr(system_check.subprocess, "run", lambda args, env: calls.append(args) or
                        subprocess.CompletedProcess(args, 100))
    assert system_check.main(["--offscreen", "--install"]) == 0
    assert "sudo apt-get install -y chromium" in capsys.readouterr().err


def test_browser_path_finds_the_first_chromium_family_browser():
    found = {"google-chrome": "/opt/google/chrome"}
    assert system_check.browser_path(found.get) == "/opt/google/chrome"
    assert system_check.browser_path(lambda name: None) is None
