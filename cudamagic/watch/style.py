"""The look of ``%gpuwatch`` on JupyterLab's theme variables.

The look of ``%gpuwatch`` (GPU cards, bars, charts, cluster tiles) on JupyterLab's theme variables.

:data:`WATCH_CSS` adds to :data:`cudamagic.core.style.CSS`: every rule starts with ``.cudamagic``
and every colour is a ``var(--jp-...)`` theme variable (the literal after the comma is only the
fallback for front ends without JupyterLab's variables, such as nbviewer). Chosen so the light and
dark themes both reach WCAG AA:

* text: ``--jp-content-font-color1`` (labels and values) and ``--jp-content-font-color2`` (secondary
    text, 4.6:1 on
  the light theme's white, 9:1 on the dark theme's background); never ``color3``.
* bars: utilization ``--jp-brand-color1``, memory ``--jp-success-color1`` on a
    ``--jp-layout-color2`` track
  (3.2:1 or more against the track and 4.2:1 or more against the page in both themes); the driver's
  memory reserve is the memory colour hatched, so it reads as part of the memory bar without a third
  colour.
* charts: transparent background (the page's), a ``--jp-border-color1`` frame, the same two line
    colours, memory
  dashed so the key does not depend on colour alone.

Layout: a GPU row is a wrapping flex box (``cm-gpu-row``): the card grows, the chart has a fixed
    width, so at an
output narrower than about 660 px the chart moves below the numbers and every GPU's chart has the
same width and the same time axis. A bar and its value sit in one ``white-space:nowrap`` group
(``cm-meter``).

No IPython or ipywidgets import here; plain strings.
"""

from __future__ import annotations

import functools

#: Line / bar colours (theme variables with a fallback for front ends without them).
UTIL = "var(--jp-brand-color1,#1976d2)"
MEM = "var(--jp-success-color1,#388e3c)"

#: The same colours without theme variables: inline styles in outputs saved into notebooks (a
#: sanitiser drops ``var()``), and the charts' images; 4.5:1 or more on white, 3:1 on the dark
#: theme's background.
PLAIN = {"util": "#1976d2", "mem": "#388e3c", "text": "#767676"}

#: Width of every chart (px): the same for all GPUs so their time axes line up.
CHART_WIDTH_PX = 300
#: Width of a bar (px).
BAR_WIDTH_PX = 120

WATCH_CSS = f"""
.cudamagic.cm-part,.cudamagic .cm-part{{line-height:1.4;min-width:0}}
.cudamagic .cm-status{{display:flex;flex-wrap:wrap;gap:2px 8px;align-items:center}}
.cudamagic .cm-gpu-row{{display:flex;flex-wrap:wrap;gap:4px 16px;align-items:flex-start;
  margin:6px 0}}
.cudamagic .cm-card{{flex:1 1 340px;min-width:0}}
.cudamagic .cm-gpu-head{{font-weight:600}}
.cudamagic table.cm-rows{{border-collapse:collapse;margin:2px 0;color:inherit}}
.cudamagic table.cm-rows tr,.cudamagic table.cm-rows tr:nth-child(odd){{background:transparent}}
.cudamagic table.cm-rows td{{border:none;line-height:1.4;text-align:left;vertical-align:top;
  padding:0}}
.cudamagic table.cm-rows td.cm-k{{padding:0 10px 0 0}}
.cudamagic .cm-rows .cm-k{{color:var(--jp-content-font-color2,inherit)}}
.cudamagic .cm-meter{{white-space:nowrap;display:inline-flex;align-items:center;gap:6px}}
.cudamagic .cm-bar{{display:inline-block;width:{BAR_WIDTH_PX}px;height:10px;flex:0 0 auto;
  overflow:hidden;background:var(--jp-layout-color2,transparent);
  border:1px solid var(--jp-border-color1,currentColor);border-radius:2px;
  box-sizing:border-box;vertical-align:middle;white-space:nowrap}}
.cudamagic .cm-bar>span{{display:inline-block;height:100%}}
.cudamagic .cm-fill-util{{background:{UTIL}!important}}
.cudamagic .cm-fill-mem{{background:{MEM}!important}}
.cudamagic .cm-fill-rsv{{
  background-image:repeating-linear-gradient(135deg,{MEM} 0 2px,transparent 2px 5px)}}
.cudamagic .cm-lost{{font-weight:600}}
.cudamagic .cm-procs{{margin-top:2px}}
.cudamagic .cm-procs td.cm-prose{{min-width:6em}}
.cudamagic .cm-procs th{{overflow-wrap:normal}}
.cudamagic .cm-own{{font-weight:600}}
.cudamagic .cm-chart{{flex:0 0 {CHART_WIDTH_PX}px;width:{CHART_WIDTH_PX}px;font-size:11px;
 color:var(--jp-content-font-color2,inherit)}}
.cudamagic .cm-chart-key{{display:flex;flex-wrap:wrap;gap:0 10px}}
.cudamagic .cm-chart-body{{display:flex;align-items:stretch;gap:3px}}
.cudamagic .cm-chart-y{{display:flex;flex-direction:column;justify-content:space-between;
  text-align:right;
 min-width:3.2em;font-variant-numeric:tabular-nums}}
.cudamagic .cm-chart svg{{display:block;flex:1 1 auto;min-width:0;
  border:1px solid var(--jp-border-color1,currentColor);
 background:transparent}}
.cudamagic .cm-chart-x{{display:flex;justify-content:space-between;gap:6px;
  margin-left:calc(3.2em + 3px);
 font-variant-numeric:tabular-nums}}
.cudamagic .cm-chart polyline{{fill:none;stroke-width:1.5px;vector-effect:non-scaling-stroke}}
.cudamagic .cm-line-util{{stroke:{UTIL}}}
.cudamagic .cm-line-mem{{stroke:{MEM};stroke-dasharray:4 2}}
.cudamagic .cm-grid{{stroke:var(--jp-border-color2,currentColor);stroke-dasharray:2 3}}
.cudamagic .cm-swatch{{display:inline-block;width:16px;height:0;vertical-align:middle;
  margin-right:3px;
 border-top:2px solid {UTIL}}}
.cudamagic .cm-swatch.cm-mem{{border-top:2px dashed {MEM}}}
.cudamagic .cm-gpu-tiles .cm-host{{display:flex;flex-wrap:wrap;align-items:flex-start;gap:2px;
  margin:2px 0}}
.cudamagic .cm-host-name{{flex:0 0 150px;min-width:0;overflow-wrap:anywhere}}
.cudamagic .cm-tile{{width:48px;padding:1px 3px;
  border:1px solid var(--jp-border-color1,currentColor);
 border-radius:2px;background:var(--jp-layout-color1,transparent);font-size:10px;box-sizing:border-box}}
.cudamagic .cm-tile .cm-tbar{{height:4px;margin-top:1px;
  background:var(--jp-layout-color2,transparent)}}
.cudamagic .cm-tile .cm-tbar>div{{height:4px}}
.cudamagic .cm-stale{{font-weight:600}}
.cudamagic.cm-watch .widget-html-content{{min-width:0;max-width:100%}}
.cudamagic .cm-detail table.cm-table th,
.cudamagic .cm-detail table.cm-table td{{overflow-wrap:normal}}
.cudamagic .cm-detail table.cm-table th.cm-num{{white-space:normal!important}}
.cudamagic .cm-key-item{{white-space:nowrap}}
"""


def bar_html(frac, kind: str, reserved_frac=None, title: str = "") -> str:
    """A :data:`BAR_WIDTH_PX` bar on a track, filled to ``frac`` (0-1, clamped; None = empty).

    Args:
        frac: the filled fraction.
        kind: ``"util"`` or ``"mem"`` (the colour class).
        reserved_frac: with ``kind="mem"``, the driver's reserve (``memory.reserved``) drawn hatched
            after the fill.
        title: tooltip (already escaped).
    """
    frac = 0.0 if frac is None else max(0.0, min(1.0, frac))
    extra = ""
    if reserved_frac is not None:
        r = max(0.0, min(1.0 - frac, reserved_frac))
        extra = (
            '<span class="cm-fill-rsv" title="driver reserve (memory.reserved)" '
            f'style="display:inline-block;height:100%;width:{r * 100:.1f}%"></span>'
        )
    tip = f' title="{title}"' if title else ""
    # the look inline too, in plain colours: a sanitiser drops the stylesheet and every var()
    return (
        f'<span class="cm-bar"{tip} role="presentation" style="display:inline-block;'
        f"width:{BAR_WIDTH_PX}px;height:10px;border:1px solid #888;"
        f'vertical-align:middle;white-space:nowrap;overflow:hidden">'
        f'<span class="cm-fill-{kind}" style="display:inline-block;height:100%;'
        f'width:{frac * 100:.1f}%;background-color:{PLAIN[kind]}"></span>{extra}</span>'
    )


#: The inline styles of :func:`bar_html`, :func:`meter_html` and the card's rows that the
#: stylesheet above repeats (the same look): the live widget, which has the stylesheet, drops them
#: (a card's HTML is a third smaller, and a tick sends every card); a fill keeps its width.
LIVE_DROPS = (
    (' style="text-align:left;vertical-align:top;padding:0 10px 0 0"', ""),
    (' style="text-align:left;vertical-align:top;padding:0"', ""),
    (' style="white-space:nowrap"', ""),
    (
        f' style="display:inline-block;width:{BAR_WIDTH_PX}px;height:10px;border:1px solid #888;'
        'vertical-align:middle;white-space:nowrap;overflow:hidden"',
        ' style="border:1px solid #888"',  # a plain grey, as in a saved notebook
    ),
    ('style="display:inline-block;height:100%;width:', 'style="width:'),
    *((f";background-color:{PLAIN[k]}", "") for k in ("util", "mem")),
)


def live_html(html: str) -> str:
    """``html`` without the inline styles :data:`LIVE_DROPS` lists (for the live widget)."""
    return functools.reduce(lambda h, drop: h.replace(*drop), LIVE_DROPS, html)


def meter_html(bar: str, value_html: str) -> str:
    """A bar and its value kept on one line (they never separate when the output is narrow)."""
    return (
        f'<span class="cm-meter" style="white-space:nowrap">{bar} <span>{value_html}</span></span>'
    )
