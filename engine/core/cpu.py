"""The CPU: what it is (:func:`cpu_flags`, :func:`cpu_model`, the one reader of /proc/cpuinfo, and the rules that
follow from its flags), and how the streaming ASR and speculation share two cores: the ASR always goes first.

Policy (measured by ``specvoice bench voice``, documented in the README):

1. every streaming-ASR decode runs inside :meth:`AsrPriority.decoding`;
2. speculative work (PredGen updates while the user speaks) calls :meth:`AsrPriority.wait_idle` before each LLM
   forward pass, so it never competes with a decode for the cores — it pauses between passes (one pass: one
   pre-fill chunk or one token, tens of milliseconds) and resumes when the decode is done;
3. speculation also runs at a lower OS priority (the answer thread at nice +10) with
   ``llm.predgen_speculation_threads`` LLM threads; the final answer, once the transcript is final, uses every core
   and does not wait.

One instance per process (:data:`ASR`): the ASR and the answer stage share the machine, not an object graph.
"""

from __future__ import annotations

import platform
import threading
import time
from contextlib import contextmanager
from pathlib import Path

#: where Linux describes the CPU; elsewhere it does not exist and the readers below say "unknown"
CPUINFO = Path("/proc/cpuinfo")

#: ``platform.machine()`` names of x86 CPUs (where onnxruntime's uint8 × int8 kernel may saturate)
_X86 = ("x86_64", "amd64", "x64", "i386", "i686", "x86")

#: the flags of the x86 dot-product instructions (VNNI) with which onnxruntime's uint8 × int8 kernel is exact
_VNNI = frozenset({"avx512_vnni", "avx_vnni"})


def _read(cpuinfo: str | Path) -> str:
    """The text of ``cpuinfo``; "" where it cannot be read (not Linux, no permission)."""
    try:
        return Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return ""


def cpu_flags(cpuinfo: str | Path = CPUINFO) -> frozenset[str]:
    """The CPU's feature flags: the words of every ``flags`` line of ``cpuinfo`` (every processor's together,
    e.g. ``avx2``, ``avx512_vnni``, ``amx_tile``); empty where the file cannot be read or lists none."""
    flags: set[str] = set()
    for line in _read(cpuinfo).splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
    return frozenset(flags)


def cpu_model(cpuinfo: str | Path = CPUINFO) -> str:
    """The CPU's model name (the first ``model name`` line of ``cpuinfo``, e.g. "Intel(R) Xeon(R) Processor");
    "" where unknown."""
    for line in _read(cpuinfo).splitlines():
        if line.startswith("model name"):
            return line.partition(":")[2].strip()
    return ""


def int8_gemm_saturates(cpuinfo: str | Path = CPUINFO, machine: str | None = None) -> bool:
    """Whether onnxruntime's default uint8 × int8 matrix product can saturate on this CPU.

    Without VNNI, the x86 kernel sums pairs of products in saturating 16-bit registers (``vpmaddubsw``), so a
    quantised model gives other outputs than on a VNNI CPU. True for an x86 CPU without VNNI (``avx512_vnni`` /
    ``avx_vnni`` absent from its flags) and for one whose flags cannot be read (the exact kernel is the safe
    choice); False on other architectures (Arm's dot-product kernels do not saturate).

    Args:
        cpuinfo: the file the flags are read from.
        machine: the architecture as ``platform.machine()`` names it; None = this machine's.
    """
    arch = (platform.machine() if machine is None else machine).lower()
    if arch not in _X86:
        return False
    flags = cpu_flags(cpuinfo)
    return not flags or not (_VNNI & flags)


class AsrPriority:
    """Counts ASR decodes in flight; lets lower-priority work wait until there are none."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._active = 0
        self.waited_s = 0.0  # total time speculation spent waiting for the ASR, seconds

    @contextmanager
    def decoding(self):
        """Mark one ASR decode in flight for the duration of the ``with`` block."""
        with self._cv:
            self._active += 1
        try:
            yield
        finally:
            with self._cv:
                self._active -= 1
                if self._active == 0:
                    self._cv.notify_all()

    @property
    def busy(self) -> bool:
        return self._active > 0

    def wait_idle(self, timeout: float = 2.0, cancel: threading.Event | None = None) -> float:
        """Block while an ASR decode is in flight (at most ``timeout`` seconds, or until ``cancel`` is set; checked
        every 20 ms). Returns the seconds waited."""
        if not self._active:
            return 0.0
        t0 = time.monotonic()
        with self._cv:
            while self._active and time.monotonic() - t0 < timeout and not (cancel is not None and cancel.is_set()):
                self._cv.wait(0.02)
        waited = time.monotonic() - t0
        self.waited_s += waited
        return waited


ASR = AsrPriority()
