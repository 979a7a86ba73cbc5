"""The cluster view of ``%gpuwatch --source``: text, HTML tiles, widget.

The cluster view of ``%gpuwatch --source prometheus://...``: text table, HTML tiles and the widget.

One compact tile per GPU (utilization and memory bars, host and index), grouped by host, then the
usual per-GPU detail for one selected host (utilization %, memory, temperature, power, SM clock,
DCGM profiling ratios 0-1, MIG instances, job labels). A stale sample (the server did not answer)
keeps the last good values on screen under a "stale since HH:MM:SS: reason" line.

Every outside string (host names, pod names, label values, GPU names, error text) is escaped with
:func:`cudamagic.core.fmt.esc` (HTML) or :func:`~cudamagic.core.fmt.terminal_safe` (text).
``ipywidgets`` is imported in :class:`ClusterView` only. No IPython import here.
"""

from __future__ import annotations

import textwrap
import time

from ..core.fmt import (
    TEXT_WIDTH,
    clip,
    esc,
    format_bytes,
    html_table,
    plural,
    terminal_safe,
    text_table,
)
from ..core.na import is_na
from ..core.style import badge, page, scroll
from .style import PLAIN, WATCH_CSS
from .widget import View, root_box, set_value
from .widget import part as _part


def last_good(sample, history=()):
    """``(sample with GPU data or None, stale NA or None)``.

    A stale sample is replaced by the newest good one.
    """
    status = getattr(sample, "nvml_status", None)
    if sample is not None and is_na(status) and status.code == "stale":
        good = next((s for s in reversed(list(history)) if s.gpus), None)
        return good, status
    return sample, None


def stale_hosts(source) -> dict:
    """The hosts whose exporter stopped being scraped.

    ``{host: {"since", "reason", "gpus"}}`` of the hosts whose exporter stopped being scraped while
    the server answers (kept by the cluster source, see
    :class:`cudamagic.watch.cluster.HostTracker`).
    """
    return dict(getattr(source, "stale_hosts", None) or {})


def with_stale(gpus, stale: dict) -> list:
    """``gpus`` plus the last GPUs of each stale host not in ``gpus``, in (host, index) order."""
    hosts = {g.host for g in gpus}
    extra = [g for h, v in stale.items() if h not in hosts for g in v["gpus"]]
    return sorted([*gpus, *extra], key=lambda g: (g.host, g.index)) if extra else list(gpus)


def stale_text(info: dict) -> str:
    """``'exporter down since HH:MM:SS: reason'`` for one entry of :func:`stale_hosts`."""
    since = time.strftime("%H:%M:%S", time.localtime(info["since"]))
    return f"exporter down since {since}: {info['reason']}"


def by_host(gpus) -> dict:
    """``{host: [GpuSample, ...]}`` in (host, index) order."""
    out = {}
    for g in gpus:
        out.setdefault(g.host, []).append(g)
    return out


def _pct(v) -> str:
    return "N/A" if is_na(v) else f"{v:.0f}%"


def _mem_pct(g):
    u, t = g.memory_used_bytes, g.memory_total_bytes
    if is_na(u) or is_na(t) or not t:
        return None
    return 100.0 * u / t


def _watts(mw) -> str:
    return "N/A" if is_na(mw) else f"{mw / 1000:.0f} W"


def host_summary(gpus) -> dict:
    """Mean utilization, memory used/total (bytes) and power (mW, each GPU once).

    The mean is over the GPUs that report utilization.
    """
    utils = [g.gpu_util_pct for g in gpus if not is_na(g.gpu_util_pct)]
    used = sum(g.memory_used_bytes for g in gpus if not is_na(g.memory_used_bytes))
    total = sum(g.memory_total_bytes for g in gpus if not is_na(g.memory_total_bytes))
    power = [g.power_draw_mw for g in gpus if not is_na(g.power_draw_mw)]
    return {
        "gpus": len(gpus),
        "util_pct": sum(utils) / len(utils) if utils else None,
        "memory_used_bytes": used,
        "memory_total_bytes": total,
        "power_draw_mw": sum(power) if power else None,
        "power_na": len(gpus) - len(power),
    }


def _status_line(label, state, error, stale, source) -> str:
    parts = [label, state]
    if stale is not None:
        parts.append(stale.reason)
    if source is not None and getattr(source, "job_match", ""):
        parts.append(f"--job matched {source.job_match}")
    if error:
        parts.append(f"last error: {error}")
    return " | ".join(p for p in parts if p)


# ---- text ---------------------------------------------------------------------------------


def cluster_text(sample, history=(), label="cluster", state="", error="", source=None) -> str:
    """Plain-text cluster view.

    One line per host (GPUs, mean util, memory, power, per-GPU util %).
    """
    shown, stale = last_good(sample, history)
    lines = textwrap.wrap(
        terminal_safe(_status_line(label, state, error, stale, source)),
        TEXT_WIDTH,
        break_on_hyphens=False,
        break_long_words=False,
    )
    down = stale_hosts(source)
    if shown is None or not (shown.gpus or down):
        why = getattr(sample, "nvml_status", None) if sample is not None else None
        lines.append(f"No GPU data{': ' + terminal_safe(why.reason) if is_na(why) else ' yet'}.")
        return "\n".join(lines)
    rows = []
    for host, gpus in by_host(with_stale(shown.gpus, down)).items():
        s = host_summary(gpus)
        per = " ".join(
            "MIG"
            if g.mig_enabled is True and is_na(g.gpu_util_pct)
            else _pct(g.gpu_util_pct).rstrip("%")
            for g in gpus
        )
        rows.append(
            [
                clip(
                    terminal_safe(host or "(no host label)") + (" (stale)" if host in down else ""),
                    24,
                ),
                s["gpus"],
                "N/A" if s["util_pct"] is None else f"{s['util_pct']:.0f}%",
                f"{format_bytes(s['memory_used_bytes'])}/{format_bytes(s['memory_total_bytes'])}",
                "N/A" if s["power_draw_mw"] is None else f"{s['power_draw_mw'] / 1000:.0f} W",
                clip(per, 40),
            ]
        )
    lines.append(
        f"{plural(len(shown.gpus), 'GPU')} on {plural(len(rows) - len(down), 'host')} at "
        f"{shown.timestamp}" + (f"; {plural(len(down), 'host')} stale" if down else "")
    )
    lines.append(text_table(["host", "GPUs", "util", "memory", "power", "util % per GPU"], rows))
    for host, info in down.items():
        lines += textwrap.wrap(
            terminal_safe(f"{host} (stale): {stale_text(info)}; its last values are shown"),
            TEXT_WIDTH,
            break_on_hyphens=False,
            break_long_words=False,
        )
    return "\n".join(lines)


# ---- HTML ---------------------------------------------------------------------------------


# A saved tile's look inline too (a sanitiser drops the stylesheet): plain colours, which the
# stylesheet's theme colours (cm-fill-*) override where it applies. The live view's tiles carry
# only their data (a 512-GPU refresh sends every tile).
_TBAR_LIVE = '<div class="cm-tbar"><div class="cm-fill-{k}" style="width:{w:.0f}%"></div></div>'
_TILE = (
    "display:inline-block;vertical-align:top;width:48px;padding:1px 3px;margin:0 2px 2px 0;"
    "border:1px solid #888;border-radius:2px;font-size:10px;box-sizing:border-box"
)
_TBAR = (
    '<div class="cm-tbar" style="height:4px;margin-top:1px;background-color:#8883">'
    '<div class="cm-fill-{k}" style="height:4px;width:{w:.0f}%;background-color:{c}"></div></div>'
)
_KEY = (
    '<span class="cm-fill-{k}" style="display:inline-block;width:12px;height:4px;'
    'vertical-align:middle;margin-right:3px;background-color:{c}"></span>'
)


def tile_html(g, saved: bool = False) -> str:
    """One GPU tile: index, utilization bar, memory bar; the tooltip has the numbers (escaped).

    Colours are the theme's (:mod:`.style`): the same utilization and memory colours as the GPU
    cards. ``saved``: styled inline too, for an output saved into a notebook.
    """
    util = None if is_na(g.gpu_util_pct) else max(0.0, min(100.0, float(g.gpu_util_pct)))
    mem = _mem_pct(g)
    tip = (
        f"{g.host} GPU {g.index} {'' if is_na(g.name) else g.name}\nutilization "
        f"{_pct(g.gpu_util_pct)}"
        f"{' (' + g.gpu_util_pct.reason + ')' if is_na(g.gpu_util_pct) else ''}\nmemory "
        f"{format_bytes(g.memory_used_bytes)} / {format_bytes(g.memory_total_bytes)}\npower "
        f"{_watts(g.power_draw_mw)}"
    )
    shown = esc(_pct(g.gpu_util_pct)) if util is not None else "–"
    bar, style = (_TBAR, f' style="{_TILE}"') if saved else (_TBAR_LIVE, "")
    return (
        f'<div class="cm-tile" title="{esc(tip)}"{style}>'
        f"<div>{int(g.index)}{' MIG' if g.mig_enabled is True else ''}"
        f'<span style="float:right">{shown}</span></div>'
        + bar.format(w=util or 0, k="util", c=PLAIN["util"])
        + bar.format(w=mem or 0, k="mem", c=PLAIN["mem"])
        + "</div>"
    )


def tiles_html(gpus, stale=None, saved: bool = False) -> str:
    """Every GPU as a tile, one wrapping row per host.

    Every GPU as a tile, one wrapping row per host (host name, GPU count, mean utilization, power).
    A host of ``stale`` (:func:`stale_hosts`) keeps its last tiles, marked by an error badge
    "exporter down since HH:MM:SS" and a dashed outline (not dimmed, so the last values stay
    readable). ``saved``: tiles styled inline too (:func:`tile_html`).
    """
    stale = stale or {}
    out = []
    for host, hg in by_host(gpus).items():
        s = host_summary(hg)
        util = "N/A" if s["util_pct"] is None else f"{s['util_pct']:.0f}%"
        info = stale.get(host)
        mark = (
            ""
            if info is None
            else f'<div class="cm-host-stale">{badge(stale_text(info), "error")}</div>'
        )
        out.append(
            f'<div class="cm-host{" cm-stale" if info else ""}" data-host="{esc(host)}"'
            + (' style="outline:1px dashed var(--jp-error-color1,currentColor)"' if info else "")
            + ">"
            '<span class="cm-host-name" style="display:inline-block;width:150px;'
            'vertical-align:top">'
            f"<b>{esc(host or '(no host label)')}</b> "
            f"{plural(len(hg), 'GPU').replace(' ', '&nbsp;')} "
            f"{esc(util)}</span>" + "".join(tile_html(g, saved) for g in hg) + mark + "</div>"
        )
    key = (
        '<div class="cm-muted">each tile: GPU index, utilization; bars: <span class="cm-key-item">'
        f"{_KEY.format(k='util', c=PLAIN['util'])}utilization (upper)</span>, "
        f'<span class="cm-key-item">{_KEY.format(k="mem", c=PLAIN["mem"])}memory used (lower)'
        "</span>; host: GPUs, mean utilization</div>"
    )
    return '<div class="cm-gpu-tiles">' + "".join(out) + key + "</div>"


#: Column titles of DCGM's profiling ratios (the DCGM field in the tooltip).
RATIO_TITLES = {
    "gr_engine_active": "engine active",
    "sm_active": "SM active",
    "sm_occupancy": "SM occupancy",
    "tensor_active": "tensor active",
    "dram_active": "DRAM active",
}


def _ratio(ratios: dict, k) -> str:
    return esc("–" if k not in ratios else ("N/A" if is_na(ratios[k]) else f"{ratios[k]:.2f}"))


def detail_html(gpus) -> str:
    """The per-GPU table of one host (DCGM profiling ratios in their own columns, as 0-1 ratios).

    Key columns only, so it fits a 950 px output: a GPU's job labels go under its name, and each
    MIG instance is a row under its GPU (its memory and its own ratios).
    """
    ratio_names = sorted(
        {k for g in gpus for k, _ in (*g.ratios, *(r for m in g.mig_devices for r in m.ratios))}
    )
    rows = []
    for g in gpus:
        temp = g.temperature_c
        labels = ", ".join(f"{k}={v}" for k, v in g.labels)
        rows.append(
            [
                str(int(g.index)),
                esc("N/A" if is_na(g.name) else g.name)
                + (f'<br><small class="cm-muted">{esc(labels)}</small>' if labels else ""),
                esc(_pct(g.gpu_util_pct))
                + (
                    f" <small>({esc(g.gpu_util_pct.reason)})</small>"
                    if is_na(g.gpu_util_pct)
                    else ""
                ),
                esc(f"{format_bytes(g.memory_used_bytes)} / {format_bytes(g.memory_total_bytes)}"),
                esc("N/A" if is_na(temp) else f"{temp} °C"),
                esc(_watts(g.power_draw_mw))
                + (
                    f" <small>({esc(g.power_draw_mw.reason)})</small>"
                    if is_na(g.power_draw_mw)
                    else ""
                ),
                esc("N/A" if is_na(g.clock_sm_mhz) else f"{g.clock_sm_mhz} MHz"),
                *(_ratio(dict(g.ratios), k) for k in ratio_names),
            ]
        )
        for m in g.mig_devices:
            mem = f"{format_bytes(m.memory_used_bytes)} / {format_bytes(m.memory_total_bytes)}"
            rows.append(
                ["", esc(f"↳ MIG {m.uuid}"), "–", esc(mem), "", "", ""]
                + [_ratio(dict(m.ratios), k) for k in ratio_names]
            )
    headers = ["GPU", "name", "util", "memory", "temp", "power", "SM clock"]
    return (
        '<div class="cm-detail">'
        + scroll(
            html_table(
                headers + [f"{RATIO_TITLES.get(k, k)} (0-1)" for k in ratio_names],
                rows,
                num=(0, 3, 4, 5, 6, *range(7, 7 + len(ratio_names))),
                prose=(1, 2),
                titles=[""] * len(headers)
                + [f"DCGM profiling field {k}: a ratio 0-1, not percent" for k in ratio_names],
            )
        )
        + "</div>"
    )


def status_html(sample, history, label, state, error, source=None) -> str:
    """The status line (escaped).

    A stale sample is marked with an error badge, not by text colour alone.
    """
    shown, stale = last_good(sample, history)
    n = (
        f"{plural(len(shown.gpus), 'GPU')} at {shown.timestamp} | "
        if shown is not None and shown.gpus
        else ""
    )
    line = _status_line(label, state, error, stale, source)
    extra = ""
    if shown is None or not (shown.gpus or stale_hosts(source)):
        why = getattr(sample, "nvml_status", None) if sample is not None else None
        extra = f"<div>No GPU data{': ' + esc(why.reason) if is_na(why) else ' yet'}.</div>"
    mark = f"{badge('stale', 'error')} " if stale is not None else ""
    cls = "cm-cluster-status cm-stale" if stale is not None else "cm-cluster-status cm-muted"
    return f'<div class="{cls}">{mark}{esc(n + line)}</div>{extra}'


def cluster_html(
    sample, history=(), label="cluster", state="", error="", source=None, host=None
) -> str:
    """Static HTML of the whole cluster view (the snapshot kept in saved notebooks)."""
    shown, _ = last_good(sample, history)
    parts = [status_html(sample, history, label, state, error, source)]
    down = stale_hosts(source)
    if shown is not None and (shown.gpus or down):
        gpus = with_stale(shown.gpus, down)
        parts.append(tiles_html(gpus, down, saved=True))
        groups = by_host(gpus)
        pick = host if host in groups else next(iter(groups))
        parts.append(f"<div><b>{esc(pick)}</b></div>" + detail_html(groups[pick]))
    return page(f"<style>{WATCH_CSS}</style>" + "".join(parts), "cluster")


# ---- the widget ---------------------------------------------------------------------------


class ClusterView(View):
    """The ipywidgets tree of a cluster monitor, built once.

    Status and Stop, tiles, a host picker, the selected host's detail. The host picker's options
    change only when the set of hosts changes.
    """

    def __init__(self, source=None, label: str = "cluster", on_stop=None):
        import ipywidgets as W

        super().__init__(label, on_stop)
        self.source = source
        self.tiles = W.HTML(layout=W.Layout(min_width="0"))
        self.picker = W.Dropdown(description="host", options=[])
        self.detail = W.HTML(layout=W.Layout(min_width="0"))
        self.root = root_box([self.header, self.tiles, self.picker, self.detail, self.style])
        self.root.add_class("cm-cluster")
        self.picker.observe(lambda _change: self._refresh_detail(), names="value")
        self._shown = None

    def widgets(self) -> list:
        """Every widget whose value :meth:`apply` sets."""
        return [*super().widgets(), self.tiles, self.picker, self.detail]

    def _refresh_detail(self):
        shown = self._shown
        if not shown:
            return
        groups = by_host(shown)
        pick = self.picker.value if self.picker.value in groups else next(iter(groups))
        set_value(self.detail, _part(detail_html(groups[pick])))

    def show(self, sample, history, state, samples_taken, error) -> None:
        """Set the values (a stale sample keeps the last good tiles under a red status line)."""
        shown, _ = last_good(sample, history)
        set_value(
            self.status, _part(status_html(sample, history, self.label, state, error, self.source))
        )
        down = stale_hosts(self.source)
        if shown is None or not (shown.gpus or down):
            return
        self._shown = gpus = with_stale(shown.gpus, down)
        set_value(self.tiles, _part(tiles_html(gpus, down)))
        hosts = list(by_host(gpus))
        if list(self.picker.options) != hosts:
            keep = self.picker.value if self.picker.value in hosts else hosts[0]
            with self.picker.hold_sync():  # options and value: one message
                self.picker.options = hosts
                self.picker.value = keep
        self._refresh_detail()


class ClusterViews:
    """How a monitor draws a cluster source: tiles widget, text, HTML."""

    def __init__(self, source):
        self.source = source

    def view(self, label: str, on_stop=None) -> ClusterView:
        """The widget tree."""
        return ClusterView(self.source, label=label, on_stop=on_stop)

    def text(self, sample, history, label, state, error) -> str:
        """The text table."""
        return cluster_text(sample, history, label, state, error, self.source)

    def html(self, sample, history, label, state, samples_taken, error) -> str:
        """The static HTML snapshot."""
        return cluster_html(sample, history, label, state, error, self.source)
