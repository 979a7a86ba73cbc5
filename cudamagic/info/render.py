"""Text (terminal) and HTML (notebook) of the ``%cudainfo`` report."""

from __future__ import annotations

import textwrap

from ..core import style
from ..core.fmt import (
    TEXT_WIDTH,
    display_width,
    esc,
    format_bytes,
    format_value,
    html_table,
    md_code,
    na_cell_html,
    pad,
    terminal_safe,
)
from ..core.na import NA, is_na
from . import health

SEVERITY_ICON = {"error": "✖", "warning": "⚠", "info": "ℹ", "ok": "✔"}
NOT_COLLECTED = NA("not collected", "error")
NO_TORCH = NA("PyTorch is not installed in this kernel", "not_installed")


def fact(section: str, key: str):
    """Getter of ``facts[section][key]``, NA when it was not collected."""
    return lambda facts: facts[section].get(key, NOT_COLLECTED)


def torch_fact(key: str):
    """Getter of a PyTorch fact that reads "PyTorch not installed" when it is not."""

    def get(facts):
        torch = facts["torch"]
        return torch.get(key, NOT_COLLECTED) if torch.get("installed") else NO_TORCH

    return get


def _torch_version(facts):
    torch = facts["torch"]
    return torch["version"] if torch.get("installed") else torch["error"]


def _arch_list(facts):
    arch = torch_fact("arch_list")(facts)
    if is_na(arch):
        return arch
    return " ".join(arch) if arch else NA("no GPU code in this build", "not_available")


def _variant(facts):
    torch = facts["torch"]
    if not torch.get("installed"):
        return torch["error"]
    variant = torch["variant"]
    name = variant["variant"] or "(none)"
    return name if name == variant["kind"] else f"{name} ({variant['kind']})"


def _nvcc(facts):
    toolkit = facts["toolkit"]
    for key in ("path", "release"):
        if is_na(toolkit[key]):
            return toolkit[key]
    return f"{toolkit['release']} (V{toolkit['build']})"


#: (section, label, getter(facts), meaning and source), in display order.
SUMMARY_ROWS = [
    (
        "Python",
        "interpreter",
        fact("python", "executable"),
        "sys.executable: the kernel's Python (may differ from `python` in a shell)",
    ),
    ("Python", "version", fact("python", "version"), "sys.version"),
    (
        "Python",
        "python on PATH",
        fact("python", "shell_python"),
        "shutil.which('python3'): what a terminal would run",
    ),
    ("PyTorch", "version", _torch_version, "torch.__version__"),
    (
        "PyTorch",
        "variant",
        _variant,
        "local version tag: +cpu, +cuXYZ (CUDA X.Y), +rocm, none (default PyPI wheel)",
    ),
    ("PyTorch", "location", torch_fact("file"), "torch.__file__: where torch was imported from"),
    (
        "PyTorch",
        "CUDA it was built with",
        torch_fact("cuda_build"),
        "torch.version.cuda: the CUDA runtime bundled with PyTorch",
    ),
    ("PyTorch", "HIP (ROCm)", torch_fact("hip_build"), "torch.version.hip"),
    ("PyTorch", "cuDNN", torch_fact("cudnn"), "torch.backends.cudnn.version(), decoded"),
    ("PyTorch", "NCCL", torch_fact("nccl"), "torch.cuda.nccl.version()"),
    ("PyTorch", "CUDA available", torch_fact("cuda_available"), "torch.cuda.is_available()"),
    (
        "PyTorch",
        "CUDA devices",
        torch_fact("device_count"),
        "torch.cuda.device_count(): GPUs PyTorch can use (after CUDA_VISIBLE_DEVICES)",
    ),
    (
        "PyTorch",
        "architectures in the build",
        _arch_list,
        "torch.cuda.get_arch_list(): GPU code the build contains",
    ),
    (
        "PyTorch",
        "CUDA initialised in this kernel",
        torch_fact("cuda_initialized"),
        "torch.cuda.is_initialized(); %cudainfo never initialises it",
    ),
    ("Driver", "NVML status", fact("driver", "status"), "pynvml.nvmlInit()"),
    (
        "Driver",
        "driver version",
        fact("driver", "driver_version"),
        "nvmlSystemGetDriverVersion (nvidia-smi header)",
    ),
    (
        "Driver",
        "newest CUDA the driver supports",
        fact("driver", "cuda_driver_version"),
        "nvmlSystemGetCudaDriverVersion, decoded ('CUDA Version' in the nvidia-smi header)",
    ),
    ("Driver", "NVML version", fact("driver", "nvml_version"), "nvmlSystemGetNVMLVersion"),
    (
        "Driver",
        "GPUs seen by NVML",
        fact("driver", "device_count"),
        "nvmlDeviceGetCount: all GPUs, ignoring CUDA_VISIBLE_DEVICES",
    ),
    (
        "Driver",
        "NVML library",
        fact("driver", "nvml_library"),
        "pynvml.nvmlLib: where NVML was loaded from "
        "(System32\\nvml.dll on Windows, libnvidia-ml.so.1 on Linux)",
    ),
    ("Toolkit", "nvcc", _nvcc, "`nvcc -V`: the CUDA toolkit used only to compile extensions"),
    ("Toolkit", "nvcc path", fact("toolkit", "path"), "$CUDA_HOME/bin, $CUDA_PATH/bin, then PATH"),
]

#: (nvidia-smi key, label, source) of each GPU row after the index.
GPU_COLUMNS = [
    ("cuda_ordinal", "cuda:N", "CUDA ordinal PyTorch uses (matched by UUID / PCI bus id)"),
    ("name", "name", "nvmlDeviceGetName"),
    ("uuid", "UUID", "nvmlDeviceGetUUID"),
    ("pci.bus_id", "PCI bus id", "nvmlDeviceGetPciInfo"),
    ("compute_cap", "compute capability", "nvmlDeviceGetCudaComputeCapability"),
    ("memory.total", "memory total", "nvmlDeviceGetMemoryInfo"),
    ("memory.used", "memory used", "nvmlDeviceGetMemoryInfo (all processes)"),
    ("memory.free", "memory free", "nvmlDeviceGetMemoryInfo"),
    (
        "memory.reserved",
        "memory reserved",
        "nvmlDeviceGetMemoryInfo v2: the driver's reserve, not in used",
    ),
    (
        "memory.api",
        "memory read with",
        "v2 (R510+, as nvidia-smi) or legacy v1 (used includes the reserve)",
    ),
    (
        "multiprocessor_count",
        "SMs",
        "torch.cuda.get_device_properties (only once CUDA is initialised)",
    ),
    ("utilization.gpu", "utilization", "nvmlDeviceGetUtilizationRates: % of time a kernel ran"),
    ("temperature.gpu", "temperature", "nvmlDeviceGetTemperature, degrees C"),
    ("power.draw", "power draw", "nvmlDeviceGetPowerUsage"),
    ("power.limit", "power limit", "nvmlDeviceGetEnforcedPowerLimit"),
    ("persistence_mode", "persistence mode", "nvmlDeviceGetPersistenceMode"),
    ("mig.mode.current", "MIG mode", "nvmlDeviceGetMigMode"),
    *((key, label, src) for key, (label, src) in health.HEALTH_FIELDS.items()),
    (
        "driver_model.current",
        "driver model",
        "nvmlDeviceGetDriverModel: WDDM or TCC, Windows only (nvidia-smi header)",
    ),
]


def format_gpu_field(key, value) -> str:
    """A GPU field in nvidia-smi's units (bytes -> MiB/GiB, mW -> W)."""
    if is_na(value):
        return value.describe()
    if key in health.HEALTH_FIELDS:
        return _health_text(key, value)
    if key == "memory.api":
        return f"nvmlDeviceGetMemoryInfo {value}"
    if key.startswith("memory."):
        return format_bytes(value)
    if key.startswith("power."):
        return f"{value / 1000:.1f} W"
    if key == "utilization.gpu":
        return f"{value} %"
    if key == "temperature.gpu":
        return f"{value} °C"
    return str(value)


def _health_text(key, value) -> str:
    """Text of one health field (``Yes``/``No`` for the pending/failure flags, as nvidia-smi)."""
    if is_na(value):
        return value.describe()
    if key in ("retired_pages.pending", "remapped_rows.pending", "remapped_rows.failure"):
        return "Yes" if value else "No"
    return str(value)


def _wrap(prefix: str, text) -> list:
    """``prefix + text`` wrapped to :data:`TEXT_WIDTH`, continuation lines under the text.

    Outside text (paths, NVML names, tool output) may hold escape sequences or controls that
    would clear the terminal or forge lines: it is shown escaped. Long words (paths) are never
    cut, so they stay copyable.
    """
    text = str(text)
    if not (text.isascii() and text.isprintable()):
        text = terminal_safe(text)
    return textwrap.wrap(
        text,
        width=TEXT_WIDTH,
        initial_indent=prefix,
        subsequent_indent=" " * len(prefix),
        break_long_words=False,
        break_on_hyphens=False,
    ) or [prefix.rstrip()]


def _env_text(value) -> str:
    """An environment value: NA as 'N/A (not set)', '' said explicitly, lists joined."""
    if is_na(value):
        return value.describe()
    if isinstance(value, list):
        return ", ".join(value) or "(no entries)"
    if value == "":
        return "'' (set to the empty string)"
    return str(value)


def _gpu_columns(gpus) -> list:
    """:data:`GPU_COLUMNS`, without the driver model when no GPU has one (Windows only)."""
    return [
        column
        for column in GPU_COLUMNS
        if column[0] != "driver_model.current"
        or any(not is_na(g.get(column[0], NOT_COLLECTED)) for g in gpus)
    ]


def _none_visible(facts, none: str = "none") -> str:
    status = facts["driver"]["status"]
    return f"{none} visible" + (f": {status.reason}" if is_na(status) else "")


def _mig_lines(gpu) -> list:
    """``(index, text)`` of each MIG instance of one GPU."""
    return [
        (
            m["index"],
            f"{m['uuid']}  {format_bytes(m['memory.used'])} / {format_bytes(m['memory.total'])}",
        )
        for m in gpu.get("mig_devices") or []
    ]


def report_text(report) -> str:
    """The report as plain text, wrapped to :data:`TEXT_WIDTH` columns."""
    facts = report.facts
    lines = ["cudamagic %cudainfo", ""]
    section = None
    width = max(display_width(row[1]) for row in SUMMARY_ROWS)
    for sec, label, get, source in SUMMARY_ROWS:
        if sec != section:
            lines.append(f"[{sec}]")
            section = sec
        lines.extend(_wrap(f"  {pad(label, width)}  ", format_value(get(facts))))
        lines.extend(_wrap(f"  {'':{width}}    ↳ ", source))
    lines.append("[GPUs]")
    gpus = report.gpus()
    if not gpus:
        lines.extend(_wrap("  ", _none_visible(facts)))
    columns = _gpu_columns(gpus)
    label_width = max((display_width(label) for _key, label, _src in columns), default=0)
    for gpu in gpus:
        lines.append(f"  GPU {gpu['index']}:")
        for key, label, _src in columns:
            value = gpu.get(key, NOT_COLLECTED)
            if key == "driver_model.current" and is_na(value):
                continue  # Windows only
            lines.extend(_wrap(f"    {pad(label, label_width)} ", format_gpu_field(key, value)))
        for index, text in _mig_lines(gpu):
            lines.extend(_wrap(f"    MIG instance {index}: ", text))
    if gpus:
        lines.append("  Sources of the GPU fields:")
        for _key, label, src in columns:
            lines.extend(_wrap(f"    {pad(label, label_width)} ", src))
    lines.append("[Environment]")
    key_width = max([32, *(display_width(k) for k in facts["env"])])
    for key, value in facts["env"].items():
        lines.extend(_wrap(f"  {pad(key, key_width)} ", _env_text(value)))
    lines.append("[Findings]")
    for x in report.findings:
        lines.extend(_wrap(f"  {SEVERITY_ICON[x.severity]} ", f"{x.severity.upper()}: {x.title}"))
        lines.extend(_wrap("      why: ", x.cause))
        if x.fix:
            lines.extend(_wrap("      fix: ", x.fix))
    return "\n".join(lines)


def _finding_html(x, heading: str = "div", severity_word: bool = True) -> str:
    level = style.level(x.severity)
    word = f"{esc(x.severity.upper())}: " if severity_word else ""
    fix = f"<p><b>Fix:</b> {md_code(x.fix)}</p>" if x.fix else ""
    return (
        f'{style.box_open(level)[:-1]} data-id="{esc(x.id)}">'
        f'<{heading} class="cm-title">{style.icon(level)} {word}{esc(x.title)}</{heading}>'
        f"<p>{md_code(x.cause)}</p>{fix}</div>"
    )


def _facts_html(facts) -> str:
    rows, section = [], None
    for sec, label, get, source in SUMMARY_ROWS:
        first = f"<b>{esc(sec)}</b>" if sec != section else ""
        rows.append([first, esc(label), na_cell_html(get(facts)), md_code(source)])
        section = sec
    table = html_table(
        ["", "fact", "value", "meaning / source"], rows, prose=(2, 3), col_cls={3: "cm-src"}
    )
    return "<h4>Facts</h4>" + style.scroll(table)


def _gpus_html(facts, gpus) -> str:
    if not gpus:
        return f"<h4>GPUs</h4><p>{esc(_none_visible(facts, 'None'))}</p>"
    body = []
    for key, label, src in _gpu_columns(gpus):
        cells = []
        for gpu in gpus:
            value = gpu.get(key, NOT_COLLECTED)
            cells.append(
                na_cell_html(value, None if is_na(value) else format_gpu_field(key, value))
            )
        body.append([f'<span title="{esc(src)}">{esc(label)}</span>', *cells, md_code(src)])
    head = ["field", *(f"GPU {g['index']}" for g in gpus), "source"]
    n = len(gpus)
    table = html_table(head, body, prose=range(1, n + 2), col_cls={n + 1: "cm-src"})
    migs = "".join(
        f'<p class="cm-note">GPU {esc(g["index"])} MIG instance {esc(i)}: {esc(text)}</p>'
        for g in gpus
        for i, text in _mig_lines(g)
    )
    return "<h4>GPUs</h4>" + style.scroll(table) + migs


def _env_html(env) -> str:
    rows = [
        [f'<span class="cm-mono">{esc(k)}</span>', na_cell_html(v, _env_text(v))]
        for k, v in env.items()
    ]
    n_set = sum(1 for v in env.values() if not is_na(v))
    return style.details(
        f"Environment variables ({n_set} of {len(rows)} set)",
        style.scroll(html_table(["variable", "value"], rows, prose=(1,))),
    )


def report_html(report) -> str:
    """The report as one themed page.

    The verdict and the findings first, then the facts with their sources, one column per GPU,
    and the environment in a collapsible section. Finding ids are kept only as ``data-id``.
    """
    parts = [_finding_html(report.verdict, "h3", severity_word=False)]
    others = report.findings[:-1]
    if others:
        parts.append("<h4>Findings</h4>" + "".join(_finding_html(x) for x in others))
    parts.append(_facts_html(report.facts))
    parts.append(_gpus_html(report.facts, report.gpus()))
    parts.append(_env_html(report.facts["env"]))
    return style.page("".join(parts), "info")
