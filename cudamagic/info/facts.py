"""The facts behind ``%cudainfo``, as one plain dict.

:func:`collect` adds the findings and wraps both in the report. No IPython here. It reads
Python, PyTorch, NVML (through :mod:`cudamagic.core.nvml`), the ``nvcc`` on PATH and the
environment, and never raises: a fact that cannot be read is an :class:`~cudamagic.core.na.NA`
with the reason. Parsers live in :mod:`.versions`, ``nvcc`` in :mod:`.nvcc`,
the findings computed from the facts in :mod:`.findings`.

Nothing here creates a CUDA context: per-device PyTorch properties are read
only when ``torch.cuda.is_initialized()`` is already true.
"""

from __future__ import annotations

import os
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor

from ..core import nvml, platform
from ..core.na import NA, is_na
from ..core.nvcc import cuda_home_problem, find_nvcc, nvcc_info
from . import health
from .findings import findings
from .result import CudaInfoReport
from .versions import decode_cudnn_version, parse_cuda_visible_devices, parse_torch_version

ENV_VARS = [
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "PYTORCH_CUDA_ALLOC_CONF",
    "CUDA_LAUNCH_BLOCKING",
    "CUDA_HOME",
    "CUDA_PATH",
    "PYTORCH_NVML_BASED_CUDA_CHECK",
    "NVIDIA_VISIBLE_DEVICES",
]


def _python_facts(env):
    path = env.get("PATH")
    shell_python = shutil.which("python3", path=path) or shutil.which("python", path=path)
    return {
        "executable": sys.executable,
        "version": sys.version.split()[0],
        "prefix": sys.prefix,
        "shell_python": shell_python or NA("no python or python3 on PATH", "not_installed"),
    }


def _torch_facts():
    try:
        import torch
    except Exception as exc:  # ImportError, or a broken install
        na = NA(
            f"PyTorch is not importable in this interpreter ({type(exc).__name__}: {exc})",
            "not_installed",
        )
        return {"installed": False, "error": na}
    cuda = torch.version.cuda

    def safe(fn, default_reason):
        try:
            return fn()
        except Exception as exc:
            return NA(f"{default_reason}: {type(exc).__name__}: {exc}")  # code "error"

    def cudnn():
        import torch.backends.cudnn as c

        return decode_cudnn_version(c.version() if c.is_available() else None)

    def nccl():
        if not cuda:
            return NA("no NCCL in a build without CUDA", "not_available")
        v = torch.cuda.nccl.version()
        return ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)

    facts = {
        "installed": True,
        "version": str(torch.__version__),
        "variant": parse_torch_version(torch.__version__),
        "file": torch.__file__,
        "cuda_build": cuda or NA("this PyTorch build has no CUDA support", "not_available"),
        "hip_build": torch.version.hip or NA("not a ROCm build", "not_available"),
        "cudnn": safe(cudnn, "cuDNN version unreadable"),
        "nccl": safe(nccl, "NCCL version unreadable"),
        "cuda_available": safe(torch.cuda.is_available, "torch.cuda.is_available() failed"),
        "device_count": safe(torch.cuda.device_count, "torch.cuda.device_count() failed"),
        "arch_list": safe(torch.cuda.get_arch_list, "torch.cuda.get_arch_list() failed"),
        "cuda_initialized": safe(torch.cuda.is_initialized, "torch.cuda.is_initialized() failed"),
    }
    devices = []
    if facts["cuda_initialized"] is True:  # reading properties is free only once CUDA is up
        for i in range(int(facts["device_count"] or 0)):

            def props(i=i):
                p = torch.cuda.get_device_properties(i)
                uuid = str(getattr(p, "uuid", "")) or None
                if uuid and not uuid.startswith(("GPU-", "MIG-")):
                    uuid = "GPU-" + uuid
                bus = None
                if hasattr(p, "pci_bus_id"):
                    domain, device = getattr(p, "pci_domain_id", 0), getattr(p, "pci_device_id", 0)
                    bus = f"{domain:08X}:{p.pci_bus_id:02X}:{device:02X}.0"
                return {
                    "ordinal": i,
                    "name": p.name,
                    "uuid": uuid,
                    "pci.bus_id": bus,
                    "multiprocessor_count": int(p.multi_processor_count),
                    "total_memory": int(p.total_memory),
                    "compute_cap": f"{p.major}.{p.minor}",
                }

            devices.append(safe(props, f"properties of CUDA device {i} unreadable"))
    return {**facts, "devices": devices}


GPU_FIELDS = [
    "name",
    "uuid",
    "pci.bus_id",
    "compute_cap",
    "memory.total",
    "memory.used",
    "memory.free",
    "memory.reserved",
    "memory.api",
    "utilization.gpu",
    "temperature.gpu",
    "power.draw",
    "power.limit",
    "persistence_mode",
    "mig.mode.current",
    "driver_model.current",
]


def _gpu_facts(count):
    gpus = []
    for i in range(count):
        dev = nvml.device(i)
        row = {"index": i}
        row.update(dev.read(GPU_FIELDS))
        if dev.lost is None:
            row.update(health.read_health(dev))
        if row.get("mig.mode.current") == "Enabled":
            row["mig_devices"] = dev.mig_devices()
            if is_na(row["utilization.gpu"]):
                row["utilization.gpu"] = NA("not reported in MIG mode", "mig")
        else:
            row["mig_devices"] = []
        gpus.append(row)
    return gpus


def map_cuda_ordinals(gpus, env, torch_devices=()):
    """Give each NVML GPU the CUDA ordinal PyTorch uses for it (in place), by UUID or PCI bus id.

    Args:
        gpus: list of GPU dicts with ``index`` (0-based NVML index), ``uuid``, ``pci.bus_id``,
            ``name``, ``mig_devices``.
        env: mapping with ``CUDA_VISIBLE_DEVICES`` / ``CUDA_DEVICE_ORDER``.
        torch_devices: per-ordinal properties from an already-initialised CUDA (``uuid``,
            ``pci.bus_id``); when given they decide the mapping exactly.

    Sets ``cuda_ordinal`` (int, or NA saying why: hidden by CUDA_VISIBLE_DEVICES, uncertain order)
    and ``mapping_source``. Returns a dict with ``certain`` (bool) and ``note``.
    """
    for g in gpus:
        g["cuda_ordinal"] = NA("not visible to CUDA", "hidden")
        g["mapping_source"] = ""
    valid_torch = [d for d in torch_devices if isinstance(d, dict)]
    if valid_torch:
        for d in valid_torch:
            for g in gpus:
                if d.get("uuid") and d["uuid"] == g.get("uuid"):  # an NA uuid equals no string
                    g["cuda_ordinal"], g["mapping_source"] = (
                        d["ordinal"],
                        "UUID (from initialised CUDA)",
                    )
                elif (
                    d.get("pci.bus_id")
                    and not is_na(g.get("pci.bus_id"))
                    and d["pci.bus_id"].lower() == str(g["pci.bus_id"]).lower()
                ):
                    g["cuda_ordinal"], g["mapping_source"] = (
                        d["ordinal"],
                        "PCI bus id (from initialised CUDA)",
                    )
        return {"certain": True, "note": "mapped from the running CUDA context by UUID"}

    def bus_key(g):
        b = g.get("pci.bus_id")
        return (
            (0, str(b).lower()) if not is_na(b) else (1, g["index"])
        )  # no bus id: after, in NVML order

    if not gpus:
        return {"certain": True, "note": "no GPU visible to NVML: nothing to map"}
    pci_order = sorted(gpus, key=bus_key)
    order_env = (env.get("CUDA_DEVICE_ORDER") or "FASTEST_FIRST").upper()
    names = {str(g.get("name")) for g in gpus}
    certain = True
    note = "CUDA_DEVICE_ORDER=PCI_BUS_ID: CUDA enumerates in PCI bus order"
    if order_env != "PCI_BUS_ID":
        if len(names) > 1:
            certain = False
            note = (
                "CUDA_DEVICE_ORDER is FASTEST_FIRST (the default) and the GPUs differ: CUDA may "
                "put the fastest "
                "first, so ordinals can differ from nvidia-smi indices"
            )
        else:
            note = "identical GPUs: FASTEST_FIRST order equals PCI bus order"
    cvd = parse_cuda_visible_devices(env.get("CUDA_VISIBLE_DEVICES"))
    if not cvd["set"]:
        visible = list(pci_order)
    else:
        visible = []
        repeated = cvd["repeated"]
        if repeated is not None:  # as torch.cuda._parse_visible_devices reads CUDA: no GPU at all
            for g in gpus:
                g["cuda_ordinal"] = NA(
                    f"hidden: CUDA_VISIBLE_DEVICES repeats {repeated}, so CUDA sees no GPU",
                    "hidden",
                )
            return {
                "certain": True,
                "note": f"CUDA_VISIBLE_DEVICES repeats {repeated}: CUDA sees no GPU",
            }
        for e in cvd["entries"]:
            match = None
            if e["kind"] == "index":
                if e["value"] < len(pci_order):
                    match = pci_order[e["value"]]
            elif e["kind"] == "uuid":
                # an unreadable uuid reads "n/a", which no "GPU-..." entry starts
                hits = [
                    g for g in gpus if str(g.get("uuid")).lower().startswith(e["value"].lower())
                ]
                match = hits[0] if len(hits) == 1 else None
            else:  # MIG
                for g in gpus:
                    migs = g.get("mig_devices") or []  # NA (unreadable) is falsy
                    if any(str(m.get("uuid")).lower().startswith(e["value"].lower()) for m in migs):
                        match = g
                        g["cuda_mig_uuid"] = e["value"]
            if match is None:
                break  # CUDA stops at the first entry it cannot resolve
            if match not in visible:
                visible.append(match)
        if cvd["hides_all"]:
            for g in gpus:
                g["cuda_ordinal"] = NA("hidden: CUDA_VISIBLE_DEVICES hides every GPU", "hidden")
            return {"certain": True, "note": "CUDA_VISIBLE_DEVICES hides every GPU"}
    for ordinal, g in enumerate(visible):
        if certain:
            g["cuda_ordinal"] = ordinal
            g["mapping_source"] = "UUID/PCI bus id via CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER"
        else:
            g["cuda_ordinal"] = NA(
                f"probably {ordinal}; uncertain until CUDA is initialised (set "
                "CUDA_DEVICE_ORDER=PCI_BUS_ID to make it certain)",
                "uncertain",
            )
    for g in gpus:
        if g not in visible:  # still the "not visible to CUDA" set above
            g["cuda_ordinal"] = NA("hidden by CUDA_VISIBLE_DEVICES", "hidden")
    return {"certain": certain, "note": note}


def _windows_facts(env) -> dict:
    """Windows only.

    Every ``nvidia-smi.exe`` / ``nvml.dll`` copy the driver installs can leave (System32, the legacy
    NVSMI folder, each DriverStore package, leftovers of earlier drivers) with the driver version
    each belongs to, and the ``nvidia-smi.exe`` a terminal would run (first on PATH).
    """
    return {
        "nvidia-smi": platform.nvidia_tool_copies("nvidia-smi", env),
        "nvml": platform.nvidia_tool_copies("nvml", env),
        "nvidia-smi on PATH": platform.which("nvidia-smi", env)
        or NA("no nvidia-smi.exe on PATH", "not_installed"),
    }


def _env_facts(env):
    out = {k: env.get(k, NA("not set", "not_set")) for k in ENV_VARS}
    for var in ("LD_LIBRARY_PATH", "PATH"):
        entries = [
            p
            for p in env.get(var, "").split(os.pathsep)
            if "cuda" in p.lower() or "nvidia" in p.lower()
        ]
        out[f"{var} (CUDA entries)"] = entries
    return out


def collect(nvcc_timeout_s: float = 5.0, env=None) -> CudaInfoReport:
    """Gather every fact and finding into a :class:`~cudamagic.info.result.CudaInfoReport`.

    Never raises: what cannot be read is NA with the reason. Does not create a CUDA context.
    """
    facts = collect_facts(nvcc_timeout_s, env)
    return CudaInfoReport(facts, findings(facts))


def collect_facts(nvcc_timeout_s: float = 5.0, env=None) -> dict:
    """The raw facts of :func:`collect` as a plain dict.

    Args:
        nvcc_timeout_s: seconds to wait for ``nvcc -V``.
        env: the environment variables to read; default ``os.environ``.

    Returns:
        dict with the sections ``python``, ``torch``, ``driver``, ``toolkit``, ``gpus``,
        ``mapping``, ``windows`` (Windows only), ``env`` and ``cuda_visible_devices``.
    """
    env = dict(os.environ) if env is None else env
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="cudamagic-facts") as pool:
        # `nvcc -V`, the one subprocess, runs while everything else is read
        toolkit = pool.submit(nvcc_info, find_nvcc(env), timeout_s=nvcc_timeout_s)
        python, torch_facts, driver = (
            _python_facts(env),
            _torch_facts(),
            nvml.system_info()._asdict(),
        )
        count = driver["device_count"]
        gpus = _gpu_facts(count) if not is_na(count) else []
        healthy, _lost = health.split_lost(gpus)  # a lost GPU gets no CUDA ordinal
        mapping = map_cuda_ordinals(healthy, env, torch_facts.get("devices", ()))
        driver["nvml_library"] = nvml.library_path()  # NVML unavailable: the status's NA
        windows = {"windows": _windows_facts(env)} if platform.is_windows() else {}
        env_facts = _env_facts(env)
        tk = toolkit.result()
    tk["cuda_home_problem"] = cuda_home_problem(env)
    return {
        "python": python,
        "torch": torch_facts,
        "driver": driver,
        "toolkit": tk,
        "gpus": gpus,
        "mapping": mapping,
        **windows,
        "env": env_facts,
        "cuda_visible_devices": parse_cuda_visible_devices(env.get("CUDA_VISIBLE_DEVICES")),
    }
