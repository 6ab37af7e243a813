"""What the desktop app needs from the machine before it opens a window, checked without importing Qt.

Three checks:

* :func:`check_display`: on Linux a window needs a display server (``$DISPLAY`` for X11, ``$WAYLAND_DISPLAY`` for
  Wayland) unless Qt is asked for a platform without one (``QT_QPA_PLATFORM=offscreen``); without one Qt aborts the
  process (exit 134) advising to reinstall the application. The check says so in one line, with the offscreen way.
* :func:`check_platform_libraries`: Qt's xcb platform plugin (``PySide6/Qt/plugins/platforms/libqxcb.so`` and
  ``libQt6XcbQpa.so.6``) links against system X11/xcb libraries that a fresh Debian/Ubuntu desktop often lacks; when
  one is missing Qt aborts the process (exit 134) with a message that names only the first. The check opens each
  library the way the dynamic loader will (``dlopen`` by soname) and names every missing one with its Debian/Ubuntu
  package, in one line.
* :func:`repair_signal_emit`: PySide6 6.12.0's ``SignalInstance.emit`` returns ``True`` without taking a reference
  to it, so every ``emit`` called from Python drops one reference of ``True``. On Python 3.11 (``True`` is not yet
  immortal) a few thousand emits of a session free it and the interpreter aborts with ``Fatal Python error:
  bool_dealloc``, typically when the window closes after two sessions. The repair detects the lost reference with a
  probe and gives it back after each emit; it does nothing where the bug is absent.
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Callable, Mapping

# Every system library the xcb platform plugin and libQt6XcbQpa link against (their NEEDED entries, as ``ldd
# PySide6/Qt/plugins/platforms/libqxcb.so`` lists them, PySide6 6.6-6.12) that is not part of glibc/libstdc++, with the
# Debian/Ubuntu package that ships it. The loader order: the first one missing is the one Qt would name.
XCB_LIBRARIES: tuple[tuple[str, str], ...] = (
    ("libxcb.so.1", "libxcb1"),
    ("libX11.so.6", "libx11-6"),
    ("libX11-xcb.so.1", "libx11-xcb1"),
    ("libxcb-cursor.so.0", "libxcb-cursor0"),
    ("libxcb-icccm.so.4", "libxcb-icccm4"),
    ("libxcb-util.so.1", "libxcb-util1"),
    ("libxcb-image.so.0", "libxcb-image0"),
    ("libxcb-keysyms.so.1", "libxcb-keysyms1"),
    ("libxcb-randr.so.0", "libxcb-randr0"),
    ("libxcb-render.so.0", "libxcb-render0"),
    ("libxcb-render-util.so.0", "libxcb-render-util0"),
    ("libxcb-shape.so.0", "libxcb-shape0"),
    ("libxcb-shm.so.0", "libxcb-shm0"),
    ("libxcb-sync.so.1", "libxcb-sync1"),
    ("libxcb-xfixes.so.0", "libxcb-xfixes0"),
    ("libxcb-xkb.so.1", "libxcb-xkb1"),
    ("libxkbcommon.so.0", "libxkbcommon0"),
    ("libxkbcommon-x11.so.0", "libxkbcommon-x11-0"),
    ("libGL.so.1", "libgl1"),
    ("libEGL.so.1", "libegl1"),
    ("libfontconfig.so.1", "libfontconfig1"),
    ("libfreetype.so.6", "libfreetype6"),
    ("libglib-2.0.so.0", "libglib2.0-0"),
    ("libgthread-2.0.so.0", "libglib2.0-0"),
    ("libdbus-1.so.3", "libdbus-1-3"),
)


def _dlopen(soname: str) -> None:
    """Open ``soname`` as the dynamic loader would for Qt. Raises OSError when it cannot be loaded."""
    ctypes.CDLL(soname)


HEADLESS_PLATFORMS = ("offscreen", "minimal", "minimalegl", "vnc", "eglfs", "linuxfb", "vkkhrdisplay")


def check_display(env: Mapping[str, str] | None = None) -> str | None:
    """One line for the user when Qt would find no display to open a window on: Linux, and every platform
    ``$QT_QPA_PLATFORM`` names (none: xcb or Wayland, Qt's defaults) needs a display server that is not there
    (xcb: ``$DISPLAY``; wayland: ``$WAYLAND_DISPLAY``). None when there is one, when a platform without a display
    (offscreen, minimal, vnc, eglfs, linuxfb, …) or one this check does not know is asked for, or off Linux."""
    env = os.environ if env is None else env
    if not sys.platform.startswith("linux"):
        return None
    x11, wayland = bool(env.get("DISPLAY")), bool(env.get("WAYLAND_DISPLAY"))
    chosen = [p.split(":")[0].strip() for p in env.get("QT_QPA_PLATFORM", "").split(";") if p.strip()]
    if not chosen:
        if x11 or wayland:
            return None
        why = "DISPLAY and WAYLAND_DISPLAY are not set"
    else:
        for name in chosen:
            if (name == "xcb" and x11) or (name.startswith("wayland") and wayland) or (
                    name != "xcb" and not name.startswith("wayland")):
                return None
        why = f"QT_QPA_PLATFORM={env.get('QT_QPA_PLATFORM', '').strip()} needs " + (
            "DISPLAY" if chosen[0] == "xcb" else "WAYLAND_DISPLAY") + ", which is not set"
    return (f"no display to open the desktop app's window on ({why}; an SSH session?): run it in a desktop session, "
            f"over ssh -X, or without a window with QT_QPA_PLATFORM=offscreen specvoice app")


def platform_is_xcb(env: Mapping[str, str] | None = None) -> bool:
    """Qt will use its xcb (X11) platform plugin: Linux, ``$DISPLAY`` set, and ``$QT_QPA_PLATFORM`` unset or naming
    xcb first (``"xcb"``, ``"xcb;wayland"``)."""
    env = os.environ if env is None else env
    if not sys.platform.startswith("linux") or not env.get("DISPLAY"):
        return False
    chosen = env.get("QT_QPA_PLATFORM", "").strip()
    return not chosen or chosen.split(";")[0].split(":")[0].strip() == "xcb"


def missing_platform_libraries(load: Callable[[str], object] | None = None) -> list[tuple[str, str]]:
    """The (soname, Debian/Ubuntu package) pairs of :data:`XCB_LIBRARIES` that ``load`` (default: ``dlopen``)
    cannot open, in :data:`XCB_LIBRARIES` order; [] when all load."""
    load = load or _dlopen
    missing = []
    for soname, package in XCB_LIBRARIES:
        try:
            load(soname)
        except OSError:
            missing.append((soname, package))
    return missing


def check_platform_libraries(env: Mapping[str, str] | None = None,
                             load: Callable[[str], object] | None = None) -> str | None:
    """One line for the user when Qt's xcb platform plugin will be used (:func:`platform_is_xcb`) and a system
    library it needs is missing: the missing sonames and the ``apt-get install`` line for their packages. None when
    nothing is missing or another platform (offscreen, wayland, no display) will be used."""
    if not platform_is_xcb(env):
        return None
    missing = missing_platform_libraries(load)
    if not missing:
        return None
    packages = " ".join(dict.fromkeys(pkg for _, pkg in missing))  # in order, without repeats
    return (f"the desktop app cannot open a window: Qt's X11 (xcb) platform plugin needs "
            f"{', '.join(so for so, _ in missing)}, missing on this system; install with: "
            f"sudo apt-get install {packages}")


_EMIT_REPAIRED = False


def emit_loses_true(n: int = 64) -> bool:
    """PySide6's ``SignalInstance.emit`` drops a reference to ``True`` on each call (PySide6 6.12.0): ``n`` emits of
    an unconnected probe signal, counted on ``sys.getrefcount(True)``. Always False where ``True`` is immortal
    (Python >= 3.12: a lost reference cannot free it)."""
    if sys.version_info >= (3, 12):
        return False
    from PySide6.QtCore import QObject, Signal

    class _Probe(QObject):
        ping = Signal()

    probe = _Probe()
    signal = probe.ping
    before = sys.getrefcount(True)
    for _ in range(n):
        signal.emit()
    lost = before - sys.getrefcount(True)
    return lost >= n // 2  # another thread may take or drop a few references meanwhile; the bug loses n


def repair_signal_emit() -> bool:
    """Give back the reference PySide6 6.12.0's ``SignalInstance.emit`` loses on ``True`` after every emit, in this
    process, when :func:`emit_loses_true` finds the bug (once; later calls return the first answer). Returns True
    when the repair is installed. Without it, the sessions of a long-running window free ``True`` and the
    interpreter aborts (``Fatal Python error: bool_dealloc``)."""
    global _EMIT_REPAIRED
    if _EMIT_REPAIRED:
        return True
    if not emit_loses_true():
        return False
    from PySide6.QtCore import SignalInstance

    incref = ctypes.pythonapi.Py_IncRef  # PyDLL: called with the GIL held, safe from any thread
    incref.argtypes = [ctypes.py_object]
    incref.restype = None
    original = SignalInstance.emit

    def emit(self, *args):
        result = original(self, *args)
        if result is True:
            incref(True)  # the reference emit returned without owning it
        return result

    emit.__doc__ = original.__doc__
    SignalInstance.emit = emit
    _EMIT_REPAIRED = True
    return True
