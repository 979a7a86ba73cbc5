"""Tier 1: what cudamagic.core.nvml says when NVML fails.

Tier 1: what cudamagic.core.nvml tells the user when NVML fails, word for word (each reason is
printed in %cudainfo and %gpuwatch, and each code decides what the caller does), the driver version
sources, and the process list (compute + graphics merged into C+G, impossible pids, errors that
stick). A minimal hand-made ``pynvml`` module plays each case, so every branch is reached exactly.
"""

from __future__ import annotations

import sys
import types

import pytest

from cudamagic.core import nvml, platform
from cudamagic.core.na import NA, is_na
from cudamagic.core.nvml import ProcessRow

MISMATCH = (
    "driver/library version mismatch: the loaded NVIDIA kernel module and the user-space NVML "
    "library "
    "differ{}, usually after a driver update without a reboot; reboot, or unload and reload the "
    "nvidia "
    "kernel modules"
)

TRANSLATED = {
    3: NA("not supported on this GPU", "not_supported"),
    4: NA(
        "permission denied by the driver (try as root or ask the administrator)", "no_permission"
    ),
    13: NA(
        "this driver's NVML lacks the function (driver too old for this query)", "not_supported"
    ),
    15: NA(
        "GPU lost: it fell off the bus or was reset; check `dmesg` and `nvidia-smi`", "gpu_lost"
    ),
    28: NA(
        "GPU lost: it fell off the bus or was reset; check `dmesg` and `nvidia-smi`", "gpu_lost"
    ),
    16: NA("GPU requires a reset (`nvidia-smi -r`) or a reboot", "gpu_lost"),
    12: NA(
        "NVML library libnvidia-ml.so.1 not found: no NVIDIA driver is installed on this machine "
        "(or its library is not on the loader path)",
        "no_driver",
    ),
    9: NA(
        "the NVIDIA driver is installed but its kernel module is not loaded "
        "(`sudo modprobe nvidia`, or reboot after installing the driver)",
        "no_driver",
    ),
    10: NA("NVML timed out", "error"),
    1: NA("NVML is not initialised", "not_initialized"),
}


class NVMLError(Exception):
    def __init__(self, value):
        super().__init__(f"NVML error {value}")
        self.value = value


@pytest.fixture
def pynvml(monkeypatch):
    """A bare ``pynvml`` module (init succeeds); tests add the functions a case needs."""
    mod = types.ModuleType("pynvml")
    mod.nvmlInit = lambda: None
    mod.nvmlShutdown = lambda: None
    mod.nvmlDeviceGetHandleByIndex = lambda i: ("handle", i)
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    nvml.reset()
    yield mod
    nvml.reset()


@pytest.mark.parametrize("code", sorted(TRANSLATED))
def test_translate_reason_and_code(code):
    assert nvml.translate(NVMLError(code)) == TRANSLATED[code]


def test_translate_unknown_error_names_it():
    assert nvml.translate(NVMLError(999)) == NA("NVML error: NVMLError: NVML error 999", "error")
    assert nvml.translate(RuntimeError("boom")) == NA("NVML error: RuntimeError: boom", "error")


@pytest.mark.parametrize(
    "kmod, lib, seen",
    [
        ("535.54.03", "535.86.10", " (kernel module 535.54.03, user-space library 535.86.10)"),
        ("535.54.03", NA("x", "no_driver"), " (kernel module 535.54.03)"),
        (NA("x", "no_driver"), "535.86.10", " (user-space library 535.86.10)"),
        (NA("x", "no_driver"), NA("y", "no_driver"), ""),
    ],
)
def test_version_mismatch_names_the_versions_it_found(monkeypatch, kmod, lib, seen):
    monkeypatch.setattr(nvml, "kernel_module_version", lambda: kmod)
    monkeypatch.setattr(nvml, "library_version", lambda: lib)
    assert nvml.translate(NVMLError(18)) == NA(MISMATCH.format(seen), "version_mismatch")


@pytest.mark.parametrize(
    "text, version",
    [
        (
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.54.03  Tue Jun  6 22:20:39 UTC "
            "2023\n"
            "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n",
            "535.54.03",
        ),
        (
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build  "
            "(dvs-builder@U16)\n",
            "550.54.15",
        ),
        ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.82  Thu Oct 14 2021\n", "470.82"),
    ],
)
def test_kernel_module_version_from_proc(monkeypatch, text, version):
    monkeypatch.setattr(platform, "nvidia_kernel_module_text", lambda: text)
    assert nvml.kernel_module_version() == version


def test_kernel_module_version_not_available(monkeypatch):
    monkeypatch.setattr(
        platform, "nvidia_kernel_module_text", lambda: "NVRM version: something else\n"
    )
    assert nvml.kernel_module_version() == NA(
        "version not found in the NVIDIA kernel module version file", "error"
    )
    monkeypatch.setattr(platform, "nvidia_kernel_module_text", lambda: None)
    monkeypatch.setattr(platform, "is_windows", lambda: False)
    assert nvml.kernel_module_version() == NA(
        "the NVIDIA kernel module version file (/proc/driver/nvidia/version) is not readable "
        "(no NVIDIA kernel module loaded)",
        "no_driver",
    )
    monkeypatch.setattr(platform, "is_windows", lambda: True)
    assert nvml.kernel_module_version() == NA(
        "Windows has no NVIDIA kernel module file: the driver version comes from NVML", "no_driver"
    )


def _fake_glob(monkeypatch, files):
    asked = []

    def glob(pattern):
        asked.append(pattern)
        import fnmatch

        return [f for f in files if fnmatch.fnmatch(f, pattern)]

    monkeypatch.setattr(nvml.glob, "glob", glob)
    return asked


def test_library_version_from_the_file_name(monkeypatch):
    asked = _fake_glob(
        monkeypatch,
        [
            "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
            "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.54.03",
        ],
    )
    assert nvml.library_version() == "535.54.03"
    assert asked == [
        "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.*.*"
    ]  # found in the first place looked


@pytest.mark.parametrize(
    "path, version",
    [
        ("/usr/lib64/libnvidia-ml.so.550.54.15", "550.54.15"),
        ("/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.535.104", "535.104"),
        ("/usr/lib/libnvidia-ml.so.470.82.01", "470.82.01"),
    ],
)
def test_library_version_other_distributions(monkeypatch, path, version):
    _fake_glob(monkeypatch, [path])
    assert nvml.library_version() == version


def test_library_version_missing(monkeypatch):
    asked = _fake_glob(monkeypatch, ["/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.54.03.bak"])
    assert nvml.library_version() == NA("libnvidia-ml.so.<version> not found on disk", "no_driver")
    assert len(asked) == 4


def test_library_path(pynvml):
    assert nvml.library_path() == NA(
        "this nvidia-ml-py does not say which library it loaded", "not_supported"
    )
    nvml.reset()
    pynvml.nvmlLib = types.SimpleNamespace(_name=b"libnvidia-ml.so.1\x00")
    assert nvml.library_path() == "libnvidia-ml.so.1"


def test_library_path_without_nvml(pynvml):
    def fail():
        raise NVMLError(12)

    pynvml.nvmlInit = fail
    pynvml.nvmlLib = types.SimpleNamespace(_name="libnvidia-ml.so.1")
    assert nvml.library_path() == TRANSLATED[12]


def test_decode_cuda_driver_version_reasons():
    assert nvml.decode_cuda_driver_version(12015) == "12.1"
    assert nvml.decode_cuda_driver_version("12080") == "12.8"
    assert nvml.decode_cuda_driver_version("x") == NA("unreadable CUDA driver version 'x'", "error")
    assert nvml.decode_cuda_driver_version(None) == NA(
        "unreadable CUDA driver version None", "error"
    )
    assert nvml.decode_cuda_driver_version(0) == NA("unreadable CUDA driver version 0", "error")
    assert nvml.decode_cuda_driver_version(-5) == NA("unreadable CUDA driver version -5", "error")
    na = NA("no driver", "no_driver")
    assert nvml.decode_cuda_driver_version(na) is na


def test_system_info_without_nvml(pynvml):
    def fail():
        raise NVMLError(9)

    pynvml.nvmlInit = fail
    see = NA("NVML not available: see NVML status", "no_driver")
    assert nvml.system_info()._asdict() == {
        "status": TRANSLATED[9],
        "driver_version": see,
        "cuda_driver_version": see,
        "cuda_driver_version_raw": see,
        "nvml_version": see,
        "device_count": see,
    }


def test_system_info_with_nvml(pynvml):
    pynvml.nvmlSystemGetCudaDriverVersion = lambda: 12040
    pynvml.nvmlSystemGetDriverVersion = lambda: b"550.54.15"
    pynvml.nvmlSystemGetNVMLVersion = lambda: "12.550.54.15"
    pynvml.nvmlDeviceGetCount = lambda: 2
    assert nvml.system_info()._asdict() == {
        "status": "ok",
        "driver_version": "550.54.15",
        "cuda_driver_version": "12.4",
        "cuda_driver_version_raw": 12040,
        "nvml_version": "12.550.54.15",
        "device_count": 2,
    }
    assert nvml.device_count() == 2


def test_system_info_failed_queries(pynvml):
    def fail():
        raise NVMLError(3)

    for name in (
        "nvmlSystemGetCudaDriverVersion",
        "nvmlSystemGetDriverVersion",
        "nvmlSystemGetNVMLVersion",
    ):
        setattr(pynvml, name, fail)
    info = nvml.system_info()
    assert info.status == "ok"
    assert info.driver_version == info.nvml_version == info.cuda_driver_version == TRANSLATED[3]
    assert info.device_count == NA("this nvidia-ml-py has no nvmlDeviceGetCount", "not_supported")


def test_init_is_cached_and_reset_shuts_down(pynvml):
    calls = []
    pynvml.nvmlInit = lambda: calls.append("init")
    pynvml.nvmlShutdown = lambda: calls.append("shutdown")
    assert nvml.init() is None and nvml.init() is None
    assert calls == ["init"]
    nvml.reset()
    assert calls == ["init", "shutdown"]
    nvml.reset()  # not initialised: no second shutdown
    assert calls == ["init", "shutdown"]


def test_failed_init_is_remembered(pynvml):
    calls = []

    def fail():
        calls.append(1)
        raise NVMLError(12)

    pynvml.nvmlInit = fail
    assert nvml.init() == TRANSLATED[12] and nvml.init() == TRANSLATED[12]
    assert calls == [1]


def test_no_binding(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    nvml.reset()
    err = nvml.init()
    assert err.code == "no_binding" and err.reason.endswith(
        "install it with `pip install nvidia-ml-py`"
    )
    assert err.reason.startswith("the NVML Python binding is not importable (")
    assert nvml.call("nvmlDeviceGetCount") == err
    nvml.reset()


# ---- processes -----------------------------------------------------------------------------------


def P(pid, used):
    return types.SimpleNamespace(pid=pid, usedGpuMemory=used)


def _device(pynvml, compute=(), graphics=(), total=80 * 2**30):
    pynvml.nvmlDeviceGetComputeRunningProcesses = (
        compute if callable(compute) else (lambda h: list(compute))
    )
    if graphics is not None:
        pynvml.nvmlDeviceGetGraphicsRunningProcesses = (
            graphics if callable(graphics) else (lambda h: list(graphics))
        )
    elif hasattr(
        pynvml, "nvmlDeviceGetGraphicsRunningProcesses"
    ):  # an old binding without the graphics list
        del pynvml.nvmlDeviceGetGraphicsRunningProcesses
    dev = nvml.device(0)
    dev.memory_total = total
    return dev


def test_compute_and_graphics_merge_into_c_plus_g(pynvml):
    dev = _device(
        pynvml,
        compute=[P(300, 5 * 2**20), P(100, 2**30)],
        graphics=[P(100, 2 * 2**30), P(200, 2**20)],
    )
    assert dev.processes() == [
        ProcessRow(100, 2 * 2**30, "C+G"),
        ProcessRow(200, 2**20, "G"),
        ProcessRow(300, 5 * 2**20, "C"),
    ]


def test_c_plus_g_keeps_the_larger_figure_and_a_known_one(pynvml):
    pynvml.nvmlDeviceGetDriverModel = None  # Linux: no driver model
    dev = _device(
        pynvml, compute=[P(100, 3 * 2**30), P(200, None)], graphics=[P(100, 2**30), P(200, 2**20)]
    )
    rows = {r.pid: r for r in dev.processes()}
    assert rows[100].used_memory_bytes == 3 * 2**30 and rows[100].type == "C+G"
    assert (
        rows[200].used_memory_bytes == 2**20 and rows[200].type == "C+G"
    )  # N/A then a number: the number


def test_not_available_memory_is_na_with_the_reason(pynvml):
    dev = _device(pynvml, compute=[P(100, None)], graphics=[P(100, None)])
    dev.__dict__["_driver_model"] = "TCC"
    assert dev.processes() == [
        ProcessRow(100, NA("not reported by the driver", "not_supported"), "C+G")
    ]
    nvml.reset()
    dev = _device(pynvml, compute=[P(100, None)], graphics=None)
    dev.__dict__["_driver_model"] = "WDDM"
    assert dev.processes() == [
        ProcessRow(
            100,
            NA(
                "Windows manages GPU memory under WDDM, so NVML cannot attribute it to a process "
                "(nvidia-smi shows N/A too)",
                "wddm",
            ),
            "C",
        )
    ]


@pytest.mark.parametrize(
    "pids, shown",
    [
        ([0], "pid 0"),
        ([4194305, 0, 7], "pid 4194305 and 1 more"),
        ([0, 4194305], "pid 0 and 1 more"),
    ],
)
def test_impossible_pids_reject_the_whole_list(pynvml, pids, shown):
    dev = _device(pynvml, compute=[P(p, 2**20) for p in pids], graphics=[P(5, 2**20)])
    na = dev.processes()
    assert na == NA(
        f"implausible reading: NVML returned {shown} for the process list (no Linux pid is 0 or "
        "above "
        f"{nvml.PID_MAX}: the nvidia-ml-py binding and the driver disagree on the process "
        "structure; "
        "install the nvidia-ml-py that matches the driver)",
        "implausible",
    )


def test_a_process_at_the_largest_linux_pid_keeps_the_list_plausible(pynvml):
    # 4194304 is PID_MAX_LIMIT on 64-bit Linux: a real pid, not a struct mismatch
    dev = _device(pynvml, compute=[P(4_194_304, 2**20), P(1, 2**20)])
    assert dev.processes() == [ProcessRow(1, 2**20, "C"), ProcessRow(4_194_304, 2**20, "C")]


def test_one_list_failing_keeps_the_other(pynvml):
    def fail(h):
        raise NVMLError(3)

    dev = _device(pynvml, compute=[P(100, 2**20)], graphics=fail)
    assert dev.processes() == [ProcessRow(100, 2**20, "C")]


def test_both_lists_failing_not_supported_is_remembered(pynvml):
    calls = []

    def fail(h):
        calls.append(h)
        raise NVMLError(3)

    dev = _device(pynvml, compute=fail, graphics=fail)
    assert dev.processes() == TRANSLATED[3]
    assert dev.processes() == TRANSLATED[3]
    assert len(calls) == 2 and dev.lost is None  # asked once per list, then remembered


def test_both_lists_failing_with_a_lost_gpu_marks_it_lost(pynvml):
    def fail(h):
        raise NVMLError(15)

    dev = _device(pynvml, compute=fail, graphics=fail)
    assert dev.processes() == TRANSLATED[15]
    assert dev.lost == TRANSLATED[15]
    assert dev.handle() == TRANSLATED[15]


def test_a_timeout_is_not_remembered(pynvml):
    answers = [NVMLError(10), [P(100, 2**20)]]

    def flaky(h):
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    dev = _device(pynvml, compute=flaky, graphics=None)
    assert dev.processes() == TRANSLATED[10]
    assert dev.lost is None
    assert dev.processes() == [ProcessRow(100, 2**20, "C")]


def test_process_gpu_memory_of_one_pid_on_each_gpu(pynvml):
    pynvml.nvmlDeviceGetCount = lambda: 3
    lists = {0: [P(100, 2**20), P(200, 2**30)], 1: [P(300, 5)], 2: [P(200, 7 * 2**20)]}
    pynvml.nvmlDeviceGetComputeRunningProcesses = lambda h: lists[h[1]]
    for i in range(3):
        nvml.device(i).memory_total = 80 * 2**30
    assert nvml.process_gpu_memory(200) == {0: 2**30, 2: 7 * 2**20}
    assert nvml.process_gpu_memory(999) == {}


def test_process_gpu_memory_without_nvml(pynvml):
    def fail():
        raise NVMLError(12)

    pynvml.nvmlInit = fail
    assert nvml.process_gpu_memory(1) == {}


def test_process_name(pynvml):
    pynvml.nvmlSystemGetProcessName = lambda pid: (
        b"python3\x00" if pid == 42 else (_ for _ in ()).throw(NVMLError(4))
    )
    assert nvml.process_name("42") == "python3"
    assert nvml.process_name(43) == TRANSLATED[4]


def test_lost_handle_is_remembered_other_failures_are_not(pynvml):
    calls = []

    def handle(i):
        calls.append(i)
        raise NVMLError(15 if i == 1 else 10)

    pynvml.nvmlDeviceGetHandleByIndex = handle
    assert nvml.device(1).handle() == TRANSLATED[15] and nvml.device(1).handle() == TRANSLATED[15]
    assert nvml.device(0).handle() == TRANSLATED[10] and nvml.device(0).handle() == TRANSLATED[10]
    assert calls == [1, 0, 0]
    assert nvml.device(1).lost == TRANSLATED[15] and nvml.device(0).lost is None


def test_cuda_driver_version_boundary():
    assert (
        nvml.decode_cuda_driver_version(1) == "0.0"
    )  # positive: decoded (NA only for 0 and below)


def test_process_gpu_memory_skips_a_gpu_that_cannot_list_and_defaults_to_this_process(pynvml):
    import os

    pynvml.nvmlDeviceGetCount = lambda: 3

    def lists(h):
        if h[1] == 0:
            raise NVMLError(4)
        return [P(os.getpid(), 2**20 * (h[1] + 1))]

    pynvml.nvmlDeviceGetComputeRunningProcesses = lists
    for i in range(3):
        nvml.device(i).memory_total = 80 * 2**30
    assert nvml.process_gpu_memory() == {1: 2 * 2**20, 2: 3 * 2**20}


def test_mig_devices(pynvml):
    mem = types.SimpleNamespace(total=10 * 2**30, used=2**30)
    slots = {0: NVMLError(3), 1: ("mig", 1), 2: ("mig", 2), 3: ("mig", 3)}

    def handle(h, i):
        if isinstance(slots[i], Exception):
            raise slots[i]
        return slots[i]

    def uuid(mh):
        if mh[1] == 3:
            raise NVMLError(3)
        return f"MIG-{mh[1]}".encode()

    def memory(mh):
        if mh[1] == 2:
            raise NVMLError(3)
        return mem

    pynvml.nvmlDeviceGetMaxMigDeviceCount = lambda h: 4
    pynvml.nvmlDeviceGetMigDeviceHandleByIndex = handle
    pynvml.nvmlDeviceGetUUID = uuid
    pynvml.nvmlDeviceGetMemoryInfo = memory
    assert nvml.device(0).mig_devices() == [
        {
            "index": 1,
            "uuid": "MIG-1",
            "memory.total": 10 * 2**30,
            "memory.used": 2**30,
        },  # slot 0 unpopulated
        {"index": 2, "uuid": "MIG-2", "memory.total": TRANSLATED[3], "memory.used": TRANSLATED[3]},
        {"index": 3, "uuid": TRANSLATED[3], "memory.total": 10 * 2**30, "memory.used": 2**30},
    ]


def test_mig_devices_not_available(pynvml):
    def no_mig(h):
        raise NVMLError(3)

    pynvml.nvmlDeviceGetMaxMigDeviceCount = no_mig
    assert nvml.device(0).mig_devices() == TRANSLATED[3]

    def lost(i):
        raise NVMLError(15)

    nvml.reset()
    pynvml.nvmlDeviceGetHandleByIndex = lost
    assert nvml.device(0).mig_devices() == TRANSLATED[15]


# ---- what is remembered, and what a missing or odd binding gives ---------------------------------


def test_a_missing_binding_is_remembered_until_reset(monkeypatch, pynvml):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    nvml.reset()
    err = nvml.init()
    assert err.code == "no_binding"
    monkeypatch.setitem(sys.modules, "pynvml", pynvml)  # installed meanwhile: not seen until reset
    assert nvml.init() is err and nvml.call("nvmlDeviceGetHandleByIndex", 0) is err
    nvml.reset()
    assert nvml.init() is None


def test_reset_never_shuts_down_an_nvml_this_module_did_not_start(pynvml):
    # NVML counts nvmlInit/nvmlShutdown per process: an extra shutdown would close PyTorch's NVML
    calls = []

    def fail():
        raise NVMLError(9)

    pynvml.nvmlInit = fail
    pynvml.nvmlShutdown = lambda: calls.append("shutdown")
    assert nvml.init() == TRANSLATED[9]
    nvml.reset()
    assert calls == []


def test_device_count_is_a_python_int(pynvml):
    import numpy as np

    pynvml.nvmlDeviceGetCount = lambda: np.uint32(
        2
    )  # a binding or wrapper returning a numpy scalar
    n = nvml.device_count()
    assert n == 2 and type(n) is int


def _counting(pynvml, name, fn):
    calls = []

    def wrapped(*a, **k):
        calls.append(k.get("version"))
        return fn(*a, **k)

    setattr(pynvml, name, wrapped)
    return calls


def test_max_clocks_are_read_once_per_gpu_and_later_groups_still_read(pynvml):
    clocks = _counting(
        pynvml, "nvmlDeviceGetMaxClockInfo", lambda h, kind: {1: 1980, 2: 2619}[kind]
    )
    pynvml.nvmlDeviceGetClockInfo = lambda h, kind: 1500
    pynvml.nvmlDeviceGetTemperature = lambda h, sensor: 41
    dev = nvml.device(0)
    for _ in range(3):
        assert dev.read(["clocks.max.sm", "temperature.gpu"]) == {
            "clocks.max.sm": 1980,
            "temperature.gpu": 41,
        }
        assert dev.get("clocks.sm") == 1500
    assert len(clocks) == 2  # SM and memory, once


def test_max_clocks_of_a_lost_gpu_are_not_remembered(pynvml):
    answers = [NVMLError(15)]

    def max_clock(h, kind):
        if answers:
            raise answers.pop()
        return 1980

    pynvml.nvmlDeviceGetMaxClockInfo = max_clock
    dev = nvml.device(0)
    assert dev.get("clocks.max.sm") == TRANSLATED[15] and dev.lost == TRANSLATED[15]
    dev.lost = None  # the GPU came back (as after `nvidia-smi -r`)
    assert dev.get("clocks.max.sm") == 1980


def _memory(total, used, reserved=None):
    return types.SimpleNamespace(total=total, used=used, free=total - used, reserved=reserved)


def test_an_old_driver_is_asked_for_the_v2_memory_structure_once(pynvml):
    def get(h, version=None):
        if version is not None:
            raise NVMLError(13)  # R470: no v2 structure
        return _memory(16 * 2**30, 2**30)

    pynvml.nvmlMemory_v2 = object()
    asked = _counting(pynvml, "nvmlDeviceGetMemoryInfo", get)
    dev = nvml.device(0)
    for _ in range(3):
        got = dev.read(["memory.used", "memory.api"])
        assert got == {"memory.used": 2**30, "memory.api": "v1"}
    assert asked.count(pynvml.nvmlMemory_v2) == 1 and dev.memory_api == "v1"


def test_process_rows_are_bounded_by_the_last_memory_reading_or_one_taken_for_them(pynvml):
    asked = _counting(pynvml, "nvmlDeviceGetMemoryInfo", lambda h: _memory(16 * 2**30, 2**30))
    pynvml.nvmlDeviceGetComputeRunningProcesses = lambda h: [P(100, 2**30), P(200, 17 * 2**30)]
    pynvml.nvmlDeviceGetGraphicsRunningProcesses = lambda h: []
    dev = nvml.device(0)
    rows = dev.processes()  # no memory read yet: one is taken for the bound
    assert len(asked) == 1 and rows[0].used_memory_bytes == 2**30
    assert is_na(rows[1].used_memory_bytes) and rows[1].used_memory_bytes.code == "implausible"
    assert "more than the GPU's 17179869184 bytes" in rows[1].used_memory_bytes.reason
    dev.read(["memory.used"])
    dev.processes()
    assert len(asked) == 2  # the sampler's memory reading serves the process list


def test_process_list_of_an_unreachable_gpu_is_its_handle_error(pynvml):
    listed = []

    def lost(i):
        raise NVMLError(15)

    pynvml.nvmlDeviceGetHandleByIndex = lost
    pynvml.nvmlDeviceGetComputeRunningProcesses = lambda h: listed.append(h) or [P(100, 2**20)]
    pynvml.nvmlDeviceGetGraphicsRunningProcesses = lambda h: listed.append(h) or []
    assert nvml.device(0).processes() == TRANSLATED[15] and listed == []


def test_a_binding_without_the_compute_list_still_lists_graphics(pynvml):
    dev = _device(pynvml, compute=[], graphics=[P(100, 2**20)])
    del pynvml.nvmlDeviceGetComputeRunningProcesses
    assert dev.processes() == [ProcessRow(100, 2**20, "G")]


def test_c_plus_g_keeps_the_known_figure_when_the_graphics_one_is_not_available(pynvml):
    pynvml.nvmlDeviceGetDriverModel = None
    dev = _device(pynvml, compute=[P(100, 3 * 2**30)], graphics=[P(100, None)])
    assert dev.processes() == [ProcessRow(100, 3 * 2**30, "C+G")]


def test_both_lists_failing_with_a_plain_exception_is_na_and_asked_again(pynvml):
    calls = []

    def fail(h):
        calls.append(h)
        raise RuntimeError("binding broke")

    dev = _device(pynvml, compute=fail, graphics=fail)
    for _ in range(2):
        assert dev.processes() == NA("NVML error: RuntimeError: binding broke", "error")
    assert len(calls) == 4 and dev.lost is None


def test_driver_model_is_remembered_only_once_read(pynvml, monkeypatch):
    monkeypatch.setattr(platform, "SYSTEM", "windows")
    answers = [NVMLError(10), (0, 0)]

    def model(h):
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    pynvml.nvmlDeviceGetDriverModel = model
    dev = nvml.device(0)
    assert dev.driver_model() == TRANSLATED[10]  # a time-out: asked again next time
    assert dev.driver_model() == "WDDM" and dev.driver_model() == "WDDM" and answers == []
