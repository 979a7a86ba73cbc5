"""Outputs %gpuwatch saves into a notebook read right where a sanitiser strips them.

An untrusted notebook (nbclient, papermill, CI, a colleague's file), GitHub and nbviewer drop
every ``<style>`` and ``<svg>``: the snapshot a stopped monitor leaves and the cluster view's
must still show their bars, charts and tables (tests/watch/sanitiser.py plays JupyterLab's
sanitiser).
"""

from __future__ import annotations

import base64
import re

from cudamagic.watch.clusterview import cluster_html
from cudamagic.watch.render import live_fallback_html, snapshot_html
from cudamagic.watch.trace import read_trace
from tests.watch.fakes import ROOT, live
from tests.watch.sanitiser import sanitise

DATALOADER = f"{ROOT}/examples/trace_dataloader.jsonl"


def _images(html: str) -> list:
    return [
        base64.b64decode(u).decode()
        for u in re.findall(r'<img [^>]*src="data:image/svg\+xml;base64,([^"]+)"', html)
    ]


def test_a_saved_snapshot_keeps_its_charts_bars_and_tables_sanitised():
    _, samples = read_trace(DATALOADER)
    html = snapshot_html(samples[-1], samples, "replay of t.jsonl", "stopped", 20, "")
    assert "<svg" not in html  # nothing that needs a trusted notebook: no line asking for trust
    shown = sanitise(html)
    assert "<style" not in shown and ".cudamagic" not in shown and "{" not in shown
    # the chart: an image drawing every sample's utilization, with its key and time axis
    (chart,) = _images(shown)
    util = re.search(r'<polyline class="cm-line-util"[^>]*points="([^"]*)"', chart).group(1).split()
    assert [int(p.split(",")[1]) for p in util] == [100 - s.gpus[0].gpu_util_pct for s in samples]
    assert "utilization" in chart and "memory used" in chart and "19 s shown" in chart
    # the bars keep their size and colour inline, the readings their table
    fills = re.findall(r'class="cm-fill-(\w+)"[^>]*style="([^"]*)"', shown)
    assert [k for k, _ in fills] == ["util", "mem", "rsv"]
    assert "width:3.4%" in fills[1][1] and "background-color:#388e3c" in fills[1][1]
    assert 'class="cm-bar" style="display:inline-block;width:120px;height:10px' in shown
    assert re.search(r'<td class="cm-k" style="text-align:left[^"]*">memory</td>', shown)
    assert "517.0 MiB / 15.0 GiB" in shown and "DataLoader workers: 0" in shown


def test_the_cluster_snapshot_keeps_its_tiles_sanitised(fake_nvml):
    fake_nvml("gpu_without_fan")
    src = live()
    s1, s2 = src.read(1, 1000.0), src.read(2, 1001.0)
    html = cluster_html(s2, [s1, s2])
    assert "<svg" not in html
    shown = sanitise(html)
    tiles = re.findall(r'<div class="cm-tile" title="[^"]*" style="([^"]*)"', shown)
    assert len(tiles) == 2 and all("display:inline-block" in t and "width:48px" in t for t in tiles)
    bars = re.findall(r'class="cm-fill-(util|mem)" style="height:4px;width:(\d+)%', shown)
    assert len(bars) == 2 * 2  # two per tile
    assert (
        len(
            re.findall(
                r"class=\"cm-fill-(?:util|mem)\" style=\"display:inline-block;width:12px", shown
            )
        )
        == 2
    )  # the key
    assert "each tile: GPU index, utilization" in shown and "<table" in shown


def test_the_line_a_running_monitor_saves_reads_the_same_sanitised():
    html = live_fallback_html("live", 1000.0, 1.0)
    assert "its values were shown by a widget and not saved" in sanitise(html)
