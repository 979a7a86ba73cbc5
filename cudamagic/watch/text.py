"""The ``%gpuwatch`` text view: the snapshot table (``text/plain``) and the words for each value.

:func:`sample_text` is the ``text/plain`` form (terminal IPython, front ends without the widget
extension): an nvidia-smi-like table at most :data:`TEXT_WIDTH` columns wide, with the N/A reasons
listed below it. Every line and cell goes through :func:`~cudamagic.core.fmt.terminal_safe`, so
nothing from outside (process or GPU names, paths, NVML error text) can move the cursor, clear the
terminal or forge a row. The value formatters (``pct_text``, ``mem_text``...) are shared with the
HTML of :mod:`.widget`.
"""

from __future__ import annotations

import textwrap

from ..core.fmt import TEXT_WIDTH, format_bytes, terminal_safe, text_table
from ..core.na import is_na
from .samples import Sample, TorchSample

# : Characters of a GPU name in the text table: with the other columns it fits :data:`TEXT_WIDTH`
# (100) columns.
NAME_CHARS = 20


# ---- values in words (text and HTML) ----------------------------------------------------------


def pct_text(v):
    """A percentage (0-100) as ``'42 %'``, or the NA's ``'N/A'``."""
    return str(v) if is_na(v) else f"{v:.0f} %"


def num_text(v, unit=""):
    """``f'{v}{unit}'`` (``unit`` written as given, e.g. ``" C"``), or the NA's ``'N/A'``."""
    return str(v) if is_na(v) else f"{v}{unit}"


def mem_text(used, total):
    """Bytes used and total as ``'9.6 GiB / 80.0 GiB'``, or ``'N/A'`` when either is NA."""
    if is_na(used) or is_na(total):
        return "N/A"
    return f"{format_bytes(used)} / {format_bytes(total)}"


def reasons_text(g):
    """A GpuSample's clock-event (throttle) reasons as text.

    Joined by commas, ``'none'``, or the NA.
    """
    r = g.throttle_reasons
    if is_na(r):
        return r
    return ", ".join(r) if r else "none"


def no_process_line(g):
    """What to say when NVML lists no process on ``g``.

    What to say when NVML lists no process on GpuSample ``g`` (memory in use may still be in use by
    processes NVML cannot attribute from here). With the v2 memory reading ``memory.used`` already
    excludes the driver's reserve, so only unattributed processes explain it; with v1 (reserve NA)
    the reserve is in it.
    """
    used, reserved = g.memory_used_bytes, g.memory_reserved_bytes
    if is_na(used):
        return "no process listed by NVML"
    if is_na(reserved):  # legacy v1 reading: used includes the driver's reserve
        return (
            f"NVML lists no process; {format_bytes(used)} in use (driver reserve, or processes "
            "NVML cannot "
            "attribute from here, e.g. other containers or VMs)"
        )
    if not reserved:
        return (
            f"NVML lists no process; {format_bytes(used)} in use (processes NVML cannot attribute "
            "from here, "
            "e.g. other containers or VMs)"
        )
    return (
        f"NVML lists no process; {format_bytes(used)} in use besides the driver's "
        f"{format_bytes(reserved)} "
        "reserve (processes NVML cannot attribute from here, e.g. other containers or VMs)"
    )


#: Labels and advice for process rows whose name is NA, by the NA's code (see sources.process_info).
PROCESS_LABELS = {
    "other_namespace": (
        "(other PID namespace)",
        "the pid is not visible from this container; run the "
        "container with --pid=host to see names.",
    ),
    "hidden": (
        "(another user's, hidden)",
        "the pid exists here but /proc does not let this user read it "
        "(hidepid or permissions); the memory is real: `sudo nvidia-smi` or the administrator can "
        "name it.",
    ),
    "exited": ("(exited)", "the process ended between NVML's listing and reading its name."),
    "no_permission": (
        "(other user or system)",
        "a process of another user or of the system: Windows does not "
        'show its name to this user (nvidia-smi prints "Insufficient Permissions"); run as '
        "administrator to see it.",
    ),
}


def process_label(p) -> str:
    """The process column of one ProcessSample.

    Its name, or a label saying why it is not readable.
    """
    if not is_na(p.name):
        return str(p.name)
    if p.name.code in PROCESS_LABELS:
        return PROCESS_LABELS[p.name.code][0]
    return "(other PID namespace)" if not p.visible else "N/A"


def process_notes(processes) -> list:
    """Notes on the unreadable processes among ``processes``.

    One ``'label: advice'`` line per kind of unreadable process among ``processes``, and the reason
    of every other N/A in them (no bare N/A without its reason).
    """
    notes = []
    for p in processes:
        for v in (p.name, p.used_memory_bytes):
            if not is_na(v):
                continue
            if v is p.name and v.code in PROCESS_LABELS:
                label, advice = PROCESS_LABELS[v.code]
                line = f"{label}: {advice}"
            elif v is p.name and not p.visible:
                line = f"(other PID namespace): {v.reason}"
            else:
                what = "process name" if v is p.name else "GPU memory"
                line = f"pid {p.pid} {what}: N/A ({v.reason})"
            if line not in notes:
                notes.append(line)
    return notes


def torch_text(t) -> str:
    """One line about this kernel's caching allocator."""
    if not isinstance(t, TorchSample):
        return t.describe() if is_na(t) else str(t)
    gap = t.gap_bytes
    gap_text = gap.describe() if is_na(gap) else format_bytes(gap)
    return (
        f"allocated {format_bytes(t.allocated_bytes)}, reserved {format_bytes(t.reserved_bytes)}, "
        "peak "
        f"{format_bytes(t.peak_bytes)}; NVML says this process uses "
        f"{format_bytes(t.nvml_process_bytes)}, "
        f"gap (CUDA context, other libraries) {gap_text}"
    )


# ---- text only ---------------------------------------------------------------------------------


def _short_name(g) -> str:
    """The GPU name for the text table.

    The GPU name for the text table: without the ``NVIDIA `` prefix, at most NAME_CHARS characters
    (the HTML card and ``watch.history`` keep the full name).
    """
    name = "N/A" if is_na(g.name) else str(g.name)
    if name.startswith("NVIDIA "):
        name = name[len("NVIDIA ") :]
    if len(name) > NAME_CHARS:
        name = name[: NAME_CHARS - 1] + "\u2026"
    model = "" if is_na(g.driver_model) else f" ({g.driver_model})"
    return ("MIG " if g.mig_enabled is True else "") + name + model


def _used_of_total(used, total) -> str:
    """``'9.6/80.0 GiB'``: both in the unit of the total (compact text column)."""
    if is_na(total) or not total:
        return "N/A" if is_na(used) else format_bytes(used) + "/N/A"
    units, k, t = ("B", "KiB", "MiB", "GiB", "TiB"), 0, float(total)
    while t >= 1024 and k < len(units) - 1:
        t /= 1024
        k += 1
    f = 1024**k
    return f"{'N/A' if is_na(used) else f'{used / f:.1f}'}/{total / f:.1f} {units[k]}"


def _pair(a, b, unit, scale=1) -> str:
    """``'460/700 W'``; ``'N/A'`` when neither could be read."""
    if is_na(a) and is_na(b):
        return "N/A"

    def fmt(v):
        return "N/A" if is_na(v) else f"{v / scale:.0f}"

    return f"{fmt(a)}/{fmt(b)} {unit}"


def _na_reasons(g):
    """Distinct NA reasons of one GPU's fields.

    ``{field label: reason}`` (every N/A in the table).
    """
    out = {}
    for label, v in (
        ("utilization", g.gpu_util_pct),
        ("memory bandwidth", g.mem_util_pct),
        ("memory used", g.memory_used_bytes),
        ("memory total", g.memory_total_bytes),
        ("memory reserved", g.memory_reserved_bytes),
        ("temperature", g.temperature_c),
        ("power draw", g.power_draw_mw),
        ("power limit", g.power_limit_mw),
        ("fan", g.fan_speed_pct),
        ("SM clock", g.clock_sm_mhz),
        ("memory clock", g.clock_mem_mhz),
        ("P-state", g.pstate),
        ("throttle reasons", g.throttle_reasons_mask),
    ):
        if is_na(v) and not (label == "memory reserved" and v.reason == "not recorded"):
            out[label] = (
                v.reason
            )  # (a reserve a trace or cluster source never had is not shown, so no reason)
    return out


PROCESS_CHARS = 44


def _clip_left(name: str) -> str:
    r"""A long process name, clipped on the left.

    A long process name (Windows gives full paths) keeps its end, where the program's name is, like
    nvidia-smi's ``...\\SearchHost.exe``.
    """
    return name if len(name) <= PROCESS_CHARS else "\u2026" + name[-(PROCESS_CHARS - 1) :]


def process_memory_text(p) -> str:
    """GPU memory of ProcessSample ``p``.

    Bytes, ``*`` when Windows' counters gave it, N/A otherwise.
    """
    if p.memory_source != "NVML" and not is_na(p.used_memory_bytes):
        return format_bytes(p.used_memory_bytes) + " *"
    return format_bytes(p.used_memory_bytes)


def counter_notes(processes) -> list:
    """The line under a process table that says where starred figures come from.

    Windows' counters.
    """
    notes = []
    counted = [p for p in processes if p.memory_source != "NVML" and not is_na(p.used_memory_bytes)]
    if counted:
        shared = [p.shared_memory_bytes for p in counted if not is_na(p.shared_memory_bytes)]
        notes.append(
            f"* GPU memory from the {counted[0].memory_source} (Dedicated Usage, Task Manager's "
            '"Dedicated GPU memory"): NVML and nvidia-smi show N/A for every process under WDDM'
            + (
                f"; shared (system RAM) usage of these processes: {format_bytes(sum(shared))}"
                if shared
                else ""
            )
            + "."
        )
    return notes


class _Lines(list):
    """Lines of the text view, each made terminal-safe.

    Lines of the text view: ``append`` makes each one safe with
    :func:`~cudamagic.core.fmt.terminal_safe` and wraps it at :data:`TEXT_WIDTH` columns; ``table``
    adds a table whose cells were made safe already.
    """

    def append(self, text):
        text = terminal_safe(text)
        if len(text) <= TEXT_WIDTH:
            super().append(text)
        else:
            self.extend(
                textwrap.wrap(
                    text,
                    TEXT_WIDTH,
                    subsequent_indent="  ",
                    break_long_words=False,
                    break_on_hyphens=False,
                )
                or [text]
            )

    def table(self, text):
        super().append(text)


def header_line(sample: Sample | None, label: str = "live", state: str = "") -> str:
    """``gpuwatch  live  2025-01-01T12:00:00.000  sample 3  running`` (REPLAY clearly marked)."""
    kind = f"REPLAY of {label[len('replay of ') :]}" if label.startswith("replay of ") else label
    if sample is None:
        return terminal_safe(f"gpuwatch  {kind}  (no sample yet)  {state}".rstrip())
    rec = "recorded " if label.startswith("replay of ") else ""
    return terminal_safe(
        f"gpuwatch  {kind}  {rec}{sample.timestamp}  sample {sample.seq}  {state}".rstrip()
    )


def sample_text(
    sample: Sample | None, label: str = "live", state: str = "", error: str = ""
) -> str:
    """The snapshot table as plain text (nvidia-smi-like), with N/A reasons listed below it.

    Every line and table cell goes through :func:`~cudamagic.core.fmt.terminal_safe`: nothing from
    outside can move the cursor, clear the terminal or start a new line.
    """

    def safe_table(headers, rows):
        return text_table(headers, [[terminal_safe(c) for c in row] for row in rows])

    lines = _Lines([header_line(sample, label, state)])  # one line, even with a long replay path
    if sample is None:
        if error:
            lines.append(f"error: {error}")
        return "\n".join(lines)
    if sample.nvml_status is not None:
        status = sample.nvml_status
        fix = getattr(status, "fix", "")
        lines.append(f"No GPU data: {status.reason}" + (f". Fix: {fix}" if fix else ""))
    if sample.gpus:
        rows = []
        for g in sample.gpus:
            rows.append(
                [
                    g.index,
                    _short_name(g) + (" [LOST]" if g.lost is not None else ""),
                    pct_text(g.gpu_util_pct),
                    pct_text(g.mem_util_pct),
                    _used_of_total(g.memory_used_bytes, g.memory_total_bytes),
                    num_text(g.temperature_c, " C"),
                    _pair(g.power_draw_mw, g.power_limit_mw, "W", 1000),
                    pct_text(g.fan_speed_pct),
                    _pair(g.clock_sm_mhz, g.clock_mem_mhz, "").rstrip(),
                    num_text(g.pstate) if is_na(g.pstate) else f"P{g.pstate}",
                    reasons_text(g),
                ]
            )
        # util: utilization.gpu; mem bw: utilization.memory (memory bandwidth); clocks: SM/memory
        lines.table(
            safe_table(
                [
                    "GPU",
                    "name",
                    "util",
                    "mem bw",
                    "memory",
                    "temp",
                    "power",
                    "fan",
                    "clocks MHz",
                    "P",
                    "throttle",
                ],
                rows,
            )
        )
        for g in sample.gpus:
            if g.lost is not None:
                lines.append(f"GPU {g.index}: {g.lost.describe()}")
                continue
            for label_, reason in _na_reasons(g).items():
                lines.append(f"GPU {g.index} {label_}: N/A ({reason})")
            if not is_na(g.memory_reserved_bytes) and g.memory_reserved_bytes:
                lines.append(
                    f"GPU {g.index} memory reserved by the driver: "
                    f"{format_bytes(g.memory_reserved_bytes)} "
                    "(memory.reserved; not counted in memory used, as nvidia-smi shows it)"
                )
            for m in g.mig_devices:
                lines.append(
                    f"GPU {g.index} MIG {m.index} {m.uuid}: "
                    f"{mem_text(m.memory_used_bytes, m.memory_total_bytes)}"
                )
        prows = []
        for g in sample.gpus:
            if g.lost is not None:
                continue
            if is_na(g.processes):
                lines.append(f"GPU {g.index} processes: {g.processes.describe()}")
                continue
            if not g.processes:
                lines.append(f"GPU {g.index}: {no_process_line(g)}")
            for p in g.processes:
                prows.append(
                    [
                        g.index,
                        p.pid,
                        _clip_left(process_label(p)) + (" (this kernel)" if p.own else ""),
                        p.type,
                        process_memory_text(p),
                    ]
                )
        if prows:
            lines.table(safe_table(["GPU", "pid", "process", "type", "GPU memory"], prows))
            shown = [
                p
                for g in sample.gpus
                if g.lost is None and not is_na(g.processes)
                for p in g.processes
            ]
            for note in counter_notes(shown) + process_notes(shown):
                lines.append(note)
    h = sample.host
    lines.append(
        f"host: CPU {pct_text(h.cpu_util_pct)} of {h.cpu_count} CPUs, "
        f"this kernel {pct_text(h.kernel_cpu_pct)} of one core, RAM "
        f"{_used_of_total(h.memory_used_bytes, h.memory_total_bytes)}, "
        f"DataLoader workers: {len(h.workers)}"
    )
    for label_, v in (
        ("CPU", h.cpu_util_pct),
        ("this kernel's CPU", h.kernel_cpu_pct),
        ("RAM", h.memory_used_bytes),
        ("RAM total", h.memory_total_bytes),
    ):
        if is_na(v):
            lines.append(f"host {label_}: N/A ({v.reason})")
    lines.append("PyTorch: " + torch_text(sample.torch))
    if sample.hint:
        lines.append("hint: " + sample.hint)
    if error:
        lines.append("sampler error: " + error)
    return "\n".join(lines)
