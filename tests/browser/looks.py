"""How the outputs look to a person, in both JupyterLab themes and two window widths.

Every output of an executed notebook is surveyed in the light and the dark JupyterLab theme, in a
1400 px and an 800 px window with the file browser open (issue 16).

A notebook is executed once (Run All, by the test module that opened it); :func:`survey` then
switches the theme (``apputils:change-theme``) and resizes the viewport, and in each of the four
states measures, in the page:

* contrast: for every visible text node inside an output, the effective text colour (its
  ``color``, or ``fill`` in SVG, with alpha and ancestor opacity) against the effective background
  (the ancestors' background colours composited, and in SVG the filled shapes painted under the
  text), as a WCAG 2 contrast ratio; below 4.5:1 (3:1 for large text: >= 24 px, or >= 18.66 px
  bold) is a failure. Disabled controls (the monitor's "Stopped" button) are exempt, as in WCAG
  1.4.3. Bars (the fills ``cm-fill-*`` of a ``cm-bar`` track, the ``cm-tbar`` bars of the cluster
  tiles) need 3:1 against their track (WCAG 1.4.11).
* overflow: every element or text run that sticks out of its output area, unless it is inside a
  scroll container within the area that shows a cue: class ``cm-scroll`` from
  ``cudamagic/core/style.py``, or an ``overflow:auto`` box of cudamagic's own HTML whose scrollbar
  CSS does not hide (this Chromium shows classic scrollbars). Neither JupyterLab's horizontal
  scroll of the output area nor ipywidgets' boxes (``overflow:auto`` by default) is a cue: their
  scrollbar sits at the bottom of the output, often out of view.
* graph fit: where each SVG of an ``%%autograd_graph`` output is, and how much of it is visible.

Only cudamagic's own outputs (its HTML, whose outer element has class ``mathjax_ignore`` or a
``cm-*`` class, and widget views: every widget in the example notebooks is a cudamagic monitor) can
fail a check; other outputs (IPython tracebacks in JupyterLab's ANSI colours, pandas tables, plain
stream text) are measured and reported in the summary but are not cudamagic's to fix.

Screenshots of the window go to ``tests/_artifacts/screenshots/<notebook>-<theme>-<width>.png``
(scrolled to the first cudamagic output) and ``...-<magic>.png`` (scrolled to the first output of
each other magic). The results of every survey are kept in :data:`RESULTS` and written to
``tests/_artifacts/looks_summary.json``; the browser conftest prints the lowest contrast per theme
and one screenshot per theme and magic at the end of the run.
"""

from __future__ import annotations

import json
import os
import re

from tests.browser import jlab

THEMES = {"light": "JupyterLab Light", "dark": "JupyterLab Dark"}
WIDTHS = (1400, 800)
HEIGHT = 1000
NORMAL_MIN, LARGE_MIN, BAR_MIN = 4.5, 3.0, 3.0

_HERE = os.path.dirname(os.path.abspath(__file__))
ARTIFACTS = os.path.join(os.path.dirname(_HERE), "_artifacts")
SUMMARY = os.path.join(ARTIFACTS, "looks_summary.json")

#: ``{notebook: {"<theme>-<width>": state result}}`` of every survey of this run
#: (see :func:`survey`).
RESULTS: dict = {}

#: The magics whose outputs get their own screenshot: first magic named in the cell -> short name.
_MAGIC_RE = re.compile(
    r"%%?(cudainfo|gpuwatch|autograd_graph|cudamem|torchprof|cuda|cudaexplain)\b"
)

# ---- in-page measurements -------------------------------------------------------------------

_COMMON_JS = r"""
const cv = document.createElement('canvas'); cv.width = cv.height = 1;
const ctx = cv.getContext('2d', {willReadFrequently: true});
const cache = new Map();
function rgba(css) {            // any CSS colour -> [r, g, b, a] (0-255, alpha 0-1), via the canvas
  if (!css || css === 'none' || css.startsWith('url(')) return null;
  if (cache.has(css)) return cache.get(css);
  ctx.clearRect(0, 0, 1, 1); ctx.fillStyle = '#000'; ctx.fillStyle = css; ctx.fillRect(0, 0, 1, 1);
  const d = ctx.getImageData(0, 0, 1, 1).data;
  const a = d[3] / 255;
  const c = a > 0 ? [d[0], d[1], d[2], a] : [0, 0, 0, 0];
  cache.set(css, c); return c;
}
function over(top, bottom) {    // top (with alpha) composited over an opaque bottom
  const a = top[3];
  return [0, 1, 2].map(i => top[i] * a + bottom[i] * (1 - a)).concat([1]);
}
function lum(c) {
  const f = v => {
    v /= 255;
    return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4);
  };
  return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
}
function ratio(a, b) {
  const x = lum(a), y = lum(b);
  return (Math.max(x, y) + 0.05) / (Math.min(x, y) + 0.05);
}
const hex = c => '#' + c.slice(0, 3).map(v => Math.round(v).toString(16).padStart(2, '0')).join('');
const SHAPES = 'rect,polygon,path,ellipse,circle';
const svgShapes = new Map();
// filled SVG shapes painted before textEl that contain (x, y), in paint order
function shapesUnder(textEl, x, y) {
  const svg = textEl.ownerSVGElement || textEl.closest('svg');
  if (!svg) return [];
  if (!svgShapes.has(svg)) svgShapes.set(svg, [...svg.querySelectorAll(SHAPES)]);
  const out = [];
  for (const s of svgShapes.get(svg)) {
    // s comes after the text
    if (s.compareDocumentPosition(textEl) & Node.DOCUMENT_POSITION_PRECEDING) break;
    const st = getComputedStyle(s);
    const fill = rgba(st.fill);
    if (!fill || fill[3] === 0 || st.visibility === 'hidden' || st.display === 'none') continue;
    const r = s.getBoundingClientRect();
    if (x >= r.left && x <= r.right && y >= r.top && y <= r.bottom) {
      const op = parseFloat(st.fillOpacity) * parseFloat(st.opacity);
      out.push([fill[0], fill[1], fill[2], fill[3] * op]);
    }
  }
  return out;
}
function background(el, x, y) {  // opaque effective background behind el at (x, y)
  const layers = [];
  let svgDone = false;
  for (let e = el; e; e = e.parentElement) {
    if (!svgDone && e instanceof SVGElement && e.tagName.toLowerCase() !== 'svg') {
      layers.push(...shapesUnder(e, x, y).reverse()); svgDone = true;
      if (layers.some(l => l[3] >= 1)) break;
    }
    const c = rgba(getComputedStyle(e).backgroundColor);
    if (c && c[3] > 0) { layers.push(c); if (c[3] >= 1) break; }
  }
  let bg = [255, 255, 255, 1];  // the canvas behind everything
  for (let i = layers.length - 1; i >= 0; --i) bg = over(layers[i], bg);
  return bg;
}
function opacity(el) {
  let o = 1;
  for (let e = el; e; e = e.parentElement) o *= parseFloat(getComputedStyle(e).opacity);
  return o;
}
function describe(el, stop) {   // a short CSS-like path from the output down to el
  const parts = [];
  for (let e = el; e && e !== stop && parts.length < 5; e = e.parentElement) {
    const cls = [...(e.classList || [])].filter(c => !/^(lm-|p-|jp-mod)/.test(c)).slice(0, 2);
    parts.unshift(e.tagName.toLowerCase() + cls.map(c => '.' + c).join(''));
  }
  return parts.join(' > ');
}
const panel = document.querySelector(PANEL);
const cells = panel ? [...panel.querySelectorAll('.jp-Cell.jp-CodeCell')] : [];
function cellOf(el) {
  const c = el.closest('.jp-CodeCell');
  const src = c ? (c.querySelector('.jp-InputArea-editor .cm-content') || c).innerText || '' : '';
  return {cell: cells.indexOf(c), source: src.split('\n').find(l => l.trim()) || ''};
}
const areas = panel ? [...panel.querySelectorAll('.jp-OutputArea-output')] : [];
// cudamagic's own outputs: its HTML (outer element of class mathjax_ignore / cudamagic, or a cm-*
// class) and widget views (every widget of the example notebooks is a cudamagic monitor); the rest
// (IPython tracebacks in JupyterLab's ANSI colours, pandas tables, plain stream text) is measured
// but not ours to fix
// bars: the fills (cm-fill-*, the cluster tiles' bars) on their tracks (cm-bar, cm-tbar), as
// cudamagic/watch draws them
const BAR_FILLS = '.cm-bar > [class*="cm-fill-"], .cm-tbar > div, [data-cm-bar-fill]';
const BAR_TRACKS = '.cm-bar, .cm-tbar, [data-cm-bar-track]';
const OURS_HTML = '.cudamagic, .mathjax_ignore, [class^="cm-"], [class*=" cm-"]';
const OURS = OURS_HTML + ', .jupyter-widgets';
const ours = area => !!area.querySelector(OURS);
"""

CONTRAST_JS = (
    "(PANEL) => {"
    + _COMMON_JS
    + f"const NEED_LARGE = {LARGE_MIN}, NEED_NORMAL = {NORMAL_MIN}, NEED_BAR = {BAR_MIN};"
    + r"""
  const fails = new Map(); let min = null, minAll = null; let n = 0;
  for (const area of areas) {
    const mime = area.getAttribute('data-mime-type')
        || (area.querySelector('.jupyter-widgets') ? 'widget' : '');
    const mine = ours(area);
    const walker = document.createTreeWalker(area, NodeFilter.SHOW_TEXT);
    for (let t = walker.nextNode(); t; t = walker.nextNode()) {
      if (!t.textContent.trim()) continue;
      const el = t.parentElement;
      if (!el || el.closest('style,script,title,desc')) continue;
      // WCAG 1.4.3: inactive controls are exempt
      const disabled = 'button:disabled,input:disabled,select:disabled,[aria-disabled="true"]';
      if (el.closest(disabled)) continue;
      const st = getComputedStyle(el);
      if (st.visibility === 'hidden' || st.display === 'none') continue;
      const range = document.createRange(); range.selectNodeContents(t);
      const rect = [...range.getClientRects()].find(r => r.width > 0 && r.height > 0);
      if (!rect) continue;
      const isSvg = el instanceof SVGElement;
      let fg = rgba(isSvg ? (st.fill !== 'none' ? st.fill : st.stroke) : st.color);
      if (!fg) continue;
      fg = fg.slice();
      fg[3] *= opacity(el) * (isSvg ? parseFloat(st.fillOpacity) : 1);
      const x = rect.left + rect.width / 2, y = rect.top + rect.height / 2;
      const bg = background(el, x, y);
      const eff = over(fg, bg);
      let size = parseFloat(st.fontSize);
      if (isSvg && el.getScreenCTM) {
        const m = el.getScreenCTM();
        if (m) size *= Math.hypot(m.a, m.b);
      }
      const bold = parseInt(st.fontWeight, 10) >= 700;
      const large = size >= 24 || (size >= 18.66 && bold);
      const need = large ? NEED_LARGE : NEED_NORMAL;
      const r = ratio(eff, bg);
      n++;
      const where = cellOf(el);
      const item = {ratio: Math.round(r * 100) / 100, need, fg: hex(eff), bg: hex(bg),
                    size: Math.round(size * 10) / 10, text: t.textContent.trim().slice(0, 40),
                    element: describe(el, area.parentElement), mime,
                    cell: where.cell, source: where.source.slice(0, 60), ours: mine};
      if (!minAll || r < minAll.ratio) minAll = item;
      if (mine && (!min || r < min.ratio)) min = item;
      if (r < need) {
        const key = item.element + '|' + item.fg + '|' + item.bg + '|' + item.cell;
        if (fails.has(key)) fails.get(key).count++;
        else fails.set(key, Object.assign(item, {count: 1}));
      }
    }
  }
  const bars = [];
  for (const area of areas) {
    for (const bar of area.querySelectorAll(BAR_FILLS)) {
      const r0 = bar.getBoundingClientRect();
      const own = rgba(getComputedStyle(bar).backgroundColor);
      // empty, or a pattern (hatching)
      if (r0.width === 0 || r0.height === 0 || !own || own[3] === 0) continue;
      const track = bar.closest(BAR_TRACKS) || bar.parentElement;
      const tb = background(track, r0.left, r0.top);
      const fill = over(own, tb);
      const r = ratio(fill, tb);
      bars.push({ratio: Math.round(r * 100) / 100, need: NEED_BAR, fill: hex(fill), track: hex(tb),
                 element: describe(bar, area.parentElement), cell: cellOf(bar).cell,
                 source: cellOf(bar).source.slice(0, 60)});
    }
  }
  return {texts: n, min, min_all: minAll,
          failures: [...fails.values()].sort((a, b) => a.ratio - b.ratio),
          bars, bar_failures: bars.filter(b => b.ratio < b.need)};
}"""
)

OVERFLOW_JS = (
    "(PANEL) => {"
    + _COMMON_JS
    + r"""
  const found = [];
  function outside(r, a) { return r.right > a.right + 1 || r.left < a.left - 1; }
  // null: fine or judged with an ancestor; else why el hides content
  function verdict(el, area, a) {
    for (let p = el.parentElement; p && p !== area; p = p.parentElement) {
      // an ancestor sticks out too: it is the one named
      if (outside(p.getBoundingClientRect(), a)) return null;
      const s = getComputedStyle(p);
      if (/auto|scroll/.test(s.overflowX)) {
        // a cue: the shared style's cm-scroll (shadows at the cut edges), or a scroll box of
        // cudamagic's own HTML whose scrollbar CSS does not hide (this Chromium shows classic
        // scrollbars; measuring their size proved unreliable after a theme switch). A generic box
        // that merely has overflow:auto (ipywidgets' boxes) is none.
        if (p.classList.contains('cm-scroll')) return null;
        if (p.closest(OURS_HTML) && s.scrollbarWidth !== 'none') return null;
        return 'in a scroll box with no cue '
               + '(no cm-scroll class; not a scroll box of cudamagic\'s HTML): '
               + describe(p, area.parentElement);
      }
      if (s.overflowX === 'hidden' || s.overflowX === 'clip') {
        return 'cut off (hidden) by ' + describe(p, area.parentElement);
      }
    }
    return 'sticks out of the output area';
  }
  for (const area of areas) {
    const a = area.getBoundingClientRect();
    if (a.width === 0) continue;
    // node: el, or the text node whose run r is
    const check = (el, r, what, node) => {
      if (r.width === 0 || r.height === 0 || !outside(r, a)) return;
      const why = verdict(node || el, area, a);
      if (!why) return;
      const where = cellOf(area);
      found.push({element: describe(el, area.parentElement) + (what ? ' ' + what : ''), why,
                  ours: ours(area), left: Math.round(r.left - a.left),
                  right: Math.round(r.right - a.left), area_width: Math.round(a.width),
                  cell: where.cell, source: where.source.slice(0, 60)});
    };
    for (const el of area.querySelectorAll('*')) {
      if (el.closest('style,script')) continue;
      if (getComputedStyle(el).visibility === 'hidden') continue;
      const label = el.tagName.toLowerCase() === 'text'
          ? '("' + el.textContent.trim().slice(0, 30) + '")' : '';
      check(el, el.getBoundingClientRect(), label);
    }
    const walker = document.createTreeWalker(area, NodeFilter.SHOW_TEXT);
    for (let t = walker.nextNode(); t; t = walker.nextNode()) {
      if (!t.textContent.trim() || !t.parentElement) continue;
      if (t.parentElement.closest('style,script')) continue;
      const range = document.createRange(); range.selectNodeContents(t);
      // the element is named instead
      if (outside(t.parentElement.getBoundingClientRect(), a)) continue;
      const label = '(text "' + t.textContent.trim().slice(0, 30) + '")';
      for (const r of range.getClientRects()) check(t.parentElement, r, label, t);
    }
  }
  return found;
}"""
)

GRAPHS_JS = (
    "(PANEL) => {"
    + _COMMON_JS
    + r"""
  const scroller = panel.querySelector('.jp-WindowedPanel-outer')
      || panel.querySelector('.jp-Notebook');
  const viewH = scroller ? scroller.clientHeight : innerHeight;
  const out = [];
  for (const area of areas) {
    const where = cellOf(area);
    if (!/^%%autograd_graph/.test(where.source.trim())) continue;
    const a = area.getBoundingClientRect();
    for (const svg of area.querySelectorAll('svg, img[alt="autograd graph"]')) {
      if (svg.parentElement.closest('svg')) continue;
      const r = svg.getBoundingClientRect();
      if (r.width < 50 || r.height < 50) continue;  // an icon, not the picture
      let vis = {l: r.left, t: r.top, r: r.right, b: r.bottom};
      for (let el = svg.parentElement; el && el !== area.parentElement; el = el.parentElement) {
        const s = getComputedStyle(el);
        if (s.overflowX !== 'visible' || s.overflowY !== 'visible') {
          const c = el.getBoundingClientRect();
          vis = {l: Math.max(vis.l, c.left), t: Math.max(vis.t, c.top),
                 r: Math.min(vis.r, c.right), b: Math.min(vis.b, c.bottom)};
        }
      }
      out.push({cell: where.cell, source: where.source.slice(0, 60),
                w: Math.round(r.width), h: Math.round(r.height),
                visW: Math.round(Math.max(0, vis.r - vis.l)),
                visH: Math.round(Math.max(0, vis.b - vis.t)),
                inside: r.left >= a.left - 1 && r.right <= a.right + 1,
                area_width: Math.round(a.width),
                view_height: viewH, texts: svg.querySelectorAll('text').length});
    }
  }
  return out;
}"""
)

# ---- driving the page -----------------------------------------------------------------------

_SETTLE_JS = """
async (PANEL) => {
  const frame = () => new Promise(r => requestAnimationFrame(() => r()));
  const key = () => [...document.querySelectorAll(PANEL + ' .jp-OutputArea-output')]
      .map(e => {
        const r = e.getBoundingClientRect();
        return [r.width, r.height].map(Math.round).join('x');
      }).join(',');
  let last = key(), same = 0;
  for (let i = 0; i < 300 && same < 3; ++i) {
    await frame();
    const k = key();
    same = k === last ? same + 1 : 0;
    last = k;
  }
  return same >= 3;
}
"""


def settle(page):
    """Wait until the output areas keep their sizes for three animation frames.

    Used after a theme or width change.
    """
    page.evaluate(_SETTLE_JS, jlab.PANEL)


def set_theme(page, theme: str):
    """Switch JupyterLab to ``THEMES[theme]``; wait until it applies.

    Uses the ``apputils:change-theme`` command.
    """
    name = THEMES[theme]
    page.evaluate(
        "name => window.jupyterapp.commands.execute('apputils:change-theme', {theme: name})", name
    )
    page.wait_for_function(
        """([name, light]) => document.body.dataset.jpThemeName === name
             && document.body.dataset.jpThemeLight === String(light)""",
        arg=[name, theme == "light"],
        timeout=60_000,
        polling=100,
    )
    settle(page)


def open_sidebar(page):
    """Show the file browser in the left sidebar (as a person working in Lab has it)."""
    page.evaluate("() => window.jupyterapp.shell.activateById('filebrowser')")
    page.wait_for_function(
        "() => { const e = document.getElementById('filebrowser');"
        " return !!e && e.getBoundingClientRect().width > 100; }",
        timeout=30_000,
        polling=100,
    )


def set_width(page, width: int):
    page.set_viewport_size({"width": width, "height": HEIGHT})
    # JupyterLab's main dock panel; Notebook 7 has none: its notebook panel
    page.wait_for_function(
        "(w) => { const m = document.getElementById('jp-main-dock-panel')"
        " || document.querySelector('.jp-NotebookPanel');"
        " return !!m && m.getBoundingClientRect().right <= w; }",
        arg=width,
        timeout=30_000,
        polling=100,
    )
    settle(page)


def _magic_outputs(page):
    """``[(magic, cell index)]``: the first output of each magic in the notebook.

    The error explainer box counts as a magic.
    """
    seen, out = set(), []
    for i, src in enumerate(jlab.cell_sources(page)):
        m = _MAGIC_RE.search(src)
        kind = m.group(1) if m else None
        cell = jlab.code_cells(page).nth(i)
        if cell.locator(".jp-OutputArea-output", has_text="cudamagic explains").count():
            kind = "explainer" if kind in (None, "cudaexplain") else kind
        if kind and kind not in seen and cell.locator(".jp-OutputArea-output").count():
            seen.add(kind)
            out.append((kind, i))
    return out


def survey(page, notebook: str, screenshots: str) -> dict:
    """Measure every output of the open notebook in each theme and width; keep screenshots.

    Returns ``{"<theme>-<width>": {"contrast": {...}, "overflow": [...], "graphs": [...],
    "shots": {...}}}`` (also stored in :data:`RESULTS` and written to :data:`SUMMARY`). The page is
    left in the light theme at 1400 px, as the other checks expect it. Notebook 7 has no file
    browser beside a notebook: there the window is measured without it.
    """
    stem = os.path.splitext(notebook)[0]
    lab = getattr(page, "front_end", "lab") == "lab"
    results = RESULTS.setdefault(stem, {})
    magics = _magic_outputs(page)
    try:
        if lab:
            open_sidebar(page)
        for theme in THEMES:
            set_theme(page, theme)
            for width in WIDTHS:
                set_width(page, width)
                state = {
                    "contrast": page.evaluate(CONTRAST_JS, jlab.PANEL),
                    "overflow": page.evaluate(OVERFLOW_JS, jlab.PANEL),
                    "graphs": page.evaluate(GRAPHS_JS, jlab.PANEL),
                    "shots": {},
                }
                # what a person sees: the window, scrolled to the top of each magic's first
                # output (the first one is <notebook>-<theme>-<width>.png)
                for n, (kind, i) in enumerate(magics):
                    jlab.outputs(jlab.code_cells(page).nth(i)).evaluate(
                        "e => e.scrollIntoView({block: 'start'})"
                    )
                    name = f"{stem}-{theme}-{width}" + (f"-{kind}" if n else "")
                    state["shots"][kind] = jlab.shot(page, screenshots, name)
                if not magics:
                    state["shots"]["page"] = jlab.shot(page, screenshots, f"{stem}-{theme}-{width}")
                results[f"{theme}-{width}"] = state
                write_summary()
    finally:
        set_theme(page, "light")
        set_width(page, WIDTHS[0])
    return results


# ---- results --------------------------------------------------------------------------------


def lowest(theme: str, which: str = "min"):
    """The lowest text contrast item measured in ``theme`` in this run, or None.

    Over every survey of this run. ``which``: ``"min"`` among cudamagic's outputs, ``"min_all"``
    among all outputs.
    """
    items = [
        s["contrast"][which] | {"notebook": nb, "state": key}
        for nb, states in RESULTS.items()
        for key, s in states.items()
        if key.startswith(theme + "-") and s["contrast"][which]
    ]
    return min(items, key=lambda i: i["ratio"]) if items else None


def write_summary():
    os.makedirs(ARTIFACTS, exist_ok=True)
    data = {
        "lowest_contrast": {t: lowest(t) for t in THEMES},
        "lowest_contrast_all_outputs": {t: lowest(t, "min_all") for t in THEMES},
        "notebooks": RESULTS,
    }
    with open(SUMMARY, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1)


def _fmt(items, keys, limit=25):
    lines = [", ".join(f"{k}={it.get(k)!r}" for k in keys if k in it) for it in items[:limit]]
    more = f"\n  ... and {len(items) - limit} more" if len(items) > limit else ""
    return "\n  " + "\n  ".join(lines) + more


def assert_contrast(results: dict, theme: str):
    """Every text node (and bar) in ``theme`` at both widths meets WCAG AA.

    The message names each offender.
    """
    bad, bars = [], []
    for width in WIDTHS:
        c = results[f"{theme}-{width}"]["contrast"]
        assert c["texts"] > 0, (
            f"no text measured in the outputs at {width} px: is anything rendered?"
        )
        bad += [
            f | {"width": width}
            for f in c["failures"]
            if f["ours"]
            and not any(
                b["element"] == f["element"] and b["fg"] == f["fg"] and b["bg"] == f["bg"]
                for b in bad
            )
        ]
        bars += c["bar_failures"]
    assert not bad and not bars, (
        f"{theme} theme: {len(bad)} text(s) below WCAG AA contrast"
        + _fmt(
            bad,
            ("ratio", "need", "fg", "bg", "text", "element", "cell", "source", "count", "width"),
        )
        + (
            f"\nbars below {BAR_MIN}:1 against their track:"
            + _fmt(bars, ("ratio", "fill", "track", "element", "cell"))
            if bars
            else ""
        )
    )


def assert_no_hidden_overflow(results: dict, width: int):
    """Nothing sticks out of its output area without a scroll cue, in either theme at ``width``."""
    found = []
    for theme in THEMES:
        for item in results[f"{theme}-{width}"]["overflow"]:
            if item["ours"] and not any(
                f["element"] == item["element"] and f["cell"] == item["cell"] for f in found
            ):
                found.append(item)
    assert not found, (
        f"{width} px window with the file browser open: {len(found)} element(s) wider than their "
        "output area without a visible scroll cue (class cm-scroll, or a visible scrollbar)"
        + _fmt(found, ("element", "why", "left", "right", "area_width", "cell", "source"))
    )


# ---- what main still fails ------------------------------------------------------------------

#: Checks that fail on main while the branches of issue 16 that fix them have not landed:
#: ``(notebook stem, check, theme or width) -> reason``. They are strict xfails: when a fix lands,
#: the XPASS fails the run, and the entry is deleted here.
KNOWN_FAILURES: dict = {}


#: Defects seen on main that depend on the data of the run.
#: Non-strict xfails: XPASS when the run avoided them.
# (the %%torchprof timeline legend that ran past the SVG edge is fixed)
SOMETIMES_FAILING: dict = {}


def params(notebook: str, check: str, values):
    """``values`` for ``pytest.mark.parametrize``, with known failures marked xfail.

    Those in :data:`KNOWN_FAILURES` are marked ``xfail(strict=True)``, those in
    :data:`SOMETIMES_FAILING` ``xfail(strict=False)``.
    """
    import pytest

    out = []
    for v in values:
        key = (notebook, check, v)
        if key in KNOWN_FAILURES:
            v = pytest.param(v, marks=pytest.mark.xfail(strict=True, reason=KNOWN_FAILURES[key]))
        elif key in SOMETIMES_FAILING:
            v = pytest.param(
                v, marks=pytest.mark.xfail(strict=False, reason=SOMETIMES_FAILING[key])
            )
        out.append(v)
    return out


def page_checks(page_fixture: str, notebook: str) -> tuple:
    """The ``surveyed`` fixture and the contrast and overflow tests of one notebook's page.

    A test module assigns them at the place they run in (they switch themes, so usually last):
    ``surveyed, test_text_contrast, test_no_hidden_overflow = looks.page_checks("tour", NAME)``.

    Args:
        page_fixture: the module's fixture giving the page with ``notebook`` open and run.
        notebook: the notebook's file name; without ``.ipynb``, the key of the known failures.
    """
    import pytest

    key = notebook.removesuffix(".ipynb")

    @pytest.fixture(scope="module")
    def surveyed(request, screenshots):
        return survey(request.getfixturevalue(page_fixture), notebook, screenshots)

    @pytest.mark.parametrize("theme", params(key, "contrast", THEMES))
    def test_text_contrast(surveyed, theme):
        assert_contrast(surveyed, theme)

    @pytest.mark.parametrize("width", params(key, "overflow", WIDTHS))
    def test_no_hidden_overflow(surveyed, width):
        assert_no_hidden_overflow(surveyed, width)

    return surveyed, test_text_contrast, test_no_hidden_overflow
