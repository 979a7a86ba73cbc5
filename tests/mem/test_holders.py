"""``%cudamem why``'s holder search on real torch tensors, and the magic in a real shell.

Every kind of holder is named as the user sees it, with its fix; nothing is freed, moved or kept
alive by the search.
"""

from __future__ import annotations

import gc
import sys
import types
import weakref

import pytest
from IPython.core.error import UsageError

torch = pytest.importorskip("torch")

from cudamagic.mem.holders import find_holders  # noqa: E402 - after the torch skip

MiB = 1 << 20


def act():
    """A 1 MiB tensor with a graph (its autograd saves a 1 MiB input)."""
    w = torch.ones(256, 1024, requires_grad=True)
    return (w * 2).sin()


def grown(ns, step, n=3):
    """The search against a baseline taken before ``n`` calls of ``step``."""
    base = find_holders(ns).baseline
    for _ in range(n):
        step()
    return find_holders(ns, baseline=base)


def test_running_loss_counts_its_graph_and_says_item():
    ns = {"running_loss": 0.0, "w": torch.ones(256, 1024, requires_grad=True)}

    def step():
        ns["running_loss"] += (ns["w"] * 3).sin().sum()

    top = grown(ns, step, n=4).holders[0]
    assert top.name == "running_loss" and top.kind == "variable"
    assert top.node_types[0] == ("AddBackward0", 4)  # the root node's type first
    assert top.graph_nodes >= 12 and top.graph_bytes >= 4 * MiB and top.grown_bytes >= 3 * MiB
    assert "`running_loss += loss.item()`" in top.fix


def test_list_dict_and_module_attribute_are_named_by_their_paths():
    model = torch.nn.Linear(4, 4)
    model.cache = {}
    ns = {"outputs": [], "model": model}

    def step():
        ns["outputs"].append(act())
        model.cache[f"b{len(model.cache)}"] = torch.zeros(256, 1024)

    got = {h.name: h for h in grown(ns, step).holders}
    assert set(got) == {"outputs", "model.cache"}
    assert got["outputs"].kind == "list" and 6 * MiB <= got["outputs"].grown_bytes < 6 * MiB + 99
    assert got["outputs"].fix.startswith("store `.item()` or `.detach()`, not the tensor")
    assert got["model.cache"].kind == "dict" and got["model.cache"].grown_bytes == 3 * MiB
    assert "`model.cache.clear()`" in got["model.cache"].fix
    assert "model.cache['b0']" in got["model.cache"].entries


def test_closure_default_argument_and_partial():
    def make_logger():
        history = []

        def log(t):
            history.append(t)

        return log

    def remember(t, seen=[]):  # noqa: B006 - the leak under test
        seen.append(t)

    ns = {"log": make_logger(), "remember": remember}

    def step():
        ns["log"](torch.zeros(256, 1024))
        remember(torch.zeros(256, 1024))

    got = {h.name: h for h in grown(ns, step).holders}
    closure = got["history in the closure of log"]
    assert closure.kind == "closure" and closure.grown_bytes == 3 * MiB
    assert closure.fix == "`log.__closure__[0].cell_contents.clear()` or `del log`"
    default = got["default argument seen of remember"]
    assert "`remember.__defaults__[0].clear()`" in default.fix


HOOKS = """
import torch
model = torch.nn.Sequential(torch.nn.Linear(8, 8))
features = []
def save(module, inputs, output):
    features.append(torch.zeros(256, 1024))
def make_hook():
    kept = []
    def hook(module, inputs, output):
        kept.append(torch.zeros(256, 1024))
    return hook
handle = model[0].register_forward_hook(save)
model[0].register_forward_hook(make_hook())
"""


def test_hooks_name_the_handle_or_the_module():
    ns = {}
    exec(HOOKS, ns)  # a notebook's globals: the hook fills a global list
    del ns["__builtins__"]
    got = {h.name: h for h in grown(ns, lambda: ns["model"](torch.ones(1, 8))).holders}
    assert got["features"].entries[0] == "filled by the forward hook save on model.0"
    assert got["features"].fix.startswith("`handle.remove()`")
    hooked = [n for n in got if n.startswith("forward hook ")]
    assert hooked == ["forward hook make_hook.<locals>.hook on model.0"]
    assert "`model.0._forward_hooks.clear()`" in got[hooked[0]].fix


def test_generator_output_history_and_traceback(monkeypatch):
    def batches():
        seen = []
        while True:
            b = torch.zeros(256, 1024)
            seen.append(b)
            yield len(seen)

    gen = batches()
    out = {}
    ns = {"gen": gen, "Out": out, "_": ""}

    def fail(t):
        held = t * 1  # noqa: F841 - kept by the traceback
        raise ValueError("nan")

    def step():
        next(gen)
        out[len(out) + 3] = torch.zeros(256, 1024)
        try:
            fail(torch.zeros(256, 1024 * (len(out))))
        except ValueError as exc:
            monkeypatch.setattr(sys, "last_traceback", exc.__traceback__, raising=False)
            monkeypatch.setattr(sys, "last_value", exc, raising=False)

    got = {h.name: h for h in grown(ns, step).holders}
    assert got["gen"].kind == "generator" and got["gen"].fix == "`gen.close()` or `del gen`"
    assert got["gen"].grown_bytes == 3 * MiB and "seen in batches" in got["gen"].entries
    assert got["Out"].fix == "`%cudamem free --out 3 4 5`"
    tb = got["sys.last_traceback"]
    assert tb.kind == "traceback" and "`%cudamem free`" in tb.fix
    assert {"held in fail", "t in fail"} <= set(tb.entries)


def test_a_library_module_list_is_found_when_nothing_else_reaches_it(monkeypatch):
    lib = types.ModuleType("leaky_stats_lib")
    lib.kept = []
    monkeypatch.setitem(sys.modules, "leaky_stats_lib", lib)
    ns = {}

    def step():
        lib.kept.append(torch.zeros(256, 1024))

    top = grown(ns, step).holders[0]
    assert top.name == "leaky_stats_lib.kept" and top.kind == "module global"
    assert "`leaky_stats_lib.kept.clear()`" in top.fix


def test_without_a_baseline_holders_are_listed_by_size_weights_last():
    model = torch.nn.Linear(512, 512)
    ns = {"model": model, "opt": torch.optim.Adam(model.parameters()), "big": torch.zeros(1 << 20)}
    model(torch.ones(2, 512)).sum().backward()
    ns["opt"].step()
    names = [(h.name, h.expected) for h in find_holders(ns).holders]
    assert names[0] == ("big", False)
    assert set(names[1:]) == {("model (parameters, buffers)", True), ("opt", True)}


def test_the_search_frees_nothing_and_keeps_nothing_alive():
    def batches():
        while True:
            b = torch.full((256, 1024), 7.0)  # rebound each step: only the frame holds it
            yield b.sum()

    gen = batches()
    first = next(gen)
    w = torch.ones(64, requires_grad=True)
    ns = {
        "outputs": [torch.full((1024,), float(i)) for i in range(5)],
        "loss": (w * 2).sin().sum(),
        "gen": gen,
        "Out": {1: torch.arange(10.0)},
    }
    refs = [weakref.ref(t) for t in ns["outputs"] + [ns["loss"], ns["Out"][1], w]]
    frame_b = weakref.ref(gen.gi_frame.f_locals["b"])
    gen.gi_frame.f_locals.clear()  # our own look above made a snapshot: drop it
    before = [t.clone() for t in ns["outputs"]]
    base = find_holders(ns).baseline
    find_holders(ns, baseline=base)
    assert all(r() is not None for r in refs) and frame_b() is not None  # nothing freed
    assert all(torch.equal(a, b) for a, b in zip(before, ns["outputs"], strict=True))
    assert next(gen) == first  # the generator still runs with its own locals
    gc.collect()
    assert frame_b() is None  # rebound: the search's look into the frame kept no copy
    ns.clear()
    del gen, w
    gc.collect()
    assert [r() for r in refs] == [None] * len(refs)


# ---- the magic ------------------------------------------------------------------------------


def test_cudamem_why_in_a_shell(ip):
    ip.run_cell(
        "import torch\ncache = {}\nfor i in range(3): cache[f'<b>{i}'] = torch.zeros(1 << 18)"
    )
    first = ip.run_line_magic("cudamem", "why")
    text = repr(first)
    assert "no baseline yet" in text and "1. cache (dict): holds 3.0 MiB" in text
    assert "&lt;b&gt;0" in first._repr_html_() and "<b>0" not in first._repr_html_()
    ip.run_cell("for i in range(3, 6): cache[f'k{i}'] = torch.zeros(1 << 18)")
    second = ip.run_line_magic("cudamem", "why")
    assert second.holder("cache").grown_bytes == 3 * MiB
    assert "that grew since the last `%cudamem why`" in repr(second)
    assert second.to_dict()["holders"][0]["name"] == "cache"
    with pytest.raises(UsageError, match="does not apply to %cudamem why"):
        ip.run_line_magic("cudamem", "why --top 3")


def test_cudamem_why_html_shows_the_fix_commands_as_code(ip):
    """The fix column's `commands` are <code>, not literal backticks (they are in the text)."""
    ip.run_cell("import torch\nw = torch.ones(256, 1024, requires_grad=True)\nrunning_loss = 0.0")
    ip.run_line_magic("cudamem", "why")  # the baseline
    ip.run_cell("for _ in range(4): running_loss += (w * 3).sin().sum()")
    report = ip.run_line_magic("cudamem", "why")
    assert "`running_loss += loss.item()`" in repr(report)
    fix = report._repr_html_().split("<td", 5)[-1]  # the first row's last cell
    assert "<code>running_loss += loss.item()</code>" in fix and "`" not in fix, fix
    page = report._repr_html_()  # the table scrolls in its own box in a narrow output
    assert page.count("<table") == page.count('<div class="cm-scroll" style="') >= 1, page
