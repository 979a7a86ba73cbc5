"""The stand-in NVML library (``nvml_stub.c``) under the real, unmodified ``pynvml`` binding.

:func:`build` compiles ``nvml_stub.c`` with the system C compiler (``$CC`` or ``gcc``) into a
per-user cache directory keyed by the source's hash, with the soname ``libnvidia-ml.so.1``.
:func:`load` dlopens it by full path; glibc then answers pynvml's own ``CDLL("libnvidia-ml.so.1")``
with this already-loaded object (it matches by soname), so the binding's library search,
function-pointer lookup, structures (memory v1/v2, process info v1/v2/v3, PCI info), string buffers
and error classes all run as in production.

:class:`StubNVML` plays a scenario in the format of ``tests/fake_nvml.py`` (``SCENARIOS``,
``_gpu``), plus keys the stand-in adds: ``memory_reserved`` (bytes the driver reserves; v1 ``used``
includes it), ``memory_v2`` (False: a pre-R510 driver without ``nvmlDeviceGetMemoryInfo_v2``),
``max_clock_sm``/``max_clock_mem`` (MHz), ``ecc`` (dict: ``current``, ``volatile_uncorrected``,
``aggregate_uncorrected``, ``retired_pages_pending``, ``remapped_pending``, ``remapped_failure``),
``proc_struct_bytes`` (element size the driver writes for the v3 process call: 24 as nvml.h, 16
plays a binding/driver struct mismatch), and for what nvitop and gpustat read besides:
``encoder_util``/``decoder_util`` (%), ``pcie_tx_kbps``/``pcie_rx_kbps`` (KB/s), ``compute_mode``,
``display_mode``, ``display_active`` (NVML enum values) and ``driver_model`` (Windows: ``(current,
pending)`` NVML_DRIVER_* values; absent: not supported, as on Linux). Any number of GPUs up to 4096.
Values given as callables ``f(tick)`` are evaluated at
:meth:`StubNVML.tick` (tick 0 at start).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "nvml_stub.c")
SONAME = "libnvidia-ml.so.1"

_lib = None


class StubUnavailable(RuntimeError):
    """No C compiler, or the stand-in library could not be built or loaded.

    ``pytest.skip`` with this text.
    """


def build() -> str:
    """Compile the stand-in and return its path (cached by source hash). Raises StubUnavailable."""
    with open(SOURCE, "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()[:16]
    cache = os.environ.get("CUDAMAGIC_NVML_STUB_DIR") or os.path.join(
        tempfile.gettempdir(), f"cudamagic-nvml-stub-{os.getuid() if hasattr(os, 'getuid') else 0}"
    )
    out = os.path.join(cache, digest, SONAME)
    if os.path.exists(out):
        return out
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if not cc or not sys.platform.startswith("linux"):
        raise StubUnavailable("the NVML stand-in needs Linux and a C compiler (gcc); install gcc")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    tmp = f"{out}.{os.getpid()}.tmp"
    cmd = [
        cc,
        "-shared",
        "-fPIC",
        "-O2",
        "-Wall",
        "-Werror",
        f"-Wl,-soname,{SONAME}",
        "-o",
        tmp,
        SOURCE,
    ]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise StubUnavailable(f"building the NVML stand-in failed: {' '.join(cmd)}\n{res.stderr}")
    os.replace(tmp, out)
    return out


def real_pynvml():
    """The real ``pynvml`` module.

    Even while a test has the fake module in ``sys.modules['pynvml']``.
    """
    mod = sys.modules.get("pynvml")
    if mod is not None and hasattr(mod, "_LoadNvmlLibrary"):
        return mod
    fake = sys.modules.get("tests.fake_nvml")
    if fake is not None and hasattr(getattr(fake, "_real", None), "_LoadNvmlLibrary"):
        return fake._real
    saved = sys.modules.pop("pynvml", None)
    try:
        import pynvml as real
    finally:
        if saved is not None:
            sys.modules["pynvml"] = saved
    return real


def load():
    """Build if needed.

    Dlopen the stand-in and make the real ``pynvml`` use it. Returns the ctypes library.
    """
    global _lib
    if _lib is not None:
        return _lib
    real = real_pynvml()

    path = build()
    lib = ctypes.CDLL(path)
    for name, res, args in [
        ("stub_reset", ctypes.c_int, [ctypes.c_int]),
        ("stub_set", ctypes.c_int, [ctypes.c_int, ctypes.c_char_p, ctypes.c_ulonglong]),
        ("stub_set_str", ctypes.c_int, [ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p]),
        ("stub_set_system", None, [ctypes.c_int, ctypes.c_int]),
        ("stub_add_process", ctypes.c_int, [ctypes.c_int, ctypes.c_uint, ctypes.c_ulonglong]),
        ("stub_clear_processes", None, [ctypes.c_int]),
        (
            "stub_add_mig",
            ctypes.c_int,
            [ctypes.c_int, ctypes.c_char_p, ctypes.c_ulonglong, ctypes.c_ulonglong],
        ),
        ("stub_set_error", ctypes.c_int, [ctypes.c_int, ctypes.c_char_p, ctypes.c_int]),
        ("stub_calls", ctypes.c_ulonglong, []),
    ]:
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    if real.nvmlLib is None:
        # the binding's own search: CDLL("libnvidia-ml.so.1") -> this object
        real._LoadNvmlLibrary()
    if real.nvmlLib is None or not hasattr(real.nvmlLib, "stub_reset"):
        raise StubUnavailable(
            f"pynvml loaded another {SONAME} ({real.nvmlLib}); a real driver is installed"
        )
    _lib = lib
    return lib


def unload():
    """Undo :func:`load`.

    Undo :func:`load`: the binding forgets the library and it is dlclose'd (both references: ours by
    path and pynvml's by soname), so later code in this process sees the machine as it is (no driver
    here).
    """
    global _lib
    if _lib is None:
        return
    import _ctypes

    real = real_pynvml()
    from cudamagic.core import nvml

    nvml.reset()
    handle = _lib._handle
    refs = 1 + (real.nvmlLib is not None and getattr(real.nvmlLib, "_handle", None) == handle)
    real.nvmlLib = None
    real._nvmlGetFunctionPointer_cache.clear()
    real._nvmlLib_refcount = 0
    _lib = None
    for _ in range(refs):
        _ctypes.dlclose(handle)


_SIMPLE = {
    "memory_total": "memory_total",
    "memory_used": "memory_used",
    "memory_reserved": "memory_reserved",
    "util_gpu": "util_gpu",
    "util_mem": "util_mem",
    "temperature": "temperature",
    "power_draw_mw": "power_draw_mw",
    "power_limit_mw": "power_limit_mw",
    "fan": "fan",
    "clock_sm": "clock_sm",
    "clock_mem": "clock_mem",
    "max_clock_sm": "max_clock_sm",
    "max_clock_mem": "max_clock_mem",
    "pstate": "pstate",
    "throttle": "throttle",
    "persistence": "persistence",
    "proc_struct_bytes": "proc_struct_bytes",
    "encoder_util": "encoder_util",
    "decoder_util": "decoder_util",
    "pcie_tx_kbps": "pcie_tx_kbps",
    "pcie_rx_kbps": "pcie_rx_kbps",
    "compute_mode": "compute_mode",
    "display_mode": "display_mode",
    "display_active": "display_active",
}
_ECC = {
    "current": "ecc_current",
    "volatile_uncorrected": "ecc_volatile_uncorrected",
    "aggregate_uncorrected": "ecc_aggregate_uncorrected",
    "retired_pages_pending": "retired_pages_pending",
    "remapped_pending": "remapped_pending",
    "remapped_failure": "remapped_failure",
    "remapped_correctable": "remapped_correctable",
    "remapped_uncorrectable": "remapped_uncorrectable",
}
_UNSUPPORTED_ALIASES = {
    "nvmlDeviceGetComputeRunningProcesses": "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses": "nvmlDeviceGetGraphicsRunningProcesses_v3",
}


class StubNVML:
    """Plays ``scenario`` (fake_nvml format + the keys above) in the stand-in library."""

    def __init__(self, scenario: dict):
        self.lib = load()
        self.scenario = scenario
        self.gpus = [dict(g) for g in scenario.get("gpus", [])]
        self.t = 0
        lib = self.lib
        if lib.stub_reset(len(self.gpus)) != len(self.gpus):
            raise StubUnavailable(f"the stand-in cannot play {len(self.gpus)} GPUs (at most 4096)")
        lib.stub_set_system(
            int(scenario.get("cuda_driver_version", 12040)), int(scenario.get("init_error", 0))
        )
        for key in ("driver_version", "nvml_version"):
            if key in scenario:
                lib.stub_set_str(-1, key.encode(), scenario[key].encode())
        for i, g in enumerate(self.gpus):
            for key in ("name", "uuid", "pci_bus_id"):
                if key in g:
                    lib.stub_set_str(i, key.encode(), g[key].encode())
            cc = g.get("cc", (9, 0))
            self._set(i, "cc_major", cc[0])
            self._set(i, "cc_minor", cc[1])
            mig = g.get("mig_mode", (0, 0))
            self._set(i, "mig_current", mig[0])
            self._set(i, "mig_pending", mig[1])
            self._set(i, "memory_v2", int(g.get("memory_v2", True)))
            self._set(i, "lost", int(bool(g.get("lost"))))
            self._set(i, "max_clock_sm", g.get("max_clock_sm", 1980))
            self._set(i, "max_clock_mem", g.get("max_clock_mem", 2619))
            if "driver_model" in g:  # Windows: (current, pending) NVML_DRIVER_* values
                self._set(i, "driver_model", g["driver_model"][0] + 1)
                self._set(i, "driver_model_pending", g["driver_model"][1])
            for k, v in (g.get("ecc") or {}).items():
                self._set(i, _ECC[k], v)
            for m in g.get("mig_devices", []):
                lib.stub_add_mig(i, m["uuid"].encode(), m["memory_total"], m["memory_used"])
            for fn in g.get("unsupported", ()):
                code = 3
                lib.stub_set_error(i, _UNSUPPORTED_ALIASES.get(fn, fn).encode(), code)
            for fn, code in (g.get("errors") or {}).items():
                lib.stub_set_error(i, _UNSUPPORTED_ALIASES.get(fn, fn).encode(), int(code))
        self.tick(0)

    def _set(self, i, key, value):
        if self.lib.stub_set(i, key.encode(), int(value) & 0xFFFFFFFFFFFFFFFF) != 0:
            raise KeyError(key)

    def tick(self, t: int | None = None):
        """Evaluate the scenario's values at tick ``t`` (default.

        The next tick) and hand them to the library.
        """
        self.t = self.t + 1 if t is None else t
        for i, g in enumerate(self.gpus):
            for key, ckey in _SIMPLE.items():
                if key in g:
                    v = g[key]
                    self._set(i, ckey, v(self.t) if callable(v) else v)
            self.lib.stub_clear_processes(i)
            for pid, used in g.get("processes", ()):
                used = used(self.t) if callable(used) else used
                self.lib.stub_add_process(i, pid, 0xFFFFFFFFFFFFFFFF if used is None else used)

    def lose_gpu(self, index: int):
        """From now on every call on GPU ``index`` returns NVML_ERROR_GPU_IS_LOST (Xid 79)."""
        self._set(index, "lost", 1)

    def set(self, index: int, **values):
        """Change numeric values of GPU ``index`` now (keys as in the scenario)."""
        for k, v in values.items():
            self.gpus[index][k] = v
        self.tick(self.t)

    def calls(self) -> int:
        """NVML entry points called so far (all functions, all GPUs)."""
        return int(self.lib.stub_calls())


def install(scenario: dict, monkeypatch=None) -> StubNVML:
    """Play ``scenario`` in the stand-in under the real binding.

    Play ``scenario`` in the stand-in, make sure ``sys.modules['pynvml']`` is the real binding and
    reset cudamagic's NVML state. Raises StubUnavailable when the stand-in cannot be built or
    loaded.
    """
    from cudamagic.core import nvml

    stub = StubNVML(scenario)
    real = real_pynvml()
    if sys.modules.get("pynvml") is not real:
        if monkeypatch is not None:
            monkeypatch.setitem(sys.modules, "pynvml", real)
        else:
            sys.modules["pynvml"] = real
    nvml.reset()
    return stub
