"""Text and HTML of ``%gpuwatch`` samples: the snapshot table, GPU cards, charts, whole views.

:func:`sample_text` is the ``text/plain`` form (terminal IPython, front ends without the widget
extension): an nvidia-smi-like table at most :data:`TEXT_WIDTH` columns wide, with the N/A reasons
listed below it. Every line and cell goes through :func:`~cudamagic.core.fmt.terminal_safe`, so
nothing from outside (process or GPU names, paths, NVML error text) can move the cursor, clear the
terminal or forge a row. The value formatters (``pct_text``, ``mem_text``...) are shared with the
HTML below.

HTML: :func:`gpu_html` (one GPU's card), :func:`host_html`, the charts (the live widget's SVG
pieces, :func:`chart_image_html` for snapshots), :func:`snapshot_html` (the static ``text/html``
form: the monitor replaces its widget by it when it stops, so saved notebooks keep the last values)
and :func:`live_fallback_html` (what a saved notebook shows for a monitor still running when
saved). Colours only from JupyterLab's ``--jp-*`` theme variables (:mod:`.style`). Every string
that comes from outside (process names and command lines, GPU names, file paths, NVML error text)
goes through :func:`cudamagic.core.fmt.esc` before HTML.
"""

from __future__ import annotations

import base64
import datetime as _dt
import textwrap

from ..core.fmt import TEXT_WIDTH, esc, format_bytes, na_cell_html, terminal_safe, text_table
from ..core.na import NA, is_na
from ..core.style import badge, page, scroll
from .samples import Sample, TorchSample
from .style import CHART_WIDTH_PX, PLAIN, WATCH_CSS, bar_html, live_html, meter_html

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


# ---- HTML -----------------------------------------------------------------------------------

#: Height of a chart's plot area (px).
CHART_HEIGHT_PX = 48
#: Width of a chart's y-axis labels (px); the plot is ``CHART_WIDTH_PX`` minus this and a 3 px gap.
_Y_AXIS_PX = 34


def _w(mw):
    return str(mw) if is_na(mw) else f"{mw / 1000:.0f} W"


def _cell(v, text=None):
    """Escaped value; NA as 'N/A' with the reason as tooltip and beside it.

    Not cached: :func:`_piece` keeps whole rows by the values they show.
    """
    return na_cell_html(v, None if text is None else str(text))


def _driver_model(g) -> str:
    """`` · WDDM`` where NVML reports a driver model (Windows), else ``""``."""
    model = getattr(g, "driver_model", None)
    if model is None or (is_na(model) and model.code == "not_supported"):
        return ""
    if is_na(model):
        return f' <span class="cm-muted">· driver model {_cell(model)}</span>'
    return (
        f' <span class="cm-muted" title="Windows driver model (nvmlDeviceGetDriverModel)">· '
        f"{esc(model)}</span>"
    )


_PIECES = {}  # (piece, its inputs with their types) -> HTML; see _piece


def ascii_html(html: str) -> str:
    """``html`` with each non-ASCII character as its reference (``·`` -> ``&#183;``).

    The browser shows the same text. A widget's value goes to the front end as UTF-8 JSON:
    an ASCII string is copied as it is, any other is encoded character by character (some 25
    times slower for a whole tick's HTML).
    """
    return html if html.isascii() else html.encode("ascii", "xmlcharrefreplace").decode("ascii")


def _piece(name: str, values: tuple, build, g, live: bool = False, memo=None) -> str:
    """``build(g)``'s HTML, kept by ``values`` (a card's parts repeat tick after tick).

    ``live``: without the inline look the live widget's stylesheet repeats (:func:`live_html`).
    ``memo``: a dict kept by the live widget for one GPU: the piece is ASCII
    (:func:`ascii_html`), and the one it showed last is kept there with its values and compared
    with them, so a part that did not move costs no hashing of its values (a process table's
    rows); one that moved is looked up as the others.
    """
    types = tuple(map(type, values))  # 1 == 1.0 == True, written differently
    if memo is not None:
        kept = memo.get(name)
        if kept is not None and kept[0] == values and kept[1] == types:
            return kept[2]
    key = (name, live, memo is not None, values, types)
    try:
        html = _PIECES.get(key)
    except TypeError:  # an input that cannot be a key
        key, html = None, None
    if html is None:
        html = live_html(build(g)) if live else build(g)
        if memo is not None:
            html = ascii_html(html)
        if key is not None:
            if len(_PIECES) >= 20_000:
                _PIECES.clear()
            _PIECES[key] = html
    if memo is not None:
        memo[name] = (values, types, html)
    return html


def _head_html(g) -> str:
    title = ("MIG " if g.mig_enabled is True else "") + ("" if is_na(g.name) else str(g.name))
    return (
        f'<div class="cm-gpu-head">GPU {int(g.index)} {esc(title)}{_driver_model(g)} '
        f'<small class="cm-muted">{_cell(g.uuid)}</small></div>'
    )


#: A card's reading: key and value cells, styled inline (they read right where a sanitiser
#: dropped the stylesheet: an untrusted notebook, GitHub, nbviewer).
_KV = (
    '<tr><td class="cm-k" style="text-align:left;vertical-align:top;padding:0 10px 0 0">{}</td>'
    '<td style="text-align:left;vertical-align:top;padding:0">{}</td></tr>'
)


def _util_row(g) -> str:
    util = g.gpu_util_pct
    util_value = _cell(util, pct_text(util))
    return _KV.format(
        "utilization",
        (meter_html(bar_html(util / 100, "util"), util_value) if not is_na(util) else util_value)
        + " · memory bandwidth "
        + _cell(g.mem_util_pct, pct_text(g.mem_util_pct)),
    )


def _memory_row(g) -> str:
    mem_frac = (
        None
        if is_na(g.memory_used_bytes) or is_na(g.memory_total_bytes) or not g.memory_total_bytes
        else g.memory_used_bytes / g.memory_total_bytes
    )
    rsv = g.memory_reserved_bytes
    rsv_frac = None if mem_frac is None or is_na(rsv) else rsv / g.memory_total_bytes
    rsv_text = (
        (" · reserved by the driver " + _cell(rsv, format_bytes(rsv)))
        if not is_na(rsv) or rsv.code != "error"
        else ""
    )
    mem_value = _cell(g.memory_used_bytes, mem_text(g.memory_used_bytes, g.memory_total_bytes))
    return _KV.format(
        "memory",
        (
            meter_html(bar_html(mem_frac, "mem", rsv_frac), mem_value)
            if mem_frac is not None
            else mem_value
        )
        + rsv_text,
    )


def _other_rows(g) -> str:
    rows = [
        ("temperature", _cell(g.temperature_c, num_text(g.temperature_c, " °C"))),
        (
            "power",
            _cell(g.power_draw_mw, _w(g.power_draw_mw))
            + " / "
            + _cell(g.power_limit_mw, _w(g.power_limit_mw)),
        ),
        ("fan", _cell(g.fan_speed_pct, pct_text(g.fan_speed_pct))),
        (
            "clocks",
            "SM "
            + _cell(g.clock_sm_mhz, num_text(g.clock_sm_mhz, " MHz"))
            + " · memory "
            + _cell(g.clock_mem_mhz, num_text(g.clock_mem_mhz, " MHz")),
        ),
        ("P-state", _cell(g.pstate, num_text(g.pstate) if is_na(g.pstate) else f"P{g.pstate}")),
        ("throttle", _cell(reasons_text(g))),
    ]
    return "".join(_KV.format(k, v) for k, v in rows)


def _migs_html(g) -> str:
    return "".join(
        f"<div>MIG {m.index} <code>{esc(m.uuid)}</code>: "
        f"{_cell(m.memory_used_bytes, mem_text(m.memory_used_bytes, m.memory_total_bytes))}</div>"
        for m in g.mig_devices
    )


def gpu_html(g, live: bool = False, memo: dict | None = None) -> str:
    """One GPU card (escaped).

    Name, driver model, bars with their values, the other readings, processes. Each part is
    built once for the values it shows (:func:`_piece`): a monitor tick where one reading moved
    renders that row only. ``live``: for the live widget, which has the stylesheet (no inline
    look that it repeats: :func:`~.style.live_html`). ``memo``: where this GPU's parts are kept
    (one dict per GPU, see :func:`_piece`), instead of the cache all cards share.
    """
    head = _piece(
        "head",
        (g.index, g.mig_enabled, g.name, g.uuid, g.driver_model),
        _head_html,
        g,
        memo=memo,
    )
    if g.lost is not None:
        return f'{head}<div class="cm-lost">{badge("LOST", "error")} {_cell(g.lost)}</div>'
    used, total, rsv = g.memory_used_bytes, g.memory_total_bytes, g.memory_reserved_bytes
    body = (
        _piece("util", (g.gpu_util_pct, g.mem_util_pct), _util_row, g, live, memo)
        + _piece("memory", (used, total, rsv), _memory_row, g, live, memo)
        + _piece(
            "rows",
            (
                g.temperature_c,
                g.power_draw_mw,
                g.power_limit_mw,
                g.fan_speed_pct,
                g.clock_sm_mhz,
                g.clock_mem_mhz,
                g.pstate,
                g.throttle_reasons_mask,
            ),
            _other_rows,
            g,
            live,
            memo,
        )
    )
    migs = _piece("migs", g.mig_devices, _migs_html, g, memo=memo) if g.mig_devices else ""
    procs = _piece("procs", (g.processes, used, rsv), processes_html, g, memo=memo)
    return f'{head}<table class="cm-rows"><tbody>{body}</tbody></table>{migs}{procs}'


def processes_html(g) -> str:
    """The process table of one GPU (escaped; own row bold; invisible pids labelled)."""
    if is_na(g.processes):
        return f"<div>processes: {_cell(g.processes)}</div>"
    if not g.processes:
        return f'<div class="cm-muted">{esc(no_process_line(g))}</div>'
    rows = []
    for p in g.processes:
        name = (
            f'<span title="{esc(p.name.reason)}">{esc(process_label(p))}</span>'
            if is_na(p.name) and (p.name.code in PROCESS_LABELS or not p.visible)
            else _cell(p.name)
        )
        tip = "" if is_na(p.cmdline) else f' title="{esc(p.cmdline)}"'
        mine = " (this kernel)" if p.own else ""
        cls = ' class="cm-own"' if p.own else ""
        rows.append(
            f'<tr{cls}{tip}><td class="cm-num">{p.pid}</td><td class="cm-prose">{name}{mine}</td>'
            f"<td>{esc(p.type)}</td><td "
            f'class="cm-num">{_cell(p.used_memory_bytes, process_memory_text(p))}'
            "</td></tr>"
        )
    note = "".join(
        f'<div class="cm-muted">{esc(n)}</div>'
        for n in counter_notes(g.processes) + process_notes(g.processes)
    )
    return (
        scroll(
            '<table class="cm-table cm-procs"><thead><tr><th>pid</th><th>process</th><th>type</th>'
            "<th>GPU memory</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
        )
        + note
    )


def host_html(sample: Sample) -> str:
    """Host, PyTorch allocator and hint (escaped)."""
    h = sample.host
    parts = [
        f"<b>host</b> CPU {_cell(h.cpu_util_pct, pct_text(h.cpu_util_pct))} of {esc(h.cpu_count)} "
        "CPUs · "
        f"this kernel {_cell(h.kernel_cpu_pct, pct_text(h.kernel_cpu_pct))} of one core · RAM "
        f"{_cell(h.memory_used_bytes, mem_text(h.memory_used_bytes, h.memory_total_bytes))} · "
        f"DataLoader workers: {len(h.workers)}"
    ]
    if h.workers:
        parts.append(
            "<small>"
            + ", ".join(
                f"pid {w.pid}: {_cell(w.cpu_pct, pct_text(w.cpu_pct))} CPU, "
                f"{_cell(w.rss_bytes, format_bytes(w.rss_bytes))}"
                for w in h.workers
            )
            + "</small>"
        )
    t = sample.torch
    parts.append("<b>PyTorch</b> " + (_cell(t) if is_na(t) else esc(torch_text(t))))
    if sample.nvml_status is not None:
        status = sample.nvml_status
        fix = getattr(status, "fix", "")
        fix = f" <b>Fix:</b> {esc(fix)}" if fix else ""
        parts.insert(0, f"{badge('No GPU data', 'warn')} {esc(status.reason)}{fix}")
    if sample.hint:
        parts.append(f"{badge('hint', 'info')} {esc(sample.hint)}")
    return "<br>".join(parts)


# ---- charts ---------------------------------------------------------------------------------


def spark_point(g):
    """``(utilization %, memory used %)`` of one GpuSample for the chart.

    None where NA or absent.
    """
    if g is None:
        return None, None
    u = None if is_na(g.gpu_util_pct) else float(g.gpu_util_pct)
    m = None
    if not is_na(g.memory_used_bytes) and not is_na(g.memory_total_bytes) and g.memory_total_bytes:
        m = 100.0 * g.memory_used_bytes / g.memory_total_bytes
    return u, m


def spark_y(g) -> tuple:
    """``spark_point(g)`` as the polylines' y texts (:func:`_y_text`), in one step.

    The live chart adds two points per GPU at every tick.
    """
    if g is None:
        return None, None
    u, used, total = g.gpu_util_pct, g.memory_used_bytes, g.memory_total_bytes
    if isinstance(u, NA):
        uy = None
    else:
        u = float(u)
        uy = _Y_TEXTS[0 if u < 0 else 100 if u > 100 else round(u)]
    if isinstance(used, NA) or isinstance(total, NA) or not total:
        return uy, None
    m = 100.0 * used / total
    return uy, _Y_TEXTS[0 if m < 0 else 100 if m > 100 else round(m)]


def chart_points(history, index: int) -> list:
    """``[(timestamp_s, util %, mem %), ...]`` of GPU ``index`` over ``history``.

    A list of Samples.
    """
    return [
        (s.timestamp_s, *spark_point(next((g for g in s.gpus if g.index == index), None)))
        for s in history
    ]


def _clock(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts).strftime("%H:%M:%S")


def span_text(seconds: float) -> str:
    """A duration in words: ``'45 s'``, ``'2 min 5 s'``, ``'1 h 3 min'``."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min" + (f" {s % 60} s" if s % 60 else "")
    return f"{s // 3600} h" + (f" {s % 3600 // 60} min" if s % 3600 // 60 else "")


#: The polyline y of each whole percentage (written once: two per GPU at every tick).
_Y_TEXTS = tuple(str(100 - v) for v in range(101))


def _y_text(v) -> str | None:
    """A chart value (%) as its polyline y (0 at the top, 100 at the bottom); None stays None."""
    return None if v is None else _Y_TEXTS[0 if v < 0 else 100 if v > 100 else round(v)]


def _x_of(t: float, t0: float) -> int:
    """A chart's x of time ``t`` (s): centiseconds since ``t0``."""
    return round((t - t0) * 100)


def _polylines(
    points,
    cls: str,
    look: str = ' fill="none" stroke-width="1.5" vector-effect="non-scaling-stroke"',
) -> str:
    """The polylines of one line of a chart (``"x,y"`` texts), broken where a point is None.

    ``look``: the line's look as attributes (the chart images; the live widget's stylesheet has
    it).
    """
    if None not in points:
        segs = [" ".join(points)] if len(points) > 1 else []
    else:
        segs, seg = [], []
        for p in points:
            if p is None:
                if len(seg) > 1:
                    segs.append(" ".join(seg))
                seg = []
                continue
            seg.append(p)
        if len(seg) > 1:
            segs.append(" ".join(seg))
    return "".join(_polyline(s, cls, look) for s in segs)


def _polyline(points_text: str, cls: str, look: str) -> str:
    return f'<polyline class="{cls}"{look} points="{points_text}"/>'


def _time_axis(times) -> tuple:
    """``(when, axis HTML)`` of a chart over ``times`` (the same for every GPU's chart)."""
    n = len(times)
    if not n:
        return "no samples yet", "<span>no samples yet</span>"
    t0, t1 = times[0], times[-1]
    when = f"{_clock(t0)} to {_clock(t1)}"
    axis = (
        f"<span>{_clock(t0)}</span><span>{span_text(t1 - t0)} shown</span><span>{_clock(t1)}</span>"
        if n > 1
        else f"<span>{_clock(t1)}</span><span>collecting...</span>"
    )
    return when, axis


def _chart(index: int, xs, when: str, axis: str, lines: list) -> list:
    """The live chart's HTML pieces around ``lines``, its polylines; ``xs``: their x (centiseconds).

    A key (utilization solid, memory used dashed), a 0-100 % scale with a 50 % grid line, and the
    time axis: first and last sample's clock time and the span between them. x is the time, so the
    charts of all GPUs (built from the same samples, with the same
    :data:`~.style.CHART_WIDTH_PX`) share one time axis. The polylines live in a ``viewBox`` from
    the first to the last sample (y 0-100) stretched to the plot; only numbers computed here go in
    it.
    """
    head, label, body, close = chart_frame(xs, when, axis)
    i = str(int(index))
    return [head, i, label, i, body, *lines, close]


def chart_frame(xs, when: str, axis: str) -> tuple:
    """What every GPU's live chart of one tick shares (see :func:`_chart`).

    ``(head, label, body, close)``: GPU ``i``'s chart is ``head``, ``i``, ``label``, ``i``,
    ``body``, its polylines, ``close`` (the GPU's index is the only difference between them).
    ``xs``: a sequence of the samples' x (centiseconds).
    """
    n = len(xs)
    x0 = xs[0] if n else 0
    span = max(1, xs[-1] - x0) if n else 1
    label = f": utilization % (solid) and memory used % (dashed), {when}, {n} samples"
    plot_w = CHART_WIDTH_PX - _Y_AXIS_PX - 3
    return (
        '<div class="cm-chart"><div class="cm-chart-key"><span><span '
        'class="cm-swatch"></span>utilization'
        '</span><span><span class="cm-swatch cm-mem"></span>memory used</span></div>'
        f'<div class="cm-chart-body"><div class="cm-chart-y" style="flex:0 0 {_Y_AXIS_PX}px">'
        "<span>100%</span><span>50%</span><span>0%</span></div>"
        f'<svg width="{plot_w}" height="{CHART_HEIGHT_PX}" viewBox="{x0} 0 {span} 100" '
        'preserveAspectRatio="none" '
        'role="img" aria-label="GPU ',
        f'{label}"><title>GPU ',
        f"{label}</title>"
        f'<line class="cm-grid" x1="{x0}" y1="50" x2="{x0 + span}" y2="50" '
        'vector-effect="non-scaling-stroke"/>',
        f'</svg></div><div class="cm-chart-x" style="margin-left:{_Y_AXIS_PX + 3}px">{axis}</div>'
        "</div>",
    )


def chart_image_html(history, index: int) -> str:
    """GPU ``index``'s chart over ``history`` as one ``<img>`` (an SVG data URI).

    The same chart as the live one (key, 0-100 % scale, time axis), drawn whole in the
    image with plain colours (:data:`~.style.PLAIN`): what a saved notebook keeps, since a
    sanitiser (an untrusted notebook, GitHub, nbviewer) drops inline ``<svg>`` and stylesheets
    but keeps images.
    """
    points = chart_points(history, index)
    times = [p[0] for p in points]
    xs = [_x_of(t, times[0]) for t in times]
    x0 = xs[0] if xs else 0
    span = max(1, xs[-1] - x0) if xs else 1
    when, _ = _time_axis(times)
    label = (
        f"GPU {int(index)}: utilization % (solid) and memory used % (dashed), {when}, "
        f"{len(points)} samples"
    )
    lines = "".join(
        _polylines(
            [
                None if p[k] is None else f"{x},{_y_text(p[k])}"
                for x, p in zip(xs, points, strict=True)
            ],
            cls,
        )
        for k, cls in ((2, "cm-line-mem"), (1, "cm-line-util"))
    )
    left, w, mid = _Y_AXIS_PX + 3, CHART_WIDTH_PX - _Y_AXIS_PX - 3, CHART_HEIGHT_PX // 2
    if len(times) > 1:
        axis = (
            f'<text x="{left}" y="80">{_clock(times[0])}</text>'
            f'<text x="{left + w // 2}" y="80" text-anchor="middle">'
            f"{span_text(times[-1] - times[0])} shown</text>"
            f'<text x="{CHART_WIDTH_PX}" y="80" text-anchor="end">{_clock(times[-1])}</text>'
        )
    else:
        axis = f'<text x="{left}" y="80">{esc(when)}</text>'
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{CHART_WIDTH_PX}" height="84">'
        f"<style>text{{font:11px sans-serif;fill:{PLAIN['text']}}}"
        f".cm-line-util{{stroke:{PLAIN['util']}}}"
        f".cm-line-mem{{stroke:{PLAIN['mem']};stroke-dasharray:4 2}}</style>"
        '<line class="cm-line-util" x1="0" y1="7" x2="16" y2="7" stroke-width="2"/>'
        '<text x="20" y="11">utilization</text>'
        '<line class="cm-line-mem" x1="100" y1="7" x2="116" y2="7" stroke-width="2"/>'
        '<text x="120" y="11">memory used</text>'
        f'<text x="{_Y_AXIS_PX}" y="24" text-anchor="end">100%</text>'
        f'<text x="{_Y_AXIS_PX}" y="{20 + mid}" text-anchor="end">50%</text>'
        f'<text x="{_Y_AXIS_PX}" y="{16 + CHART_HEIGHT_PX}" text-anchor="end">0%</text>'
        f'<rect x="{left}" y="16" width="{w}" height="{CHART_HEIGHT_PX}" fill="none" '
        'stroke="#888"/>'
        f'<line x1="{left}" y1="{16 + mid}" x2="{left + w}" y2="{16 + mid}" stroke="#888" '
        'stroke-dasharray="2 3"/>'
        f'<svg x="{left}" y="16" width="{w}" height="{CHART_HEIGHT_PX}" '
        f'viewBox="{x0} 0 {span} 100" preserveAspectRatio="none">{lines}</svg>{axis}</svg>'
    )
    uri = "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode("ascii")
    return (
        f'<img class="cm-chart" src="{uri}" width="{CHART_WIDTH_PX}" height="84" '
        f'alt="{esc(label)}" title="{esc(label)}" style="flex:0 0 {CHART_WIDTH_PX}px">'
    )


# ---- whole views ----------------------------------------------------------------------------


def _status_kind(sample, label: str) -> tuple:
    """``(kind, when)`` of the title line: LIVE or REPLAY of a file, and the sample's time."""
    if label.startswith("replay of "):
        kind = f"{badge('REPLAY', 'warn')} of <code>{esc(label[len('replay of ') :])}</code>"
        return kind, "recorded at " + (esc(sample.timestamp) if sample else "-")
    return badge("LIVE", "ok"), esc(sample.timestamp) if sample else "-"


def status_html(sample, label: str, state: str, samples_taken: int, error: str) -> str:
    """Title line: live or REPLAY (clearly labelled), time, counters, last sampler error."""
    kind, when = _status_kind(sample, label)
    return (
        f'<div class="cm-status"><b>gpuwatch</b> <span>{kind}</span> <span>· {when}</span> '
        f"<span>· samples: {int(samples_taken)}</span> <span>· {esc(state)}</span></div>"
        + _error_line(error)
    )


def _error_line(error: str) -> str:
    """The sampler's last error under the title line, or nothing."""
    return f"<div>{badge('sampler error', 'error')} {esc(error)}</div>" if error else ""


def status_head_html(label: str, state: str, error: str) -> str:
    """The live widget's title line: what :func:`status_html` says but the sample's.

    It changes when the monitor's state does (started, stopped, an error), not at each tick.
    """
    kind, _ = _status_kind(None, label)
    return (
        f'<div class="cm-status"><b>gpuwatch</b> <span>{kind}</span> <span>· {esc(state)}</span>'
        "</div>" + _error_line(error)
    )


def status_tick_html(sample, label: str, samples_taken: int) -> str:
    """The live widget's line of the latest sample: its time and the samples taken so far."""
    _, when = _status_kind(sample, label)
    if not label.startswith("replay of "):
        when = f"last sample {when}" if sample else "no sample yet"
    return (
        f'<div class="cm-status cm-tick"><span>{when}</span> '
        f"<span>· samples: {int(samples_taken)}</span></div>"
    )


def gpu_row(card: str, chart: list) -> list:
    """One GPU's row as pieces: its card and its chart (below the card in a narrow output)."""
    return ['<div class="cm-gpu-row"><div class="cm-card">', card, "</div>", *chart, "</div>"]


def snapshot_html(sample, history, label, state, samples_taken, error) -> str:
    """Static HTML of the whole monitor.

    The ``text/html`` form and the snapshot a stopped monitor leaves.
    """
    parts = [f"<style>{WATCH_CSS}</style>", status_html(sample, label, state, samples_taken, error)]
    if sample is not None:
        for g in sample.gpus:
            parts += gpu_row(gpu_html(g), [chart_image_html(history, g.index)])
        parts.append(f"<div>{host_html(sample)}</div>")
    return page("".join(parts), "watch")


def live_fallback_line(label: str, started_s: float, interval_s: float) -> str:
    """What a saved notebook says for a monitor that was running when saved.

    It was live, and how to see it.
    """
    what = (
        f"replay of {label[len('replay of ') :]}"
        if label.startswith("replay of ")
        else "live monitor"
    )
    return (
        f"gpuwatch: {what}, started {_clock(started_s)}, every {interval_s:g} s; its values were "
        "shown by a "
        "widget and not saved. Re-run the cell to watch again."
    )


def live_fallback_html(label: str, started_s: float, interval_s: float) -> str:
    """The ``text/html`` that accompanies the live widget.

    The ``text/html`` that accompanies the live widget (shown where the widget cannot be: a saved
    notebook opened elsewhere, nbviewer, GitHub).
    """
    return page(
        '<div class="cm-box '
        f'cm-info">{esc(live_fallback_line(label, started_s, interval_s))}</div>',
        "watch",
    )
