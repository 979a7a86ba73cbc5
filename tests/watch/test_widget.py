"""Tier 1 for the %gpuwatch widget and HTML.

Tier 1 for the %gpuwatch widget and HTML: trait updates and their messages without a kernel, the
Stop button, the REPLAY label, escaping of hostile names, theme colours only, charts with scale, key
and time span, the driver model; tier 2 (a real InteractiveShell's display machinery) for the
snapshot that replaces the widget when the monitor stops and the fallback saved beside a live
widget.
"""

import re
import sys

import pytest

from cudamagic.watch import monitor as W
from cudamagic.watch.clusterview import cluster_html
from cudamagic.watch.render import (
    gpu_html,
    host_html,
    live_fallback_html,
    sample_text,
    snapshot_html,
    span_text,
)
from cudamagic.watch.result import WIDGET_VIEW
from cudamagic.watch.style import CHART_WIDTH_PX, PLAIN, WATCH_CSS, live_html
from cudamagic.watch.trace import read_trace
from cudamagic.watch.widget import WatchView
from tests.fake_nvml import GIB, HOSTILE_NAME
from tests.watch.fakes import DEMO, gpu_row, live, wait_until

# ---- widget update logic without a kernel
# -----------------------------------------------------------


def _messages(view, monkeypatch) -> list:
    """``(widget, state keys)`` of each comm message the view's widgets send from now on."""
    sent = []
    for w in view.widgets():
        orig = w._send

        def spy(msg, buffers=None, w=w, orig=orig):
            sent.append((w, sorted(msg.get("state", {}))))
            return orig(msg, buffers)

        monkeypatch.setattr(w, "_send", spy)
    return sent


def test_a_tick_sends_one_message_and_the_stop_one_for_the_button(fake_nvml, monkeypatch):
    fake_nvml("gpu_without_fan")
    src = live()
    view = WatchView([0, 1], label="live")
    s1, s2 = src.read(1, 1000.0), src.read(2, 1001.0)
    view.apply(s1, [s1], samples_taken=1)
    first = view.gpus.value
    sent = _messages(view, monkeypatch)
    view.apply(s2, [s1, s2], samples_taken=2)
    assert sent == [(view.gpus, ["value"])]  # one message: the GPUs' widget, nothing held
    assert view.gpus.value != first  # utilization moved
    assert "samples: 2" in view.gpus.value and "LIVE" in view.status.value
    assert "samples" not in view.status.value  # the title line moves with the state only
    assert "<polyline" in gpu_row(view, 0)
    assert "not supported on this GPU" in gpu_row(view, 1)  # NA reason shown and as tooltip
    assert 'title="not supported on this GPU"' in gpu_row(view, 1)
    sent.clear()
    view.apply(s2, [s1, s2], state="stopped (end)", samples_taken=2, stopped=True)
    assert view.button.disabled and view.button.description == "Stopped"
    # the title line, and the button's two traits in one message
    assert sent == [(view.status, ["value"]), (view.button, ["description", "disabled"])]
    sent.clear()
    view.apply(s2, [s1, s2], state="stopped (end)", samples_taken=2, stopped=True)
    assert sent == []  # stopped already: nothing new to say
    view.close()


def test_widget_stop_button_calls_back():
    called = []
    view = WatchView([0], on_stop=lambda: called.append(1))
    view.button.click()
    assert called == [1]
    view.close()


def test_replay_is_labelled_as_replay():
    _, samples = read_trace(DEMO)
    view = WatchView([0, 1], label="replay of examples/<b>trace</b>.jsonl")
    view.apply(samples[0], samples[:1], samples_taken=1)
    assert (
        "REPLAY" in view.status.value and "recorded at " + samples[0].timestamp in view.gpus.value
    )
    assert (
        "<b>trace</b>" not in view.status.value and "&lt;b&gt;trace&lt;/b&gt;" in view.status.value
    )
    assert sample_text(samples[0], "replay of x.jsonl").startswith(
        "gpuwatch  REPLAY of x.jsonl  recorded"
    )
    view.close()


# ---- escaping ------------------------------------------------------------------------------------


def test_hostile_process_names_and_paths_are_escaped(fake_nvml):
    fake = fake_nvml("one_gpu")
    fake.gpus[0]["processes"] = [(4242, GIB)]
    fake.gpus[0]["name"] = "<script>alert('gpu')</script>"
    src = live(
        proc_info=lambda pid: (HOSTILE_NAME, '/tmp/"><svg onload=alert(2)>/run.py', True),
        show_cmdlines=True,
    )  # another user's command line, shown on request
    s = src.read(1, 0.0)
    html_parts = [
        gpu_html(s.gpus[0]),
        host_html(s),
        snapshot_html(
            s, [s], "replay of /tmp/<img src=y onerror=alert(3)>.jsonl", "x", 1, "<b>err</b>"
        ),
    ]
    html = "".join(html_parts)
    for bad in (HOSTILE_NAME, "<script>", "<svg onload", "<img src=y", "<b>err</b>"):
        assert bad not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "&lt;script&gt;" in html
    assert "&quot;&gt;&lt;svg onload=alert(2)&gt;" in html
    # the text form shows the name verbatim (it is text)
    assert HOSTILE_NAME in sample_text(s)


# ---- theme colours only
# ----------------------------------------------------------------------------

# : A colour literal: #rgb/#rrggbb(aa), rgb()/rgba()/hsl()/hsla(), or a CSS colour keyword used as a
# value.
_COLOUR = re.compile(
    r"#[0-9a-fA-F]{3,8}\b|\b(?:rgba?|hsla?)\(|(?<![\w-])(?:white|black|gr[ae]y|silver|red|green|blue|"
    r"orange|yellow|navy|maroon|purple|teal)(?![\w-])",
    re.I,
)
_THEME_VAR = re.compile(r"var\(--jp-[\w-]+(?:,[^()]*)?\)")


def hard_coded_colours(html: str) -> list:
    """Colour literals outside ``var(--jp-NAME, fallback)``.

    Colour literals outside ``var(--jp-NAME, fallback)`` (the fallback is for front ends without the
    theme). Only style and SVG paint are searched: visible text may say "green".
    """
    styles = re.findall(r"<style>(.*?)</style>", html, re.S)
    styles += re.findall(r'(?:style|fill|stroke|color|background)="([^"]*)"', html)
    return [m.group() for css in styles for m in _COLOUR.finditer(_THEME_VAR.sub("", css))]


def test_the_colour_check_finds_hard_coded_colours():
    assert hard_coded_colours('<span style="color:#555">x</span>') == ["#555"]
    assert hard_coded_colours(
        '<svg style="background:#fafafa"><polyline stroke="#3b7dd8"/></svg>'
    ) == ["#fafafa", "#3b7dd8"]
    assert hard_coded_colours("<style>.a{background:white}</style>") == ["white"]
    assert (
        hard_coded_colours('<b style="color:var(--jp-error-color1,#d32f2f)">the green GPU</b>')
        == []
    )


def test_widget_and_snapshot_use_theme_colours_only(fake_nvml):
    fake = fake_nvml("gpu_without_fan")
    fake.gpus[0]["processes"] = [(4242, GIB)]
    src = live()
    s1, s2 = src.read(1, 1000.0), src.read(2, 1001.0)
    view = WatchView([0, 1], label="live")
    view.apply(s2, [s1, s2], samples_taken=2, error="12:00:00 reading failed")
    htmls = [w.value for w in view.widgets() if isinstance(getattr(w, "value", None), str)] + [
        view.style.value
    ]
    htmls += [
        snapshot_html(s2, [s1, s2], "live", "stopped", 2, "boom"),
        live_fallback_html("live", 1000.0, 1.0),
        cluster_html(s2, [s1, s2]),
        f"<style>{WATCH_CSS}</style>",
    ]
    assert all("var(--jp-" in h for h in htmls[-4:])
    from cudamagic.core.style import hard_coded_colours as shared_check

    # the inline look a sanitiser keeps (bars, tiles): plain colours the stylesheet overrides
    # with the theme's where it applies (cm-fill-*), and greys that read on both themes
    plain = {*PLAIN.values(), "#888", "#8883"}
    found = {h[:60]: set(hard_coded_colours(h) + shared_check(h)) - plain for h in htmls}
    assert all(not v for v in found.values()), found
    assert all(f".cm-fill-{k}{{background:var(--jp-" in WATCH_CSS for k in ("util", "mem"))
    assert ".cm-fill-util{background:var(--jp-brand-color1,#1976d2)!important}" in WATCH_CSS
    assert not set(hard_coded_colours(f"<style>{WATCH_CSS}</style>")) & {"#888", "#8883"}
    view.close()


def test_live_cards_drop_only_the_inline_look_the_stylesheet_repeats(fake_nvml):
    fake_nvml("gpu_without_fan")
    src = live()
    s0, s = src.read(1, 1000.0), src.read(2, 1001.0)
    card = gpu_html(s.gpus[0])
    view = WatchView([0])
    view.apply(s, [s0, s])
    shown = gpu_row(view, 0)
    assert live_html(card) in shown and len(live_html(card)) < 0.7 * len(card)
    assert re.sub(r"<[^>]*>", "", live_html(card)) == re.sub(r"<[^>]*>", "", card)  # same text
    # what stays inline: the fills' widths and the tracks' plain grey border
    kept = set(re.findall(r'style="([^"]*)"', live_html(card)))
    assert kept and all(re.fullmatch(r"width:[\d.]+%|border:1px solid #888", k) for k in kept)
    # every dropped declaration is the stylesheet's for that element (the fills' colour: the
    # stylesheet's theme colour wins over the inline plain one with !important)
    css = WATCH_CSS.replace("\n", "")
    rules = {sel.strip(): body for sel, body in re.findall(r"([^{}]+)\{([^}]*)\}", css)}
    for sel, dropped in (
        (".cudamagic table.cm-rows td", "text-align:left;vertical-align:top;padding:0"),
        (".cudamagic table.cm-rows td.cm-k", "padding:0 10px 0 0"),
        (".cudamagic .cm-meter", "white-space:nowrap"),
        (
            ".cudamagic .cm-bar",
            "display:inline-block;width:120px;height:10px;vertical-align:middle;"
            "white-space:nowrap;overflow:hidden",
        ),
        (".cudamagic .cm-bar>span", "display:inline-block;height:100%"),
    ):
        assert set(dropped.split(";")) <= {d.strip() for d in rules[sel].split(";")}, sel
    assert "!important" in rules[".cudamagic .cm-fill-util"]
    # the chart lines: their look in the stylesheet, as attributes only in the saved images
    assert "<polyline" in shown and 'fill="none"' not in shown and "stroke-width" not in shown
    look = {"fill:none", "stroke-width:1.5px", "vector-effect:non-scaling-stroke"}
    assert set(rules[".cudamagic .cm-chart polyline"].split(";")) == look
    view.close()


# ---- charts: scale, key, time span, one time axis for all GPUs
# ----------------------------------------


def test_charts_have_scale_key_span_and_share_one_time_axis(fake_nvml):
    fake_nvml("gpu_without_fan")
    src = live()
    samples = [src.read(i, 1000.0 + 2 * i) for i in range(1, 32)]  # 60 s of samples every 2 s
    view = WatchView([0, 1])
    view.apply(samples[-1], samples, samples_taken=31)
    charts = [gpu_row(view, 0), gpu_row(view, 1)]
    for c in charts:
        assert re.search(r"<span>100%</span><span>50%</span><span>0%</span>", c)  # the scale
        assert (
            "utilization" in c and "memory used" in c and 'class="cm-swatch cm-mem"' in c
        )  # the key
        assert "1 min shown" in c  # the time span
        assert f'width="{CHART_WIDTH_PX - 34 - 3}"' in c
    xs = [
        [
            p.split(",")[0]
            for pl in re.findall(r'cm-line-util"[^>]*points="([^"]*)"', c)
            for p in pl.split()
        ]
        for c in charts
    ]
    assert xs[0] == xs[1] and xs[0][0] == "0" and xs[0][-1] == "6000"  # same time axis
    # the plot spans the first to the last sample (x in centiseconds)
    assert all('viewBox="0 0 6000 100"' in c for c in charts)
    assert f".cm-chart{{flex:0 0 {CHART_WIDTH_PX}px" in WATCH_CSS  # every chart as wide
    assert (
        span_text(45) == "45 s" and span_text(125) == "2 min 5 s" and span_text(3780) == "1 h 3 min"
    )
    view.close()


def test_narrow_output_layout_wraps_and_keeps_bar_with_value(fake_nvml):
    fake_nvml("one_gpu")
    s = live().read(1, 0.0)
    view = WatchView([0])
    view.apply(s, [s], samples_taken=1)
    header, row = view.root.children[0], view.root.children[1]
    assert view.root.children[-1] is view.style and view.style.layout.display == "none"
    assert (
        header.layout.flex_flow == "row wrap" and view.button.layout.flex == "0 0 auto"
    )  # Stop never cut
    assert row is view.gpus and row.layout.min_width == "0"
    assert '<div class="cm-gpu-row"><div class="cm-card">' in row.value  # chart goes below
    card = gpu_row(view, 0)
    assert re.search(
        r'<span class="cm-meter"[^>]*><span class="cm-bar"[^>]*>.*?</span> '
        r"<span>\d+ %</span></span>",
        card,
    )
    assert (
        ".cm-meter{white-space:nowrap" in WATCH_CSS
        and ".cm-gpu-row{display:flex;flex-wrap:wrap" in WATCH_CSS
    )
    assert {"cudamagic", "mathjax_ignore"} <= set(view.root._dom_classes)
    view.close()


# ---- the driver model (Windows)
# ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "scenario, shown", [("windows_wddm", "WDDM"), ("windows_tcc", "TCC"), ("one_gpu", None)]
)
def test_card_shows_the_driver_model_where_nvml_has_one(fake_nvml, monkeypatch, scenario, shown):
    from cudamagic.core import platform, wincounters

    if shown:
        monkeypatch.setattr(
            platform, "SYSTEM", "windows"
        )  # NVML answers the driver model on Windows only
        monkeypatch.setitem(sys.modules, "win32pdh", None)
        wincounters.set_source(None)
    fake_nvml(scenario)
    g = live().read(1, 0.0).gpus[0]
    head = re.search(r'<div class="cm-gpu-head">(.*?)</div>', gpu_html(g)).group(1)
    if shown:
        assert f"· {shown}</span>" in head
    else:
        assert "WDDM" not in head and "TCC" not in head and "driver model" not in head


# ---- saved notebooks: the snapshot replaces the widget when the monitor stops
# ------------------------------


def test_stop_replaces_the_widget_by_a_static_snapshot(ip, fake_nvml):
    from IPython.utils.capture import capture_output

    fake_nvml("gpu_without_fan")
    watch = W.start_watch(live(), interval_s=0.05, history_len=50)
    try:
        with capture_output() as cap:
            ip.display_formatter.format(
                watch
            )  # what IPython does with `watch` as a cell's last line
            live_out = cap.outputs[-1]
            assert (
                WIDGET_VIEW in live_out.data
                and live_out.data[WIDGET_VIEW]["model_id"] == watch.view.root.model_id
            )
            display_id = live_out.transient["display_id"]
            # the fallback saved beside the widget says it was live, not the first sample labelled
            # "running"
            started = re.search(r"started (\d\d:\d\d:\d\d)", live_out.data["text/html"]).group(1)
            assert "live monitor, started " + started in live_out.data["text/plain"].splitlines()[0]
            assert "Re-run the cell to watch again" in live_out.data["text/html"]
            assert "running" not in live_out.data["text/html"]
            assert "running" not in live_out.data["text/plain"].split("\n\n", 1)[1].splitlines()[0]
            assert "when displayed" in live_out.data["text/plain"]
            assert wait_until(lambda: watch.samples_taken >= 3)
            watch.view.button.click()  # Stop
            updates = [o for o in cap.outputs if o.update]
        assert len(updates) == 1 and updates[0].transient["display_id"] == display_id
        snap = updates[0].data
        assert set(snap) == {"text/plain", "text/html"}  # no widget-only output left
        last = watch.latest
        assert (
            f"samples: {watch.samples_taken}" in snap["text/html"]
            and "stopped" in snap["text/html"]
        )
        assert last.timestamp in snap["text/html"] and last.timestamp in snap["text/plain"]
        assert "data:image/svg+xml;base64," in snap["text/html"]  # the charts, as images
        assert 'class="cudamagic' in snap["text/html"]
        assert (
            watch.view.root.comm is None and watch.view.button.comm is None
        )  # the widgets were closed
        with capture_output() as cap2:  # displaying a stopped monitor shows the snapshot, no widget
            ip.display_formatter.format(watch)
        assert (
            WIDGET_VIEW not in cap2.outputs[0].data
            and "stopped" in cap2.outputs[0].data["text/html"]
        )
    finally:
        watch.stop()
        watch.view.close()


def test_count_reached_in_the_sampler_thread_replaces_the_widget(ip, fake_nvml):
    from IPython.utils.capture import capture_output

    fake_nvml("one_gpu")
    watch = W.start_watch(live(), interval_s=0.05, history_len=50, count=4)
    try:
        with capture_output() as cap:
            watch.display()
            assert wait_until(lambda: any(o.update for o in cap.outputs))
        (update,) = [o for o in cap.outputs if o.update]
        assert update.transient == cap.outputs[0].transient and WIDGET_VIEW not in update.data
        assert (
            "samples: 4" in update.data["text/html"]
            and "4 samples taken (--count)" in update.data["text/html"]
        )
        assert "running" not in update.data["text/plain"].splitlines()[0]
    finally:
        watch.stop()
        watch.view.close()


def test_unload_ext_replaces_the_widget_by_its_snapshot(ip, fake_nvml, monkeypatch):
    """``%unload_ext cudamagic`` stops the monitor and leaves the snapshot in the cell.

    Its cleanup.
    """
    from IPython.utils.capture import capture_output

    from cudamagic.watch.magic import WatchMagics

    fake_nvml("one_gpu")
    monkeypatch.setattr(WatchMagics, "_widgets_ok", lambda self: True)  # as in a Jupyter kernel
    watch = ip.run_line_magic("gpuwatch", "--interval 0.1")
    try:
        with capture_output() as cap:
            ip.display_formatter.format(watch)
            assert WIDGET_VIEW in cap.outputs[0].data and watch.running
            ip.run_line_magic("unload_ext", "cudamagic")
        assert not watch.running
        (update,) = [o for o in cap.outputs if o.update]
        assert update.transient == cap.outputs[0].transient and WIDGET_VIEW not in update.data
        assert (
            "stopped" in update.data["text/html"]
            and f"samples: {watch.samples_taken}" in update.data["text/html"]
        )
    finally:
        watch.stop()
        watch.view.close()
        ip.run_line_magic("load_ext", "cudamagic")  # the fixture unloads it again


def test_status_shows_its_fix(fake_nvml, monkeypatch):
    import pynvml

    from cudamagic.core import platform

    monkeypatch.setattr(platform, "in_container", lambda: True)
    fake_nvml({"init_error": pynvml.NVML_ERROR_UNKNOWN, "gpus": []})
    html = host_html(live().read(1, 0.0))
    assert "lost access to its GPU devices" in html and "<b>Fix:</b> recreate the container" in html


def test_sampler_error_is_shown_escaped_under_both_title_lines(fake_nvml):
    fake_nvml("gpu_without_fan")
    s1 = live().read(1, 1000.0)
    view = WatchView([0, 1])
    view.apply(s1, [s1], samples_taken=1, error="12:00:00 reading failed: <b>x</b>")
    snap = snapshot_html(s1, [s1], "live", "stopped", 1, "12:00:00 reading failed: <b>x</b>")
    for html in (view.status.value, snap):
        assert "sampler error" in html and "reading failed: &lt;b&gt;x&lt;/b&gt;" in html
    view.apply(s1, [s1], samples_taken=1)
    assert "sampler error" not in view.status.value  # gone once the error is cleared
    view.close()
