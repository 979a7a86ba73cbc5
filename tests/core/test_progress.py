"""The progress line every long magic shows: its rules with a fake clock and stream.

The same line in a terminal (stderr) and in a notebook (a display updated in place, seen through
IPython's capturing publisher); the magics' own tests check it in their cells and a real kernel.
"""

from __future__ import annotations

import io
import threading

import pytest
from IPython.core.displaypub import CapturingDisplayPublisher

from cudamagic.core.fmt import NO_MATH
from cudamagic.core.progress import ProgressLine
from tests.inline import plain


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class Tty(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture
def notebook(ip, monkeypatch):
    """A shell whose outputs can be updated in place, as a kernel's are; yields what it shows."""
    pub = CapturingDisplayPublisher()
    monkeypatch.setattr(ip, "display_pub", pub)
    return pub.outputs


@pytest.mark.parametrize("tty", [False, True])
def test_terminal_line_after_one_second(tty):
    clock, err = Clock(), (Tty() if tty else io.StringIO())
    with ProgressLine("%%cuda", "cuda", "nvcc build", terminal=True, clock=clock, stream=err) as p:
        clock.now += 0.9
        p.say("compiling with nvcc")
        assert err.getvalue() == "" and not p.shown  # silent for the first second
        clock.now += 0.3
        p.say("compiling with nvcc")
        clock.now += 1.0
        p.say("linking")
        clock.now += 0.5
    assert p.shown
    if tty:  # one line rewritten in place, ending with the outcome
        assert err.getvalue() == (
            "%%cuda: compiling with nvcc... 1.2 s\r%%cuda: linking... 2.2 s"
            "\r%%cuda: nvcc build done after 2.7 s\n"
        )
    else:  # a log: the start and the end, no carriage returns
        assert (
            err.getvalue()
            == "%%cuda: compiling with nvcc... 1.2 s\n%%cuda: nvcc build done after 2.7 s\n"
        )


@pytest.mark.parametrize(
    ("exc", "word"), [(RuntimeError, "failed"), (KeyboardInterrupt, "interrupted, stopped cleanly")]
)
def test_outcome_of_a_failed_and_an_interrupted_step(exc, word):
    clock, err = Clock(), io.StringIO()
    with pytest.raises(exc, match="stop"):
        with ProgressLine(
            "%%cuda", "cuda", "nvcc build", terminal=True, clock=clock, stream=err
        ) as p:
            clock.now += 1.5
            p.say("compiling with nvcc")
            raise exc("stop")
    assert err.getvalue().splitlines()[-1] == f"%%cuda: nvcc build {word} after 1.5 s"


def test_a_quick_step_shows_nothing():
    clock, err = Clock(), io.StringIO()
    with ProgressLine("%%cuda", "cuda", "nvcc build", terminal=True, clock=clock, stream=err) as p:
        clock.now += 0.5
        p.say("compiling with nvcc")
    assert err.getvalue() == "" and not p.shown


def test_no_terminal_line_unless_asked(ip):
    clock, err = Clock(), Tty()
    with ProgressLine("%%torchprof", "prof", clock=clock, stream=err) as p:
        clock.now += 5
        p.say("profiling")
    assert err.getvalue() == "" and not p.shown


def test_a_wiped_terminal_line_leaves_nothing_on_a_tty():
    clock, err = Clock(), Tty()
    with ProgressLine("%%x", "graph", terminal=True, clock=clock, stream=err) as p:
        clock.now += 2
        p.say("drawing")
    assert err.getvalue() == "%%x: drawing... 2.0 s\r\033[K"


def test_notebook_line_is_one_display_updated_then_emptied(notebook):
    clock = Clock()
    with ProgressLine("%%autograd_graph", "graph", clock=clock) as p:
        p.say("walking")  # before a second: nothing
        assert notebook == []
        for _ in range(3):
            clock.now += 1
            p.say("Graphviz dot is laying out <the> picture")
    ids = {o["transient"]["display_id"] for o in notebook}
    assert len(ids) == 1 and len(notebook) == 4, notebook
    assert [o["update"] for o in notebook] == [False, True, True, True]
    texts = [o["data"]["text/plain"] for o in notebook[:-1]]
    assert texts == [
        f"%%autograd_graph: Graphviz dot is laying out <the> picture... {s}.0 s" for s in (1, 2, 3)
    ]
    html = notebook[0]["data"]["text/html"]
    assert NO_MATH in html.split(">", 1)[0] and "cm-graph" in html.split(">", 1)[0]
    assert (
        '<div class="cm-note cm-mono">%%autograd_graph: Graphviz dot is laying out &lt;the&gt;'
        in (plain(html))
    )
    assert notebook[-1]["data"] == {"text/plain": ""}  # nothing of it stays in a saved notebook


def test_notebook_line_kept_with_its_outcome(notebook):
    clock = Clock()
    with ProgressLine("%%cuda", "cuda", "nvcc build", terminal=True, clock=clock) as p:
        clock.now += 1.25
        p.say("compiling with nvcc")
        clock.now += 1
    assert [o["data"]["text/plain"] for o in notebook] == [
        "%%cuda: compiling with nvcc... 1.2 s",
        "%%cuda: nvcc build done after 2.2 s",
    ]


def test_a_thread_refreshes_the_line_of_work_that_does_not_call_say(notebook):
    """``every_s``: the line counts up while the caller's thread is busy, and the thread ends."""
    clock = Clock()
    with ProgressLine("%%torchprof", "prof", every_s=0.01, clock=clock) as p:
        p.say("profiling")
        clock.now += 3
        assert any(t.name == "cudamagic-progress" for t in threading.enumerate())
        _wait_for(lambda: len(notebook) >= 2)
    texts = [o["data"]["text/plain"] for o in notebook]
    assert texts[0] == "%%torchprof: profiling... 3.0 s" and texts[-1] == ""
    assert not [t for t in threading.enumerate() if t.name == "cudamagic-progress"]


def _wait_for(condition, limit_s: float = 30.0) -> None:
    done = threading.Event()
    for _ in range(int(limit_s / 0.01)):
        if condition():
            return
        done.wait(0.01)
    raise AssertionError("the line was not refreshed by its thread")
