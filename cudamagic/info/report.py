"""The ``%cudainfo`` report object: facts and findings rendered as text (terminal) and HTML (notebook)."""

from __future__ import annotations

from ..core import style
from ..core.fmt import (
    TEXT_WIDTH,
    display_width,
    esc,
    format_bytes,
    format_value,
    html_table,
    na_cell_html,
    pad,
    terminal_safe,
)
from ..core.na import NA, is_na
from . import health as _health

# ---------------------------------------------------------------------------------------
# %cudainfo report
# ---------------------------------------------------------------------------------------

_SEV_ICON = {"error": "✖", "warning": "⚠", "info": "ℹ", "ok": "✔"}


# (section, label, getter(facts), meaning and source)
def _g(*path):
    def get(facts):
        cur = facts
        for p in path:
            if isinstance(cur, dict):
                cur = cur.get(p, NA("not collected", "error"))
            else:
                return cur
        return cur

    return get


def _t(key):
    """Getter for a PyTorch fact that says "PyTorch not installed" when it is not."""

    def get(facts):
        t = facts["torch"]
        if not t.get("installed"):
            return NA("PyTorch is not installed in this kernel", "not_installed")
        return t.get(key, NA("not collected", "error"))

    return get


def _arch(facts):
    t = facts["torch"]
    if not t.get("installed"):
        return NA("PyTorch is not installed in this kernel", "not_installed")
    arch = t.get("arch_list")
    if is_na(arch):
        return arch
    return " ".join(arch) if arch else NA("no GPU code in this build", "not_available")


def _variant(facts):
    t = facts["torch"]
    if not t.get("installed"):
        return t["error"]
    v = t["variant"]
    return f"{v['variant'] or '(none)'} ({v['kind']})"


def _nvcc(facts):
    tk = facts["toolkit"]
    if is_na(tk["path"]):
        return tk["path"]
    if is_na(tk["release"]):
        return tk["release"]
    return f"{tk['release']} (V{tk['build']})"


SUMMARY_ROWS = [
    (
        "Python",
        "interpreter",
        _g("python", "executable"),
        "sys.executable: the kernel's Python (may differ from `python` in a shell)",
    ),
    ("Python", "version", _g("python", "version"), "sys.version"),
    (
        "Python",
        "python on PATH",
        _g("python", "shell_python"),
        "shutil.which('python3'): what a terminal would run",
    ),
    (
        "PyTorch",
        "version",
        lambda f: f["torch"]["version"] if f["torch"].get("installed") else f["torch"]["error"],
        "torch.__version__",
    ),
    (
        "PyTorch",
        "variant",
        _variant,
        "local version tag: +cpu, +cuXYZ (CUDA X.Y), +rocm, none (default PyPI wheel)",
    ),
    ("PyTorch", "location", _t("file"), "torch.__file__: where torch was imported from"),
    (
        "PyTorch",
        "CUDA it was built with",
        _t("cuda_build"),
        "torch.version.cuda: the CUDA runtime bundled with PyTorch",
    ),
    ("PyTorch", "HIP (ROCm)", _t("hip_build"), "torch.version.hip"),
    ("PyTorch", "cuDNN", _t("cudnn"), "torch.backends.cudnn.version(), decoded"),
    ("PyTorch", "NCCL", _t("nccl"), "torch.cuda.nccl.version()"),
    ("PyTorch", "CUDA available", _t("cuda_available"), "torch.cuda.is_available()"),
    (
        "PyTorch",
        "CUDA devices",
        _t("device_count"),
        "torch.cuda.device_count(): GPUs PyTorch can use (after CUDA_VISIBLE_DEVICES)",
    ),
    (
        "PyTorch",
        "architectures in the build",
        _arch,
        "torch.cuda.get_arch_list(): GPU code the build contains",
    ),
    (
        "PyTorch",
        "CUDA initialised in this kernel",
        _t("cuda_initialized"),
        "torch.cuda.is_initialized(); %cudainfo never initialises it",
    ),
    ("Driver", "NVML status", _g("driver", "status"), "pynvml.nvmlInit()"),
    (
        "Driver",
        "driver version",
        _g("driver", "driver_version"),
        "nvmlSystemGetDriverVersion (nvidia-smi header)",
    ),
    (
        "Driver",
        "newest CUDA the driver supports",
        _g("driver", "cuda_driver_version"),
        "nvmlSystemGetCudaDriverVersion, decoded ('CUDA Version' in the nvidia-smi header)",
    ),
    ("Driver", "NVML version", _g("driver", "nvml_version"), "nvmlSystemGetNVMLVersion"),
    (
        "Driver",
        "GPUs seen by NVML",
        _g("driver", "device_count"),
        "nvmlDeviceGetCount: all GPUs, ignoring CUDA_VISIBLE_DEVICES",
    ),
    (
        "Driver",
        "NVML library",
        lambda f: f["driver"].get("nvml_library", NA("not collected", "error")),
        "pynvml.nvmlLib: where NVML was loaded from (System32\\nvml.dll on Windows, libnvidia-ml.so.1 on Linux)",
    ),
    ("Toolkit", "nvcc", _nvcc, "`nvcc -V`: the CUDA toolkit used only to compile extensions"),
    ("Toolkit", "nvcc path", _g("toolkit", "path"), "$CUDA_HOME/bin, $CUDA_PATH/bin, then PATH"),
]

GPU_COLUMNS = [
    ("index", "nvidia-smi index", "0-based NVML index (nvidia-smi order)"),
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
    *((key, label, src) for key, (label, src) in _health.HEALTH_FIELDS.items()),
    (
        "driver_model.current",
        "driver model",
        "nvmlDeviceGetDriverModel: WDDM or TCC, Windows only (nvidia-smi header)",
    ),
]


def format_gpu_field(key, value) -> str:
    """Format a GPU field in nvidia-smi's units (bytes -> MiB/GiB, mW -> W)."""
    if is_na(value):
        return value.describe()
    if key in _health.HEALTH_FIELDS:
        return _health.format_health(key, value)
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


def _wrap(prefix: str, text: str, width: int = TEXT_WIDTH):
    """``prefix + text`` wrapped to ``width`` columns, continuation lines indented under the text."""
    import textwrap

    # outside text (environment values, paths, NVML names, tool output) may hold ESC sequences,
    # newlines or bidi
    # controls that would clear the terminal or forge lines: shown escaped (plain printable ASCII
    # needs no look)
    text = str(text)
    if not (text.isascii() and text.isprintable()):
        text = terminal_safe(text)
    # long words (paths) are never cut: a path split across lines cannot be copied
    return textwrap.wrap(
        text,
        width=width,
        initial_indent=prefix,
        subsequent_indent=" " * len(prefix),
        break_long_words=False,
        break_on_hyphens=False,
    ) or [prefix.rstrip()]


def _env_text(value) -> str:
    """An environment value for display: NA as 'N/A (not set)', '' as an explicit empty string, lists joined."""
    if is_na(value):
        return value.describe()
    if isinstance(value, list):
        return ", ".join(value) or "(no entries)"
    if value == "":
        return "'' (set to the empty string)"
    return str(value)


class CudaInfoReport:
    """The result of ``%cudainfo``: facts and findings, rendering as HTML (notebook) or text
    (terminal).

    Attributes:
        facts: dict from :func:`cudamagic.info.facts.collect_facts`.
        findings: list of :class:`cudamagic.info.findings.Finding`, the last being the verdict.
    """

    def __init__(self, facts, findings):
        self.facts = facts
        self.findings = list(findings)

    @property
    def verdict(self):
        """The overall verdict finding."""
        return self.findings[-1]

    def _gpus(self):
        tdev = {
            d["ordinal"]: d for d in self.facts["torch"].get("devices", []) if isinstance(d, dict)
        }
        out = []
        for g in self.facts["gpus"]:
            g = dict(g)
            o = g.get("cuda_ordinal")
            g["multiprocessor_count"] = (
                tdev[o]["multiprocessor_count"]
                if isinstance(o, int) and o in tdev
                else NA("known once CUDA is initialised in this kernel", "not_initialized")
            )
            out.append(g)
        return out

    def to_dict(self) -> dict:
        """Everything as JSON-ready data. GPU keys follow ``nvidia-smi --query-gpu`` names; values
        are raw NVML units listed under ``units``; NA values are ``{"na": reason, "code": ...}``.
        """
        from ..core.na import jsonable
        from ..core.nvml import FIELD_UNITS

        f = self.facts
        return jsonable(
            {
                "python": f["python"],
                "torch": f["torch"],
                "driver": {k: v for k, v in f["driver"].items()},
                "toolkit": f["toolkit"],
                "gpus": self._gpus(),
                "mapping": f["mapping"],
                "env": f["env"],
                "cuda_visible_devices": f["cuda_visible_devices"],
                "findings": [x.to_dict() for x in self.findings],
                "verdict": self.verdict.to_dict(),
                "units": {k: v for k, v in FIELD_UNITS.items()},
            }
        )

    def to_json(self, indent=2) -> str:
        """:meth:`to_dict` as JSON text."""
        import json

        return json.dumps(self.to_dict(), indent=indent, default=str)

    # -- text ------------------------------------------------------------------------
    def to_text(self) -> str:
        """The report as plain text, wrapped to :data:`TEXT_WIDTH` columns."""
        lines = ["cudamagic %cudainfo", ""]
        section = None
        w = max(display_width(r[1]) for r in SUMMARY_ROWS)
        for sec, label, get, source in SUMMARY_ROWS:
            if sec != section:
                lines.append(f"[{sec}]")
                section = sec
            lines.extend(_wrap(f"  {pad(label, w)}  ", format_value(get(self.facts))))
            lines.extend(_wrap(f"  {'':{w}}    ↳ ", source))
        lines.append("[GPUs]")
        gpus = self._gpus()
        if not gpus:
            st = self.facts["driver"]["status"]
            lines.extend(_wrap("  ", "none visible" + (f": {st.reason}" if is_na(st) else "")))
        # one label column for the per-GPU rows and their sources: as wide as the longest label
        # shown
        shown = self._gpu_columns(gpus) if gpus else []
        lw = max((display_width(label) for _k, label, _s in shown), default=0)
        for g in gpus:
            lines.append(f"  GPU {g['index']}:")
            for key, label, _src in GPU_COLUMNS[1:]:
                if key == "driver_model.current" and is_na(g.get(key, NA("absent"))):
                    continue  # Windows only: no line on Linux
                lines.extend(
                    _wrap(
                        f"    {pad(label, lw)} ",
                        format_gpu_field(key, g.get(key, NA("not collected"))),
                    )
                )
            for m in g.get("mig_devices") or []:
                lines.extend(
                    _wrap(
                        f"    MIG instance {m['index']}: ",
                        f"{m['uuid']}  {format_bytes(m['memory.used'])} / "
                        f"{format_bytes(m['memory.total'])}",
                    )
                )
        if gpus:
            lines.append("  Sources of the GPU fields:")
            for _key, label, src in self._gpu_columns(gpus):  # the driver model: Windows only
                lines.extend(_wrap(f"    {pad(label, lw)} ", src))
        lines.append("[Environment]")
        kw = max([32, *(display_width(k) for k in self.facts["env"])])
        for k, v in self.facts["env"].items():
            lines.extend(_wrap(f"  {pad(k, kw)} ", _env_text(v)))
        lines.append("[Findings]")
        for x in self.findings:
            lines.extend(_wrap(f"  {_SEV_ICON[x.severity]} ", f"{x.severity.upper()}: {x.title}"))
            lines.extend(_wrap("      why: ", x.cause))
            if x.fix:
                lines.extend(_wrap("      fix: ", x.fix))
        return "\n".join(lines)

    def __repr__(self):
        return self.to_text()

    def _repr_pretty_(self, p, cycle):
        p.text(self.to_text())

    # -- HTML ------------------------------------------------------------------------
    def _gpu_columns(self, gpus):
        """GPU_COLUMNS without the first (the index, shown in each GPU's header) and without the
        driver model when no GPU has one (Windows only: NVML answers "not supported" on Linux).
        """
        return [
            c
            for c in GPU_COLUMNS[1:]
            if c[0] != "driver_model.current"
            or any(not is_na(g.get(c[0], NA("absent"))) for g in gpus)
        ]

    def _finding_html(self, x, heading: str = "div", severity_word: bool = True) -> str:
        lvl = style.level(x.severity)
        word = f"{esc(x.severity.upper())}: " if severity_word else ""
        fix = f"<p><b>Fix:</b> <code>{esc(x.fix)}</code></p>" if x.fix else ""
        return (
            f'{style.box_open(lvl)[:-1]} data-id="{esc(x.id)}">'
            f'<{heading} class="cm-title">{style.icon(lvl)} {word}{esc(x.title)}</{heading}>'
            f"<p>{esc(x.cause)}</p>{fix}</div>"
        )

    def _repr_html_(self):
        """The report as one themed page (:func:`cudamagic.core.style.page`): the verdict and the
        findings first, then the facts with their sources, one column per GPU, and the environment
        in a collapsible section. Finding ids are kept only as ``data-id`` attributes.
        """
        parts = [self._finding_html(self.verdict, "h3", severity_word=False)]
        others = self.findings[:-1]
        if others:
            parts.append("<h4>Findings</h4>" + "".join(self._finding_html(x) for x in others))
        rows, section = [], None
        for sec, label, get, source in SUMMARY_ROWS:
            val = get(self.facts)
            rows.append(
                [
                    f"<b>{esc(sec)}</b>" if sec != section else "",
                    esc(label),
                    na_cell_html(val),
                    esc(source),
                ]
            )
            section = sec
        parts.append(
            "<h4>Facts</h4>"
            + style.scroll(
                html_table(
                    ["", "fact", "value", "meaning / source"],
                    rows,
                    prose=(2, 3),
                    col_cls={3: "cm-src"},
                )
            )
        )
        gpus = self._gpus()
        parts.append("<h4>GPUs</h4>")
        if not gpus:
            st = self.facts["driver"]["status"]
            parts.append(f"<p>None visible{': ' + esc(st.reason) if is_na(st) else ''}</p>")
        else:
            body = []
            for key, label, src in self._gpu_columns(gpus):
                cells = [
                    na_cell_html(
                        g.get(key, NA("not collected")),
                        None
                        if is_na(g.get(key, NA("absent")))
                        else format_gpu_field(key, g.get(key)),
                    )
                    for g in gpus
                ]
                body.append([f'<span title="{esc(src)}">{esc(label)}</span>', *cells, esc(src)])
            head = ["field", *(f"GPU {g['index']}" for g in gpus), "source"]
            n = len(gpus)
            parts.append(
                style.scroll(
                    html_table(head, body, prose=range(1, n + 2), col_cls={n + 1: "cm-src"})
                )
            )
            for g in gpus:
                for m in g.get("mig_devices") or []:
                    parts.append(
                        f'<p class="cm-note">GPU {esc(g["index"])} MIG instance {esc(m["index"])}: '
                        f"{esc(m['uuid'])} {esc(format_bytes(m['memory.used']))} / "
                        f"{esc(format_bytes(m['memory.total']))}</p>"
                    )
        env_rows = [
            [f'<span class="cm-mono">{esc(k)}</span>', na_cell_html(val, _env_text(val))]
            for k, val in self.facts["env"].items()
        ]
        n_set = sum(1 for val in self.facts["env"].values() if not is_na(val))
        parts.append(
            style.details(
                f"Environment variables ({n_set} of {len(env_rows)} set)",
                style.scroll(html_table(["variable", "value"], env_rows, prose=(1,))),
            )
        )
        return style.page("".join(parts), "info")
