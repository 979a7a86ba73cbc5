"""Property-based tests (Hypothesis) where inputs have structure.

Property-based tests (Hypothesis) where inputs have structure: version integers and strings,
CUDA_VISIBLE_DEVICES forms, trace files (round trip; any byte flip is read or rejected with a
message), the NVML plausibility bounds, and magic argument lines (parsed or a one-paragraph
UsageError; valid lines round-trip).

Kept fast: a small example budget per property, no deadline (the machine is shared).
"""

from __future__ import annotations

import math
import os
import tempfile

import hypothesis
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from IPython.core.error import UsageError

from cudamagic.core import nvml, wheels
from cudamagic.core.na import is_na
from cudamagic.info import versions as facts
from tests.core import test_magic_lines as lines_mod

FAST = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


# ---- versions ---------------------------------------------------------------------------------


@FAST
@given(major=st.integers(1, 8), minor=st.integers(0, 9), patch=st.integers(0, 99))
def test_cudnn_7_8_encoding_round_trips(major, minor, patch):
    assert (
        facts.decode_cudnn_version(major * 1000 + minor * 100 + patch) == f"{major}.{minor}.{patch}"
    )


@FAST
@given(major=st.integers(9, 99), minor=st.integers(0, 99), patch=st.integers(0, 99))
def test_cudnn_9_encoding_round_trips(major, minor, patch):
    assert (
        facts.decode_cudnn_version(major * 10000 + minor * 100 + patch)
        == f"{major}.{minor}.{patch}"
    )


@FAST
@given(
    st.one_of(st.integers(max_value=0), st.text(max_size=12), st.floats(allow_nan=True), st.none())
)
def test_cudnn_garbage_is_na_never_raises(value):
    try:
        good = int(value) > 0
    except (TypeError, ValueError, OverflowError):
        good = False
    out = facts.decode_cudnn_version(value)
    assert isinstance(out, str) if good else is_na(out)


@FAST
@given(
    major=st.integers(1, 30),
    minor=st.integers(0, 30),
    rest=st.sampled_from(["", ".0", ".105", ".3.1"]),
)
def test_parse_version_tuple(major, minor, rest):
    assert wheels.parse_version_tuple(f"{major}.{minor}{rest}") == (major, minor)


@FAST
@given(st.text(max_size=20))
def test_parse_version_tuple_never_raises(text):
    out = wheels.parse_version_tuple(text)
    assert out is None or (isinstance(out, tuple) and len(out) == 2)


@FAST
@given(
    major=st.integers(8, 13),
    minor=st.integers(0, 9),
    release=st.from_regex(r"\A[12]\.\d{1,2}\.\d\Z"),
)
def test_torch_cuda_tag(major, minor, release):
    v = facts.parse_torch_version(f"{release}+cu{major}{minor}")
    assert (v["kind"], v["cuda_tag"], v["release"]) == ("cuda", f"{major}.{minor}", release)


@FAST
@given(st.text(max_size=30))
def test_parse_torch_version_never_raises(text):
    v = facts.parse_torch_version(text)
    assert v["kind"] in ("cpu", "cuda", "rocm", "source", "default")


# ---- CUDA_VISIBLE_DEVICES ------------------------------------------------------------------------

valid_entry = st.one_of(
    st.integers(0, 64).map(str),
    st.from_regex(r"\AGPU-[0-9a-f]{1,8}(-[0-9a-f]{4}){0,3}\Z"),
    st.from_regex(r"\AMIG-[0-9a-f]{8}(-[0-9a-f]{4}){0,3}\Z"),
)
invalid_entry = st.one_of(
    st.just("-1"),
    st.from_regex(r"\A[a-z][a-z0-9]{0,5}\Z").filter(
        lambda s: not s.lower().startswith(("gpu-", "mig-"))
    ),
)


@FAST
@given(
    good=st.lists(valid_entry, max_size=5),
    bad=st.one_of(st.none(), invalid_entry),
    after=st.lists(st.one_of(valid_entry, invalid_entry), max_size=4),
    space=st.sampled_from(["", " "]),
)
def test_cuda_visible_devices_forms(good, bad, after, space):
    parts = good + ([bad] + after if bad is not None else [])
    if not parts:
        return
    raw = ",".join(f"{space}{p}{space}" for p in parts)
    r = facts.parse_cuda_visible_devices(raw)
    assert r["set"] and r["raw"] == raw
    assert [str(e["value"]) if e["kind"] == "index" else e["value"] for e in r["entries"]] == [
        str(int(p)) if p.isdigit() else p for p in good
    ]
    assert [e["kind"] for e in r["entries"]] == [
        "index" if p.isdigit() else ("mig" if p.startswith("MIG-") else "uuid") for p in good
    ]
    assert r["invalid"] == bad
    assert r["ignored"] == (after if bad is not None else [])
    # PyTorch's reading: within the leading run of the first entry's form, a repeated entry means no
    # GPU
    norm = [
        (("index", int(p)) if p.isdigit() else ("mig" if p.startswith("MIG-") else "uuid", p))
        for p in good
    ]
    run = [n for i, n in enumerate(norm) if all(k[0] == norm[0][0] for k in norm[: i + 1])]
    repeats = [n[1] for i, n in enumerate(run) if n in run[:i]]
    assert r["repeated"] == (repeats[0] if repeats else None)
    assert r["hides_all"] == (not good or bool(repeats))


@FAST
@given(st.text(max_size=40))
def test_cuda_visible_devices_never_raises(raw):
    r = facts.parse_cuda_visible_devices(raw)
    honoured = len(r["entries"]) + (1 if r["invalid"] is not None else 0) + len(r["ignored"])
    assert honoured <= len(raw.split(","))
    assert r["hides_all"] == (not r["entries"] or r["repeated"] is not None)


# ---- trace files ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trace_bytes():
    """A valid two-GPU trace of three samples written by the real writer from the fake NVML."""
    from cudamagic.watch.trace import TraceWriter, read_trace
    from tests.fake_nvml import SCENARIOS, FakeNVML, install
    from tests.watch.fakes import live

    mp = pytest.MonkeyPatch()
    try:
        install(FakeNVML(SCENARIOS["gpu_without_fan"]), mp)
        src = live()
        originals = [src.read(i, 1000.0 + i) for i in range(1, 4)]
    finally:
        mp.undo()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.jsonl")
        w = TraceWriter(path)
        for s in originals:
            w.write(s)
        w.close()
        assert read_trace(path)[1] == originals  # round trip
        with open(path, "rb") as fh:
            return fh.read()


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_byte_flip_is_read_or_rejected_with_a_message(trace_bytes, data, tmp_path_factory):
    from cudamagic.watch.trace import TraceError, read_trace

    pos = data.draw(st.integers(0, len(trace_bytes) - 1), label="pos")
    byte = data.draw(st.integers(0, 255).filter(lambda b: b != trace_bytes[pos]), label="byte")
    flipped = trace_bytes[:pos] + bytes([byte]) + trace_bytes[pos + 1 :]
    path = tmp_path_factory.mktemp("flip") / "t.jsonl"
    path.write_bytes(flipped)
    try:
        header, samples = read_trace(str(path))
    except TraceError as exc:
        assert str(path) in str(exc) and len(str(exc)) > len(str(path)) + 5
    else:  # read: a well-formed trace (the flip kept it valid JSON of the right schema)
        assert header["cudamagic_trace"] == 1 and len(samples) >= 1


# ---- NVML plausibility bounds (core/nvml.check_value, issue 11) ----------------------------------


BOUNDS = {  # field -> (inclusive plausible maximum with no context, unit text in the reason)
    "utilization.gpu": 100,
    "utilization.memory": 100,
    "fan.speed": 100,
    "temperature.gpu": nvml.MAX_TEMPERATURE_C,
    "power.draw": nvml.MAX_POWER_MW,
    "power.limit": nvml.MAX_POWER_MW,
    "clocks.sm": nvml.MAX_CLOCK_MHZ,
    "clocks.mem": nvml.MAX_CLOCK_MHZ,
    "memory.total": nvml.MAX_MEMORY_BYTES,
}


@FAST
@given(field=st.sampled_from(sorted(BOUNDS)), data=st.data())
def test_plausible_values_pass_unchanged_and_implausible_ones_say_why(field, data):
    top = BOUNDS[field]
    ok = data.draw(st.integers(0, top), label="ok")
    assert nvml.check_value(field, ok) == ok
    bad = data.draw(
        st.one_of(st.integers(top + 1, 4 * top), st.integers(-(2**31), -1)), label="bad"
    )
    na = nvml.check_value(field, bad)
    assert is_na(na) and na.code == "implausible" and field in na.reason and str(bad) in na.reason


@FAST
@given(
    field=st.sampled_from(sorted(BOUNDS) + ["memory.used", "pstate"]),
    sentinel=st.sampled_from([0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF]),
)
def test_nvml_sentinels_are_not_available(field, sentinel):
    na = nvml.check_value(field, sentinel)
    if field in ("memory.total", "memory.used") and sentinel == 0xFFFFFFFF:
        return  # 4 GiB - 1 is a real byte count
    assert is_na(na) and na.code == "not_available"


@FAST
@given(limit=st.integers(1, nvml.MAX_POWER_MW), draw=st.integers(0, nvml.MAX_POWER_MW))
def test_power_draw_against_its_limit(limit, draw):
    out = nvml.check_value("power.draw", draw, {"power.limit": limit})
    assert (
        (out == draw)
        if draw <= 2 * limit
        else (is_na(out) and "twice the enforced limit" in out.reason)
    )


@FAST
@given(total=st.integers(1, nvml.MAX_MEMORY_BYTES), used=st.integers(0, nvml.MAX_MEMORY_BYTES))
def test_memory_used_against_total(total, used):
    out = nvml.check_value("memory.used", used, {"memory.total": total})
    assert (out == used) if used <= total else (is_na(out) and out.code == "implausible")


# ---- terminal widths (core/fmt.display_width) ----------------------------------------------------


@FAST
@given(
    st.one_of(
        st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x7F), max_size=30),
        st.text(max_size=30),
    )
)
def test_display_width_agrees_with_wcwidth(text):
    """The ASCII shortcut (no wcwidth tables loaded) gives wcwidth's own answer on every text."""
    from wcwidth import wcswidth, wcwidth

    from cudamagic.core.fmt import display_width

    whole = wcswidth(text)
    expected = whole if whole >= 0 else sum(1 if wcwidth(ch) < 0 else wcwidth(ch) for ch in text)
    assert display_width(text) == expected


# ---- magic argument lines
# --------------------------------------------------------------------------------------- Every
# magic's parser (core/magic.py AreaMagics.parse) and the option checks its area runs next, on
# random lines (the strategies of tests/core/test_magic_lines.py, which runs whole magics): a line
# is parsed, or rejected with a plain one-paragraph UsageError naming the magic; never anything
# else. A line that parses round-trips: written back as flags (each value quoted) it parses to the
# same arguments.


LINES = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def magic_funcs():
    """``[(kind, name, bound method with a parser, AreaMagics instance)]`` of the extension."""
    from IPython.core.interactiveshell import InteractiveShell

    from cudamagic import extension

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "cudamagic")
    out = []
    for inst in extension.current().magics.values():
        for kind in ("line", "cell"):
            for name, func in sorted(inst.magics[kind].items()):
                if getattr(func, "parser", None) is not None:
                    out.append((kind, name, func, inst))
    assert {n for _, n, _, _ in out} >= {
        "cudainfo",
        "gpuwatch",
        "autograd_graph",
        "cudamem",
        "cudaexplain",
    }
    return out


def _check_usage_error(exc, name):
    assert type(exc) is UsageError, f"a {type(exc).__name__}, not a plain UsageError: {exc}"
    msg = str(exc).strip()
    assert msg and "\n\n" not in msg and "Traceback" not in msg, msg
    assert name in msg, f"the message does not name %{name}: {msg}"


def _area_checks(kind, name, args, inst):
    """The option checks the area's magic runs on the parsed arguments (nothing started)."""
    s = inst.settings
    if name == "gpuwatch":
        from cudamagic.watch import options

        options.resolve(args, s)
    elif name == "autograd_graph":
        from cudamagic.graph import options

        options.resolve(args, s)
    elif name == "cudamem":
        from cudamagic.mem import options

        options.check_action(args, is_cell=kind == "cell")
        if args.top is not None:
            options.check_top(args.top)
        if args.threshold is not None:
            options.threshold_bytes(args.threshold)
    elif name == "torchprof":
        from cudamagic.prof import options

        if kind == "line":
            options.check_line_args(args)
        else:
            options.check_cell_options(
                args, s.torchprof_top_rows, s.torchprof_max_trace_mb, s.torchprof_stack_depth
            )


def quote(value: str) -> str:
    """``value`` as one word for IPython's splitter (quotes kept, then removed by the parser)."""
    for mark in ('"', "'"):
        if mark not in value:
            return f"{mark}{value}{mark}"
    hypothesis.assume(not any(c.isspace() for c in value) and value[:1] not in "'\"")
    return value


def render(func, args) -> str:
    """``args`` (a parsed Namespace) written back as an argument line."""
    words, positional = [], []
    for action in func.parser._actions:
        if action.dest == "help":
            continue
        value = getattr(args, action.dest)
        if not action.option_strings:
            if value is not None:
                positional.append(quote(str(value)))
            continue
        flag = action.option_strings[-1]
        if action.nargs == 0:
            if value != action.default:
                words.append(flag)
        elif value is None or value == action.default:
            continue
        elif action.nargs == "?" and value == action.const:
            words.append(flag)
        elif isinstance(value, list):  # append (--var) or nargs='*' / 2
            hypothesis.assume(not any(str(v).startswith("-") for v in value))
            if action.nargs in ("*", 2):
                words.append(" ".join([flag, *(quote(str(v)) for v in value)]))
            else:
                words.extend(f"{flag} {quote(str(v))}" for v in value)
        else:
            words.append(f"{flag} {quote(repr(value) if isinstance(value, float) else str(value))}")
    return " ".join(positional + words)


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    return a == b


@LINES
@given(data=st.data())
def test_magic_lines_parse_or_say_why_in_one_paragraph(magic_funcs, data):
    kind, name, func, inst = data.draw(st.sampled_from(magic_funcs), label="magic")
    line = data.draw(lines_mod.lines(lines_mod._flags(func)), label="line")
    try:
        args = inst.parse(
            func, line, usage=f"%{name} [options]", prefix="%%" if kind == "cell" else "%"
        )
    except UsageError as exc:
        _check_usage_error(exc, name)
        return
    try:
        _area_checks(kind, name, args, inst)
    except UsageError as exc:
        _check_usage_error(exc, name)


@LINES
@given(data=st.data())
def test_valid_magic_lines_round_trip(magic_funcs, data):
    kind, name, func, inst = data.draw(st.sampled_from(magic_funcs), label="magic")
    line = data.draw(lines_mod.well_formed(lines_mod._flags(func)), label="line")
    try:
        args = inst.parse(func, line.rstrip(";"), prefix="%%" if kind == "cell" else "%")
    except UsageError:
        hypothesis.assume(False)
    positional = [a.dest for a in func.parser._actions if not a.option_strings]
    hypothesis.assume(not any(str(getattr(args, d) or "").startswith("-") for d in positional))
    again = inst.parse(func, render(func, args), prefix="%%" if kind == "cell" else "%")
    assert all(_same(getattr(args, k), getattr(again, k)) for k in vars(args)), (
        line,
        render(func, args),
    )
