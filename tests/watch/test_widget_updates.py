"""A monitor tick renders and sends only what changed: unchanged GPU cards set no trait."""

from __future__ import annotations

import dataclasses
import random
import re

from cudamagic.watch import render, widget
from cudamagic.watch.render import gpu_html
from cudamagic.watch.style import live_html
from cudamagic.watch.widget import WatchView
from tests.fake_nvml import GIB
from tests.watch.fakes import gpu_row, live


def _count_sets(view):
    sets = []
    for w in view.widgets():
        if hasattr(w, "value"):
            w.observe(lambda change, w=w: sets.append(w), "value")
    return sets


def test_an_unchanged_gpu_card_is_not_rendered_and_all_gpus_are_one_trait_set(
    fake_nvml, monkeypatch
):
    fake = fake_nvml("gpu_without_fan")
    fake.gpus[1]["util_gpu"] = 40  # GPU 1 reads the same at every tick
    fake.gpus[0]["util_gpu"] = lambda t: 10 + t  # GPU 0 moves
    src = live()
    view = WatchView([0, 1])
    s1 = src.read(1, 1000.0)
    view.apply(s1, [s1], samples_taken=1)
    rendered = []
    monkeypatch.setattr(
        widget,
        "gpu_html",
        lambda g, live, memo: rendered.append(g.index) or gpu_html(g, live, memo),
    )
    sets = _count_sets(view)
    s2 = src.read(2, 1001.0)
    card1 = gpu_row(view, 1).split('<div class="cm-chart">')[0]
    view.apply(s2, [s1, s2], samples_taken=2)
    assert rendered == [0]
    # one message a tick: all GPUs' cards (kept as they were), charts and the sample's line
    assert sets == [view.gpus]
    assert gpu_row(view, 1).startswith(card1) and "2 samples" in gpu_row(view, 1)
    assert len(view.root.children) == 3  # header, GPUs and host, stylesheet
    view.close()


def test_a_card_changes_again_when_its_gpu_does(fake_nvml):
    fake = fake_nvml("gpu_without_fan")
    src = live()
    view = WatchView([0, 1])
    s1 = src.read(1, 1000.0)
    view.apply(s1, [s1], samples_taken=1)
    before = gpu_row(view, 1)
    g1 = dataclasses.replace(s1.gpus[1], temperature_c=88)
    s2 = dataclasses.replace(s1, seq=2, timestamp_s=1001.0, gpus=(s1.gpus[0], g1))
    view.apply(s2, [s1, s2], samples_taken=2)
    assert gpu_row(view, 1) != before and "88 °C" in gpu_row(view, 1)
    assert live_html(gpu_html(g1)) in gpu_row(view, 1) and live_html(gpu_html(s1.gpus[1])) in before
    del fake
    view.close()


def test_a_tick_where_one_reading_moved_renders_that_row_only(fake_nvml, monkeypatch):
    fake_nvml("one_gpu")
    g1 = live().read(1, 1000.0).gpus[0]
    g2 = dataclasses.replace(g1, gpu_util_pct=g1.gpu_util_pct + 7)
    monkeypatch.setattr(render, "_PIECES", {})  # nothing kept from other tests
    gpu_html(g1)
    built = []
    for name in ("_head_html", "_util_row", "_memory_row", "_other_rows", "processes_html"):
        orig = getattr(render, name)
        monkeypatch.setattr(
            render, name, lambda g, orig=orig, name=name: built.append(name) or orig(g)
        )
    html = gpu_html(g2)
    assert built == ["_util_row"]
    assert f"{g2.gpu_util_pct} %" in html and html != gpu_html(g1)


def test_cells_of_equal_values_of_other_types_are_written_apart():
    assert render._cell(1) == "1" and render._cell(True) == "True" and render._cell(1.0) == "1.0"


def _drawn(polylines_html: str) -> list:
    """The lines an SVG draws: per polyline, its points without those between two as high.

    (A point in a flat stretch changes nothing drawn: the line goes straight through it.)
    """
    lines = []
    for text in re.findall(r'points="([^"]*)"', polylines_html):
        pts = [tuple(map(int, p.split(","))) for p in text.split()]
        lines.append(
            [
                p
                for i, p in enumerate(pts)
                if i in (0, len(pts) - 1) or not pts[i - 1][1] == p[1] == pts[i + 1][1]
            ]
        )
    return lines


def test_a_chart_line_kept_point_by_point_draws_what_its_points_draw():
    rng = random.Random(1)
    for _ in range(200):
        n = rng.choice([2, 3, 5, 120])
        line, points = widget._Line(n), []
        flat = rng.random() < 0.5  # long flat stretches (memory that does not move)
        for k in range(rng.randint(0, 300)):
            y = rng.choice([40, 41]) if flat else rng.randint(0, 100)
            p = None if rng.random() < 0.05 else f"{k},{y}"  # None: a gap
            line.add(p)
            points = [*points, p][-n:]
            shown = line.polylines("c")
            assert _drawn(shown) == _drawn(render._polylines(points, "c", "")), (n, k)
            if None not in points and len(points) > 1:  # one polyline, flat stretches cut
                assert _drawn(shown) == [
                    [
                        tuple(map(int, p.split(",")))
                        for p in re.findall(r'points="([^"]*)"', shown)[0].split()
                    ]
                ], (n, k)


def test_a_flat_chart_line_is_two_points_long():
    line = widget._Line(120)
    for k in range(300):
        line.add(f"{10 * k},{1 if 100 <= k < 150 else 99}")  # a step up, then down again
    (text,) = re.findall(r'points="([^"]*)"', line.polylines("c"))
    assert text.split() == ["1800,99", "2990,99"]  # the step went by
    for k in range(300, 310):
        line.add(f"{10 * k},{50 + k % 2}")
    (text,) = re.findall(r'points="([^"]*)"', line.polylines("c"))
    assert text.split() == [
        "1900,99",
        "2990,99",
        *(f"{10 * k},{50 + k % 2}" for k in range(300, 310)),
    ]


def test_a_tick_that_shows_nothing_new_sets_no_trait(fake_nvml):
    fake_nvml("gpu_without_fan")
    src = live()
    view = WatchView([0, 1])
    s1 = src.read(1, 1000.0)
    view.apply(s1, [s1], samples_taken=1)
    sets = _count_sets(view)
    view.apply(s1, [s1], samples_taken=1)  # the same sample again (a stop right after a tick)
    assert sets == []
    view.apply(s1, [s1], samples_taken=2)  # only the sample count says something new
    assert sets == [view.gpus]
    view.apply(s1, [s1], state="stopped", samples_taken=2)  # only the title line does
    assert sets == [view.gpus, view.status]
    view.close()


def test_the_live_cards_parts_are_kept_per_gpu_and_built_when_their_values_move(
    fake_nvml, monkeypatch
):
    fake = fake_nvml("gpu_without_fan")
    fake.gpus[0]["util_gpu"] = lambda t: 10 + t  # GPU 0's utilization moves, nothing else
    fake.gpus[1]["util_gpu"] = 40
    src = live()
    view = WatchView([0, 1])
    s1 = src.read(1, 1000.0)
    view.apply(s1, [s1], samples_taken=1)
    built = []
    for name in ("_head_html", "_util_row", "_memory_row", "_other_rows", "processes_html"):
        orig = getattr(render, name)
        monkeypatch.setattr(
            render, name, lambda g, orig=orig, name=name: built.append((g.index, name)) or orig(g)
        )
    monkeypatch.setattr(render, "_PIECES", {})  # nothing kept from other tests
    s2 = src.read(2, 1001.0)
    view.apply(s2, [s1, s2], samples_taken=2)
    assert built == [(0, "_util_row")]
    assert f"{s2.gpus[0].gpu_util_pct} %" in gpu_row(view, 0)
    assert live_html(gpu_html(s2.gpus[0])) in gpu_row(view, 0)  # the card as a whole render
    view.close()


def test_a_live_point_is_the_y_of_the_gpus_readings(fake_nvml):
    fake_nvml("one_gpu")
    g = live().read(1, 0.0).gpus[0]
    gib = 1024**3
    assert render.spark_y(None) == (None, None)
    for util, used, total in [
        (0, 0, 80 * gib),
        (37, 12 * gib, 80 * gib),
        (100, 80 * gib, 80 * gib),
        (49.5, 1, 3),
        (-3, 5 * gib, 4 * gib),  # out of the scale: drawn at its edge
        (104, 0, 0),  # no total: no memory point
        (render.NA("not supported", "not_supported"), 1, 2),
        (12, render.NA("lost", "gpu_lost"), 2),
    ]:
        moved = dataclasses.replace(
            g, gpu_util_pct=util, memory_used_bytes=used, memory_total_bytes=total
        )
        u, m = render.spark_point(moved)
        assert render.spark_y(moved) == (render._y_text(u), render._y_text(m)), (util, used, total)


def test_the_gpus_html_is_sent_as_ascii_and_reads_the_same(fake_nvml):
    fake = fake_nvml("one_gpu")
    fake.gpus[0]["processes"] = [(4242, GIB)]
    src = live(proc_info=lambda pid: ("træner·ü 模型", "python træn.py", True), show_cmdlines=True)
    view = WatchView([0])
    s = src.read(1, 1000.0)
    view.apply(s, [s], samples_taken=1)
    assert view.gpus.value.isascii()  # copied as it is into the UTF-8 message
    shown = gpu_row(view, 0)  # as the browser reads it
    assert "træner·ü 模型" in shown and "°C" in shown and " · memory bandwidth" in shown
    assert live_html(gpu_html(s.gpus[0])) in shown
    view.close()
