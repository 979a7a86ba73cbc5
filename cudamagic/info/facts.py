"""The facts behind ``%cudainfo``, as plain data, and the findings computed from them.

No IPython here. :func:`collect` gathers facts from Python, PyTorch, NVML
(through :mod:`cudamagic.nvml`), the ``nvcc`` on PATH and the environment, and
never raises: a fact that cannot be read is an :class:`~cudamagic.values.NA`
with the reason. :func:`findings` turns facts into diagnostics (severity, cause,
exact fix). Every parser and rule is a plain function with a table-driven test.

Nothing here creates a CUDA context: per-device PyTorch properties are read
only when ``torch.cuda.is_initialized()`` is already true.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

from ..core import nvml
from ..core.na import NA, is_na

# ---------------------------------------------------------------------------------------
# Parsers
# ---------------------------------------------------------------------------------------


def parse_version_tuple(text):
    """``'12.1'`` / ``'12.1.105'`` -> ``(12, 1)``; NA or None stays as is; garbage -> None."""
    if text is None or is_na(text):
        return None
    m = re.match(r"^\s*(\d+)\.(\d+)", str(text))
    return (int(m.group(1)), int(m.group(2))) if m else None


def parse_torch_version(version: str) -> dict:
    """Split ``torch.__version__`` into release and variant.

    ``'2.3.1+cpu'`` -> ``{"release": "2.3.1", "variant": "cpu", "kind": "cpu"}``;
    ``'2.4.0+cu121'`` -> kind ``"cuda"``, ``cuda_tag`` ``"12.1"``; ``'2.4.0+rocm6.1'`` -> kind ``"rocm"``;
    ``'2.5.0'`` (PyPI default wheel, CUDA on Linux x86) -> variant ``""``, kind ``"default"``;
    ``'2.6.0a0+git1234'`` (source build) -> kind ``"source"``.
    """
    version = str(version)
    release, _, local = version.partition("+")
    out = {"release": release, "variant": local, "kind": "default", "cuda_tag": None}
    if local == "cpu" or local.startswith("cpu"):
        out["kind"] = "cpu"
    elif re.fullmatch(r"cu\d{3,4}", local):
        digits = local[2:]
        out["kind"] = "cuda"
        out["cuda_tag"] = f"{int(digits[:-1])}.{digits[-1]}"
    elif local.startswith("rocm"):
        out["kind"] = "rocm"
    elif local.startswith("git") or "a0" in release:
        out["kind"] = "source"
    return out


def decode_cudnn_version(value):
    """Decode ``torch.backends.cudnn.version()``'s integer into ``'major.minor.patch'``.

    cuDNN 7 and 8 encode ``major*1000 + minor*100 + patch`` (``7605`` -> ``'7.6.5'``,
    ``8902`` -> ``'8.9.2'``); cuDNN 9 encodes ``major*10000 + minor*100 + patch``
    (``90100`` -> ``'9.1.0'``, ``91002`` -> ``'9.10.2'``). None (no cuDNN) -> NA.
    """
    if value is None:
        return NA("PyTorch has no cuDNN: CPU build, or cuDNN not loaded", "not_available")
    if is_na(value):
        return value
    try:
        v = int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: int(float("inf"))
        return NA(f"unreadable cuDNN version {value!r}", "error")
    if v <= 0:
        return NA(f"unreadable cuDNN version {value!r}", "error")
    if v >= 90000:
        return f"{v // 10000}.{(v % 10000) // 100}.{v % 100}"
    return f"{v // 1000}.{(v % 1000) // 100}.{v % 100}"


def parse_nvcc_version(text):
    """Parse ``nvcc -V`` output: ``'... release 13.0, V13.0.88'`` -> ``{"release": "13.0", "build": "13.0.88"}``.

    Returns NA when the text does not look like ``nvcc -V`` output.
    """
    if not isinstance(text, str):
        return NA("nvcc printed no text", "error")
    m = re.search(r"release\s+(\d+\.\d+)\s*,\s*V(\d+\.\d+(?:\.\d+)?)", text)
    if m:
        return {"release": m.group(1), "build": m.group(2)}
    m = re.search(r"release\s+(\d+\.\d+)", text)
    if m:
        return {"release": m.group(1), "build": NA("no V<build> in nvcc output", "error")}
    snippet = text.strip().splitlines()[0][:80] if text.strip() else "(empty)"
    return NA(f"unrecognised `nvcc -V` output: {snippet!r}", "error")


_UUID_RE = re.compile(r"^(GPU|MIG)-[0-9a-fA-F-]+(?:/\d+/\d+)?$")


def parse_cuda_visible_devices(value):
    """Parse ``CUDA_VISIBLE_DEVICES`` as the CUDA runtime does.

    Args:
        value: the variable's text, or None when unset.

    Returns:
        dict: ``set`` (bool), ``raw``, ``entries`` (list of ``{"kind": "index"|"uuid"|"mig", "value": str|int}``
        that CUDA will honour, in order), ``ignored`` (entries after the first invalid one, which CUDA drops
        silently), ``invalid`` (the first invalid entry or None), ``hides_all`` (bool: empty, ``-1``, or the first
        entry invalid). A leading ``GPU-``/``MIG-`` prefix marks UUID forms; CUDA accepts unique UUID prefixes.
    """
    out = {"set": value is not None, "raw": value, "entries": [], "ignored": [], "invalid": None,
           "hides_all": False}
    if value is None:
        return out
    parts = [p.strip() for p in value.split(",")]
    if value.strip() == "" or parts == [""]:
        out["hides_all"] = True
        return out
    for i, p in enumerate(parts):
        entry = None
        if re.fullmatch(r"\d+", p):
            entry = {"kind": "index", "value": int(p)}
        elif p.upper().startswith("MIG-") and len(p) > 4:
            entry = {"kind": "mig", "value": p}
        elif p.upper().startswith("GPU-") and len(p) > 4:
            entry = {"kind": "uuid", "value": p}
        if entry is None:
            out["invalid"] = p
            out["ignored"] = parts[i + 1:]
            break
        out["entries"].append(entry)
    if not out["entries"]:
        out["hides_all"] = True
    return out


# ---------------------------------------------------------------------------------------
# Collection
# ---------------------------------------------------------------------------------------

_nvcc_cache = {}

ENV_VARS = ["CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "PYTORCH_CUDA_ALLOC_CONF", "CUDA_LAUNCH_BLOCKING",
            "CUDA_HOME", "CUDA_PATH", "PYTORCH_NVML_BASED_CUDA_CHECK", "NVIDIA_VISIBLE_DEVICES"]


def find_nvcc(env=None):
    """Path of ``nvcc``: ``$CUDA_HOME/bin/nvcc``, ``$CUDA_PATH/bin/nvcc``, then PATH; NA if none."""
    env = os.environ if env is None else env
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = env.get(var)
        if home:
            cand = os.path.join(home, "bin", "nvcc")
            if os.path.isfile(cand) and os.access(cand, os.X_OK):
                return cand
    found = shutil.which("nvcc", path=env.get("PATH"))
    if found:
        return found
    return NA("not installed; not needed to run PyTorch (only to compile CUDA extensions)", "not_installed")


_NVCC_OUTPUT_LIMIT = 64 * 1024  # bytes of `nvcc -V` output kept; the rest is discarded


def _run_capped(argv, timeout_s):
    """Run ``argv`` in its own process group; return ``(returncode, text)`` with output capped.

    Raises ``subprocess.TimeoutExpired`` after ``timeout_s`` seconds, having killed the whole group
    (so a wrapper script's children do not survive).
    """
    import signal
    import tempfile

    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                proc.kill()
            proc.wait()
            raise
        out.seek(0)
        text = out.read(_NVCC_OUTPUT_LIMIT).decode("utf-8", "replace")
    return proc.returncode, text


def nvcc_info(path=None, timeout_s: float = 5.0) -> dict:
    """Run ``<path> -V`` (time limit ``timeout_s`` seconds) and parse it.

    Successful and unparseable answers are cached per (path, mtime, size); a time-out is not, so a
    later call with a longer limit tries again. Output beyond 64 KiB is discarded and the process
    group is killed on time-out.

    Returns ``{"path", "release", "build"}``; each may be NA (not installed, timed out, failed, garbage).
    """
    path = find_nvcc() if path is None else path
    if is_na(path):
        return {"path": path, "release": path, "build": path}
    try:
        st = os.stat(path)
        key = (path, st.st_mtime_ns, st.st_size)
    except OSError as exc:
        na = NA(f"cannot stat {path}: {exc}", "error")
        return {"path": path, "release": na, "build": na}
    if key in _nvcc_cache:
        return dict(_nvcc_cache[key])
    cache = True
    try:
        code, text = _run_capped([path, "-V"], timeout_s)
        if code != 0:
            first = text.strip().splitlines()[0][:120] if text.strip() else "no output"
            parsed = NA(f"`{path} -V` failed with exit status {code}: {first}", "error")
        else:
            parsed = parse_nvcc_version(text)
    except subprocess.TimeoutExpired:
        parsed = NA(f"`{path} -V` did not answer within {timeout_s:g} s "
                    "(raise %config CudaMagics.nvcc_timeout_s to wait longer)", "timeout")
        cache = False
    except OSError as exc:
        parsed = NA(f"cannot run {path}: {exc}", "error")
    if is_na(parsed):
        result = {"path": path, "release": parsed, "build": parsed}
    else:
        result = {"path": path, **parsed}
    if cache:
        _nvcc_cache[key] = result
    return dict(result)


def cuda_home_problem(env):
    """NA-free check of ``CUDA_HOME``/``CUDA_PATH``: a message when one is set but has no runnable
    ``bin/nvcc`` (``torch.utils.cpp_extension`` builds with ``CUDA_HOME``), else None."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = env.get(var)
        if not home:
            continue
        if not os.path.isdir(home):
            return var, f"{var}={home} does not exist"
        nvcc = os.path.join(home, "bin", "nvcc")
        if not os.path.isfile(nvcc):
            return var, f"{var}={home} has no bin/nvcc"
        if not os.access(nvcc, os.X_OK):
            return var, f"{nvcc} is not executable"
    return None


def _env_root(python_path):
    """The environment a Python executable belongs to: its venv folder (with pyvenv.cfg) or its real path."""
    bindir = os.path.dirname(os.path.abspath(python_path))
    root = os.path.dirname(bindir)
    if os.path.isfile(os.path.join(root, "pyvenv.cfg")):
        return os.path.realpath(root)
    real = os.path.realpath(python_path)
    return os.path.realpath(os.path.dirname(os.path.dirname(real)))


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
        na = NA(f"PyTorch is not importable in this interpreter ({type(exc).__name__}: {exc})", "not_installed")
        return {"installed": False, "error": na}
    facts = {"installed": True}

    def safe(fn, default_reason):
        try:
            return fn()
        except Exception as exc:
            return NA(f"{default_reason}: {type(exc).__name__}: {exc}", "error")

    facts["version"] = str(torch.__version__)
    facts["variant"] = parse_torch_version(torch.__version__)
    facts["file"] = getattr(torch, "__file__", None) or NA("unknown", "error")
    cuda = getattr(torch.version, "cuda", None)
    facts["cuda_build"] = cuda if cuda else NA("this PyTorch build has no CUDA support", "not_available")
    hip = getattr(torch.version, "hip", None)
    facts["hip_build"] = hip if hip else NA("not a ROCm build", "not_available")

    def cudnn():
        import torch.backends.cudnn as c
        return decode_cudnn_version(c.version() if c.is_available() else None)

    facts["cudnn"] = safe(cudnn, "cuDNN version unreadable")

    def nccl():
        if not cuda:
            return NA("no NCCL in a build without CUDA", "not_available")
        v = torch.cuda.nccl.version()
        return ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)

    facts["nccl"] = safe(nccl, "NCCL version unreadable")
    facts["cuda_available"] = safe(torch.cuda.is_available, "torch.cuda.is_available() failed")
    facts["device_count"] = safe(torch.cuda.device_count, "torch.cuda.device_count() failed")
    facts["arch_list"] = safe(torch.cuda.get_arch_list, "torch.cuda.get_arch_list() failed")
    facts["cuda_initialized"] = bool(safe(torch.cuda.is_initialized, "x") is True)
    devices = []
    if facts["cuda_initialized"]:  # reading properties is free only once CUDA is up
        for i in range(int(facts["device_count"] or 0)):
            def props(i=i):
                p = torch.cuda.get_device_properties(i)
                uuid = str(getattr(p, "uuid", "")) or None
                if uuid and not uuid.startswith(("GPU-", "MIG-")):
                    uuid = "GPU-" + uuid
                bus = None
                if hasattr(p, "pci_bus_id"):
                    bus = f"{getattr(p, 'pci_domain_id', 0):08X}:{p.pci_bus_id:02X}:{getattr(p, 'pci_device_id', 0):02X}.0"
                return {"ordinal": i, "name": p.name, "uuid": uuid, "pci.bus_id": bus,
                        "multiprocessor_count": int(p.multi_processor_count),
                        "total_memory": int(p.total_memory), "compute_cap": f"{p.major}.{p.minor}"}
            devices.append(safe(props, f"properties of CUDA device {i} unreadable"))
    facts["devices"] = devices
    return facts


GPU_FIELDS = ["name", "uuid", "pci.bus_id", "compute_cap", "memory.total", "memory.used", "memory.free",
              "utilization.gpu", "temperature.gpu", "power.draw", "power.limit", "persistence_mode",
              "mig.mode.current"]


def _gpu_facts(count):
    gpus = []
    for i in range(count):
        dev = nvml.device(i)
        row = {"index": i}
        row.update(dev.read(GPU_FIELDS))
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
        gpus: list of GPU dicts with ``index`` (0-based NVML index), ``uuid``, ``pci.bus_id``, ``name``,
            ``mig_devices``.
        env: mapping with ``CUDA_VISIBLE_DEVICES`` / ``CUDA_DEVICE_ORDER``.
        torch_devices: per-ordinal properties from an already-initialised CUDA (``uuid``, ``pci.bus_id``);
            when given they decide the mapping exactly.

    Sets ``cuda_ordinal`` (int, or NA saying why: hidden by CUDA_VISIBLE_DEVICES, uncertain order) and
    ``mapping_source``. Returns a dict with ``certain`` (bool) and ``note``.
    """
    for g in gpus:
        g["cuda_ordinal"] = NA("not visible to CUDA", "hidden")
        g["mapping_source"] = ""
    valid_torch = [d for d in torch_devices if isinstance(d, dict)]
    if valid_torch:
        for d in valid_torch:
            for g in gpus:
                if d.get("uuid") and not is_na(g.get("uuid")) and d["uuid"] == g["uuid"]:
                    g["cuda_ordinal"], g["mapping_source"] = d["ordinal"], "UUID (from initialised CUDA)"
                elif d.get("pci.bus_id") and not is_na(g.get("pci.bus_id")) and \
                        d["pci.bus_id"].lower() == str(g["pci.bus_id"]).lower():
                    g["cuda_ordinal"], g["mapping_source"] = d["ordinal"], "PCI bus id (from initialised CUDA)"
        return {"certain": True, "note": "mapped from the running CUDA context by UUID"}

    def bus_key(g):
        b = g.get("pci.bus_id")
        return (0, str(b).lower()) if not is_na(b) else (1, str(g["index"]))

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
            note = ("CUDA_DEVICE_ORDER is FASTEST_FIRST (the default) and the GPUs differ: CUDA may put the fastest "
                    "first, so ordinals can differ from nvidia-smi indices")
        else:
            note = "identical GPUs: FASTEST_FIRST order equals PCI bus order"
    cvd = parse_cuda_visible_devices(env.get("CUDA_VISIBLE_DEVICES"))
    if not cvd["set"]:
        visible = list(pci_order)
    else:
        visible = []
        for e in cvd["entries"]:
            match = None
            if e["kind"] == "index":
                if e["value"] < len(pci_order):
                    match = pci_order[e["value"]]
            elif e["kind"] == "uuid":
                hits = [g for g in gpus if not is_na(g.get("uuid")) and str(g["uuid"]).lower().startswith(e["value"].lower())]
                match = hits[0] if len(hits) == 1 else None
            else:  # MIG
                for g in gpus:
                    migs = g.get("mig_devices") or []
                    if not is_na(migs) and any(str(m.get("uuid", "")).lower().startswith(e["value"].lower()) for m in migs):
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
            g["cuda_ordinal"] = NA(f"probably {ordinal}; uncertain until CUDA is initialised (set "
                                   "CUDA_DEVICE_ORDER=PCI_BUS_ID to make it certain)", "uncertain")
    for g in gpus:
        if g not in visible and is_na(g["cuda_ordinal"]) and g["cuda_ordinal"].code == "hidden":
            g["cuda_ordinal"] = NA("hidden by CUDA_VISIBLE_DEVICES", "hidden")
    return {"certain": certain, "note": note}


def _env_facts(env):
    out = {k: env.get(k, NA("not set", "not_set")) for k in ENV_VARS}
    for var in ("LD_LIBRARY_PATH", "PATH"):
        entries = [p for p in env.get(var, "").split(os.pathsep) if p and re.search(r"cuda|nvidia", p, re.I)]
        out[f"{var} (CUDA entries)"] = entries
    return out


def collect(nvcc_timeout_s: float = 5.0, env=None):
    """Gather every fact and finding; returns a :class:`cudamagic.render.CudaInfoReport`.

    Never raises: what cannot be read is NA with the reason. Does not create a CUDA context.
    """
    from .report import CudaInfoReport

    facts = collect_facts(nvcc_timeout_s=nvcc_timeout_s, env=env)
    return CudaInfoReport(facts, findings(facts))


def collect_facts(nvcc_timeout_s: float = 5.0, env=None) -> dict:
    """The raw facts of :func:`collect` as a plain dict (sections ``python``, ``torch``, ``driver``,
    ``toolkit``, ``gpus``, ``mapping``, ``env``)."""
    env = dict(os.environ) if env is None else env
    facts = {"python": _python_facts(env), "torch": _torch_facts(), "driver": nvml.system_info()}
    facts["toolkit"] = nvcc_info(find_nvcc(env), timeout_s=nvcc_timeout_s)
    facts["toolkit"]["cuda_home_problem"] = cuda_home_problem(env)
    count = facts["driver"]["device_count"]
    facts["gpus"] = _gpu_facts(count) if not is_na(count) else []
    facts["mapping"] = map_cuda_ordinals(facts["gpus"], env, facts["torch"].get("devices", ()))
    facts["env"] = _env_facts(env)
    facts["cuda_visible_devices"] = parse_cuda_visible_devices(env.get("CUDA_VISIBLE_DEVICES"))
    return facts


# ---------------------------------------------------------------------------------------
# Findings
# ---------------------------------------------------------------------------------------

SEVERITIES = ("error", "warning", "info", "ok")

#: CUDA versions PyTorch publishes wheels for (download index suffix ``cuXYZ``).
WHEEL_CUDA = [(11, 8), (12, 1), (12, 4), (12, 6), (12, 8), (12, 9), (13, 0)]
#: Minimum Linux driver for each CUDA major (CUDA minor version compatibility), from NVIDIA's release notes.
MIN_DRIVER = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}


@dataclass(frozen=True)
class Finding:
    """One diagnostic: ``severity`` (error|warning|info|ok), ``id``, ``title``, ``cause`` (one sentence), ``fix``."""

    severity: str
    id: str
    title: str
    cause: str
    fix: str = ""

    def to_dict(self):
        return {"severity": self.severity, "id": self.id, "title": self.title, "cause": self.cause, "fix": self.fix}


def best_wheel_for_driver(driver_cuda):
    """The PyTorch wheel CUDA variant to recommend for a driver supporting CUDA ``driver_cuda`` (major, minor).

    The newest wheel not newer than the driver's CUDA (``(12, 4)`` -> ``'cu124'``); when the driver's major has
    only newer minors, the oldest of them, which runs through CUDA minor version compatibility (``(11, 4)`` ->
    ``'cu118'``). Returns ``'cuXYZ'``, or None when the driver predates every published wheel.
    """
    if driver_cuda is None:
        return None
    not_newer = [w for w in WHEEL_CUDA if w <= driver_cuda]
    same_major_not_newer = [w for w in not_newer if w[0] == driver_cuda[0]]
    same_major = [w for w in WHEEL_CUDA if w[0] == driver_cuda[0]]
    if same_major_not_newer:
        pick = max(same_major_not_newer)
    elif same_major:  # minor version compatibility: e.g. cu118 runs on an 11.4 driver
        pick = min(same_major)
    else:
        pick = max(not_newer, default=None)
    return f"cu{pick[0]}{pick[1]}" if pick else None


def _install_cmd(tag):
    return f"pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/{tag}"


def arch_supported(cc: str, arch_list) -> bool:
    """True if a build with ``arch_list`` (``torch.cuda.get_arch_list()``) has kernels for compute capability ``cc``.

    A cubin ``sm_XY`` runs on the same major with minor >= Y; PTX ``compute_XY`` JIT-compiles for any cc >= X.Y.
    """
    v = parse_version_tuple(cc)
    if v is None:
        return True
    for arch in arch_list or ():
        m = re.fullmatch(r"(sm|compute)_(\d+)(\d)[a-z]?", arch)
        if not m:
            continue
        a = (int(m.group(2)), int(m.group(3)))
        if m.group(1) == "sm" and a[0] == v[0] and a[1] <= v[1]:
            return True
        if m.group(1) == "compute" and a <= v:
            return True
    return False


def findings(facts: dict) -> list:
    """Diagnostics computed from :func:`collect_facts`'s dict; the last one is the overall verdict."""
    out = []
    t, drv, tk, gpus = facts["torch"], facts["driver"], facts["toolkit"], facts["gpus"]
    nvml_ok = drv["status"] == "ok"
    n_gpus = len(gpus)
    driver_cuda = parse_version_tuple(drv["cuda_driver_version"]) if nvml_ok else None
    if not t["installed"]:
        out.append(Finding("error", "torch-missing", "PyTorch is not installed in this kernel",
                           t["error"].reason,
                           "pip install torch  (in the kernel's interpreter: %pip install torch)"))
    build = parse_version_tuple(t.get("cuda_build")) if t["installed"] else None
    cpu_only = t["installed"] and build is None and is_na(t.get("hip_build"))

    # NVML availability (F01, F02)
    if not nvml_ok:
        st = drv["status"]
        sev = "error" if st.code == "version_mismatch" else ("warning" if build else "info")
        fix = {"no_driver": "install the NVIDIA driver for your GPU (nvidia-smi must work), or ignore this on a "
                            "machine without an NVIDIA GPU",
               "version_mismatch": "sudo reboot  (or: sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && "
                                   "sudo modprobe nvidia)",
               "no_binding": "pip install nvidia-ml-py"}.get(st.code, "check that `nvidia-smi` works")
        out.append(Finding(sev, "nvml-unavailable", "NVML not available: no GPU data", st.reason, fix))

    # F17 CPU-only wheel on a GPU machine
    if cpu_only and n_gpus:
        tag = best_wheel_for_driver(driver_cuda)
        fix = _install_cmd(tag) if tag else "update the NVIDIA driver, then install a CUDA build of PyTorch"
        out.append(Finding(
            "error", "cpu-only-build",
            "GPU and driver found, but this PyTorch build has no CUDA support",
            f"torch {t['version']} is a CPU-only build (torch.version.cuda is None) while NVML sees {n_gpus} GPU(s) "
            f"and the driver supports CUDA {drv['cuda_driver_version']}.",
            fix))

    # F19 driver too old for the build
    if build and driver_cuda:
        if build[0] > driver_cuda[0]:
            tag = best_wheel_for_driver(driver_cuda)
            alt = f"; or install a wheel built for CUDA {driver_cuda[0]}.x: {_install_cmd(tag)}" if tag else ""
            out.append(Finding(
                "error", "driver-too-old", "The NVIDIA driver is too old for this PyTorch build",
                f"PyTorch was built with CUDA {t['cuda_build']} but driver {drv['driver_version']} supports CUDA up to "
                f"{drv['cuda_driver_version']} (nvmlSystemGetCudaDriverVersion).",
                f"update the NVIDIA driver to {MIN_DRIVER.get(build[0], 'a newer release')} or newer{alt}. "
                "Installing a CUDA toolkit does not help: PyTorch ships its own CUDA runtime."))
        elif build > driver_cuda:
            out.append(Finding(
                "warning", "driver-minor-older",
                "The driver's CUDA is older than the build's, within the same major",
                f"PyTorch was built with CUDA {t['cuda_build']}; the driver supports {drv['cuda_driver_version']}. "
                "Minor version compatibility usually makes this work, but PTX JIT and some newer features may fail.",
                "update the NVIDIA driver if you see 'PTX was compiled with an unsupported toolchain' errors"))

    # F16 toolkit vs build
    nv = parse_version_tuple(tk["release"])
    if is_na(tk["path"]):
        out.append(Finding("info", "nvcc-missing", "No CUDA toolkit (nvcc) found",
                           "nvcc is not installed; it is not needed to run PyTorch, only to compile CUDA extensions.",
                           ""))
    elif is_na(tk["release"]):
        out.append(Finding("warning", "nvcc-unreadable", "nvcc did not report its version", tk["release"].reason,
                           f"run `{tk['path']} -V` in a terminal to see what is wrong"))
    if tk.get("cuda_home_problem"):
        var, what = tk["cuda_home_problem"]
        out.append(Finding("warning", "cuda-home", f"{var} points to no usable CUDA toolkit",
                           f"{what}; torch.utils.cpp_extension compiles with {var}, so building CUDA extensions "
                           "will fail (running PyTorch is not affected).",
                           f"unset {var}, or point it to a toolkit folder that contains bin/nvcc "
                           "(e.g. /usr/local/cuda)"))
    if nv and build and nv[:2] != build[:2]:
        out.append(Finding(
            "info", "toolkit-differs", "The CUDA toolkit on PATH differs from PyTorch's CUDA",
            f"nvcc {tk['release']} at {tk['path']} vs PyTorch's CUDA {t['cuda_build']}: this only matters when "
            "compiling CUDA extensions (torch.utils.cpp_extension), which may then fail.",
            f"to build extensions, install CUDA toolkit {t['cuda_build']} and set CUDA_HOME to it"))

    # architectures
    arch = t.get("arch_list") if t["installed"] else None
    if build and isinstance(arch, list) and arch:
        for g in gpus:
            cc = g.get("compute_cap")
            if not is_na(cc) and not arch_supported(cc, arch):
                out.append(Finding(
                    "error", "no-kernel-image", f"GPU {g['index']} ({g['name']}) is not supported by this build",
                    f"its compute capability {cc} has no kernels in this build's architectures ({', '.join(arch)}): "
                    "'no kernel image is available for execution on the device'.",
                    "install a PyTorch build that includes sm_" + cc.replace(".", "")
                    + " (a newer wheel for new GPUs, an older one for old GPUs)"))

    # CUDA_VISIBLE_DEVICES
    cvd = facts["cuda_visible_devices"]
    if cvd["set"] and cvd["hides_all"]:
        out.append(Finding("warning", "cvd-hides-all", "CUDA_VISIBLE_DEVICES hides every GPU",
                           f"CUDA_VISIBLE_DEVICES={cvd['raw']!r} leaves no device visible to CUDA.",
                           "unset it (os.environ.pop('CUDA_VISIBLE_DEVICES') before importing torch, then restart "
                           "the kernel) or list the GPUs to use, e.g. CUDA_VISIBLE_DEVICES=0"))
    elif cvd["set"] and not nvml_ok and cvd["invalid"]:
        out.append(Finding("warning", "cvd-unknown", "CUDA_VISIBLE_DEVICES has an entry CUDA cannot parse",
                           f"{cvd['invalid']!r} in CUDA_VISIBLE_DEVICES={cvd['raw']!r} is neither an index, a GPU- "
                           "nor a MIG- UUID; CUDA ignores it and every entry after it.",
                           "use indices or UUIDs from `nvidia-smi -L`, separated by commas"))
    elif cvd["set"] and nvml_ok:
        bad = [str(e["value"]) for e in cvd["entries"]
               if (e["kind"] == "index" and e["value"] >= n_gpus)
               or (e["kind"] == "uuid" and not any(str(g.get("uuid", "")).lower().startswith(e["value"].lower()) for g in gpus))
               or (e["kind"] == "mig" and not any(g.get("cuda_mig_uuid") == e["value"] for g in gpus))]
        if bad or cvd["invalid"]:
            named = ", ".join(bad + ([cvd["invalid"]] if cvd["invalid"] else []))
            out.append(Finding("warning", "cvd-unknown", "CUDA_VISIBLE_DEVICES names GPUs that do not exist",
                               f"{named} in CUDA_VISIBLE_DEVICES={cvd['raw']!r} match no GPU NVML sees ({n_gpus} GPU(s)); "
                               "CUDA ignores that entry and every one after it.",
                               f"use indices 0..{max(n_gpus - 1, 0)} or UUIDs from `nvidia-smi -L`"))

    # index differences
    mapping = facts["mapping"]
    if n_gpus > 1 and not mapping["certain"]:
        out.append(Finding("warning", "index-order", "nvidia-smi indices and PyTorch ordinals may differ",
                           mapping["note"] + ".",
                           "export CUDA_DEVICE_ORDER=PCI_BUS_ID before starting Python (or set it in os.environ "
                           "before importing torch)"))
    elif any(isinstance(g.get("cuda_ordinal"), int) and g["cuda_ordinal"] != g["index"] for g in gpus):
        pairs = ", ".join(f"nvidia-smi {g['index']} = cuda:{g['cuda_ordinal']}" for g in gpus
                          if isinstance(g.get("cuda_ordinal"), int))
        out.append(Finding("info", "index-map", "PyTorch numbers the GPUs differently from nvidia-smi",
                           f"{pairs} (CUDA_VISIBLE_DEVICES renumbers the GPUs it shows from 0).", ""))

    # MIG
    for g in gpus:
        if g.get("mig.mode.current") == "Enabled":
            migs = g.get("mig_devices") or []
            n = 0 if is_na(migs) else len(migs)
            out.append(Finding("info", "mig", f"GPU {g['index']} is in MIG mode ({n} instance(s))",
                               "In MIG mode CUDA sees MIG instances, not the whole GPU, and utilization is not reported.",
                               "select an instance with CUDA_VISIBLE_DEVICES=MIG-<uuid> (see `nvidia-smi -L`)"))

    # CUDA build, GPU present, but not available
    if build and n_gpus and t.get("cuda_available") is False and not any(f.severity == "error" for f in out) \
            and not (cvd["set"] and cvd["hides_all"]):
        out.append(Finding("error", "cuda-unavailable", "torch.cuda.is_available() is False although a GPU is present",
                           "CUDA could not initialise in this process (driver problem, container without GPU access, "
                           "or CUDA failed earlier in this kernel).",
                           "restart the kernel; if it persists run `python -c 'import torch; torch.zeros(1).cuda()'` in a "
                           "terminal to see the CUDA error"))

    # F18 interpreter hint
    py = facts["python"]
    shell_py = py.get("shell_python")
    if not is_na(shell_py) and _env_root(shell_py) != _env_root(py["executable"]):
        out.append(Finding("info", "interpreter", "This kernel runs a different Python from the one on PATH",
                           f"kernel: {py['executable']}; `python` on PATH: {shell_py}. Packages installed with "
                           "`pip` in a terminal may not be visible here.",
                           "install from the notebook with %pip install ..., or register the right interpreter as a "
                           "kernel: python -m ipykernel install --user --name myenv"))

    out.append(_verdict(out, t, n_gpus, cpu_only))
    return out


def _verdict(found, t, n_gpus, cpu_only):
    errors = [f for f in found if f.severity == "error"]
    if errors:
        return Finding("error", "verdict", "Verdict: action needed",
                       f"{len(errors)} problem(s) above stop PyTorch from using the GPU as expected.",
                       errors[0].fix)
    if t["installed"] and t.get("cuda_available") is True:
        return Finding("ok", "verdict", "Verdict: ready",
                       f"PyTorch can use {t.get('device_count')} CUDA device(s).", "")
    if cpu_only and not n_gpus:
        return Finding("ok", "verdict", "Verdict: CPU only",
                       "No NVIDIA GPU is visible here and this PyTorch build is CPU-only; code runs on the CPU.",
                       "")
    return Finding("warning", "verdict", "Verdict: PyTorch will run on the CPU",
                   "No usable CUDA device for PyTorch in this kernel (see the findings above).", "")
