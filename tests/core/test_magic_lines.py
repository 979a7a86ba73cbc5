"""Random and hand-picked argument lines for every magic, in a real shell.

Tier 2 fuzz: random and hand-picked argument lines for EVERY magic of the extension, in a real
shell.

Whatever a user types after a magic's name, the magic either runs or raises a plain ``UsageError``
(IPython shows its one paragraph, no traceback). Any other exception (``ValueError: No closing
quotation`` from ``shlex``, a ``TypeError`` from an option check, ...) is a traceback from our code
and fails here.

The magics are discovered from the loaded extension (``cudamagic.extension.current().magics`` plus
any extra names registered for one of its instances), so a new magic is covered
without editing this file; its flags come from its own ``magic_arguments`` parser. Safety: the fake
NVML (scenario ``one_gpu``), a temporary working directory for ``--log``/``--save`` files,
``%gpuwatch --stop`` and ``%cudamem off`` after every line, and a terminal loop (``%gpuwatch
--loop``) ended by a real Ctrl-C (SIGALRM raising ``KeyboardInterrupt``) after 0.2 s.
"""

from __future__ import annotations

import signal
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from IPython.core.error import UsageError

from cudamagic import extension
from cudamagic.cuda.errors import CudaProgramError

# : Cell bodies for cell magics: a plain value, and a small autograd graph (CPU) so drawing code
# runs too.
CELLS = ["1", "import torch\nx = torch.ones(2, requires_grad=True)\n(x * 2).sum()"]
CELLS_OF = {"cuda": ["int main() { return 0; }\n"]}  # %%cuda: a C++ cell that compiles and runs

# : Values worth trying after any flag: numbers at the edges, NaN/inf, empty and odd lists, unicode,
# shell
# : metacharacters, names that look like files (relative: they land in the temporary working
# directory).
VALUES = [
    "0",
    "1",
    "-1",
    "2",
    "3",
    "0.05",
    "0.1",
    "0.5",
    "1e-9",
    "1e9",
    "1e400",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "",
    " ",
    ",",
    ",,",
    "0,1",
    "0,,1",
    "a,b",
    "99",
    "x",
    "on",
    "off",
    "history",
    "free",
    "cuda-oom",
    "svg",
    "dot",
    "gif",
    "64MiB",
    "1GiB",
    "-5MiB",
    "1e3kB",
    "trace.jsonl",
    "g.svg",
    "g.dot",
    "out dir/g.png",
    "missing.jsonl",
    "/nonexistent/dir/g.svg",
    "é",
    "日本",
    "💥",
    "\t",
    "--",
    "-",
    "=",
    ";",
    "'",
    '"',
    "\\",
]

#: Values that some flag accepts, so that well-formed lines often run.
PLAUSIBLE = [
    "0",
    "1",
    "2",
    "3",
    "0.1",
    "0.5",
    "5",
    "svg",
    "dot",
    "g.svg",
    "g.dot",
    "trace.jsonl",
    "64MiB",
    "x",
]

#: Flags no magic has (argparse must reject them) and prefixes that are ambiguous for some magics.
ODD_FLAGS = [
    "--bogus",
    "-x",
    "-Z",
    "--",
    "-",
    "---",
    "--=1",
    "--lo",
    "--s",
    "--d",
    "--h",
    "--no-",
    "--json=1",
]

# : Lines every magic gets, typed by hand: unbalanced quotes, trailing backslash, NaN, empty lists,
# unknown
#: flags, a lone ``--``, unicode, control characters.
HAND_PICKED = [
    "--clear-cache",
    "",
    " ",
    ";",
    " ;",
    "\t",
    '"',
    "'",
    'a "b',
    "--x 'unclosed",
    "\\",
    "--json \\",
    "-q \\",
    "a\\",
    "'\\'",
    "--interval nan",
    "--interval inf",
    "--interval -1",
    "--interval 0",
    "--interval",
    "-i 1e400",
    "--devices ,",
    "--devices ''",
    "--devices 99",
    "--devices a,b",
    "--devices 0,,0",
    "--history 0",
    "--history 1e9",
    "--count 0",
    "--count -3",
    "--count 1",
    "--log ''",
    "--log '' --count 1",
    "--replay missing.jsonl",
    "--replay ''",
    "--log trace.jsonl --count 1 --interval 0.1",
    "--stop --text",
    "--text --count 2 --interval 0.1",
    "--loop --interval 0.1",
    "--bogus",
    "-x",
    "--",
    "-- --",
    "-- on",
    "--json -q",
    "-q;",
    "--json extra",
    "é ü 💥",
    "日本語",
    "\x00",
    "\x1b[31m",
    "--list",
    "--list cuda-oom",
    "nope-entry",
    "cuda-oom",
    "on",
    "off",
    "history",
    "history --json",
    "history --clear",
    "free",
    "free --out",
    "free --out 1 2",
    "free --var nothing_here",
    "free --out x",
    "on --threshold nan",
    "on --threshold -1",
    "on --threshold 1e400",
    "on --threshold 1GiB",
    "--top -1",
    "--top 0",
    "--reset-peak",
    "on off",
    "--top nan",
    "--depth -1",
    "--depth 0 --no-fold",
    "--timeout nan",
    "--timeout 0",
    "--timeout -1",
    "--max-nodes 0",
    "--max-nodes -5",
    "--format gif",
    "--format dot",
    "--save",
    "--save ''",
    "--save g.svg --format png",
    "--save /nonexistent/dir/g.svg",
    "--save 'out dir/g.dot'",
    "-o",
    "-o ,",
    "-o '1x'",
    "-o nothing_here",
    "--group --depth 1 --show-saved --show-attrs --shared-params",
    "--format",
    "$HOME",
    "{1+1}",
]

# Generated text: printable, with quotes and backslashes, but no `$`, `{`/`}` (IPython would expand
# or evaluate them in the user namespace), `/` or `~` (no absolute or home paths for --log/--save to
# write to).
_CHARS = set(string.ascii_letters + string.digits + " -_.,=:;'\"\\\t") | set("é日💥\u200b")
_TEXT = st.text(alphabet=st.sampled_from(sorted(_CHARS)), max_size=8)


class Flags(dict):
    """A magic's option strings -> whether the option takes a value.

    A magic's option strings -> whether the option takes a value; ``takes_word``: it has a
    positional argument (``%cudamem on``, ``%cudaexplain ENTRY``).
    """

    takes_word = False


def _flags(func) -> Flags:
    """The :class:`Flags` of a magic's ``magic_arguments`` parser."""
    flags = Flags()
    parser = getattr(func, "parser", None)
    for action in parser._actions if parser is not None else ():
        flags.update(
            {s: action.nargs != 0 for s in action.option_strings if s not in ("-h", "--help")}
        )
        flags.takes_word = flags.takes_word or not action.option_strings
    return flags


def our_magics(shell) -> list[tuple[str, str, Flags]]:
    """``(kind, name, flags)`` for every magic the loaded extension registered."""
    instances = list(extension.current().magics.values())
    found = {}
    for inst in instances:
        for kind in ("line", "cell"):
            for name in inst.magics[kind]:
                found[(kind, name)] = _flags(inst.magics[kind][name])
    for kind in (
        "line",
        "cell",
    ):  # extra names registered with register_function for one of our instances
        for name, func in shell.magics_manager.magics[kind].items():
            if getattr(func, "__self__", None) in instances and (kind, name) not in found:
                found[(kind, name)] = _flags(func)
    return [(kind, name, flags) for (kind, name), flags in sorted(found.items())]


def _quote(draw, text: str) -> str:
    style = draw(
        st.sampled_from(
            ["bare", "bare", "single", "double", "open-single", "open-double", "escaped"]
        )
    )
    return {
        "bare": text,
        "single": f"'{text}'",
        "double": f'"{text}"',
        "open-single": f"'{text}",
        "open-double": f'"{text}',
        "escaped": text.replace(" ", "\\ ") + "\\",
    }[style]


@st.composite
def well_formed(draw, flags: Flags) -> str:
    """Mostly what a user means to type.

    Mostly what a user means to type: an optional first word, then flags, each with a value when it
    takes one (values at the edges, quoted or not), so lines get past parsing into each magic's own
    option checks.
    """
    words = []
    if (
        flags.takes_word and draw(st.integers(0, 3)) > 0
    ):  # an action (`on`) or an entry (`cuda-oom`)
        words.append(draw(st.sampled_from(["on", "off", "history", "free", "cuda-oom", "x"])))
    for flag in draw(st.lists(st.sampled_from(sorted(flags)), max_size=3)) if flags else []:
        words.append(flag)
        if flags[flag]:
            value = draw(
                st.sampled_from(PLAUSIBLE)
                | st.sampled_from(PLAUSIBLE)
                | st.sampled_from(VALUES)
                | _TEXT
            )
            quote = draw(st.sampled_from(["", "", "'", '"']))
            words[-1] += draw(st.sampled_from([" ", "="])) + quote + value + quote
    return " ".join(words) + draw(st.sampled_from(["", "", ";"]))


@st.composite
def wild(draw, flags: Flags) -> str:
    """A line of 0-5 words: flags, odd flags, values (some badly quoted), a tail."""
    words = []
    for _ in range(draw(st.integers(0, 5))):
        kind = draw(
            st.sampled_from(
                ["flag", "flag", "value", "text", "odd"] if flags else ["value", "text", "odd"]
            )
        )
        if kind == "flag":
            flag = draw(st.sampled_from(sorted(flags)))
            if flag.startswith("--") and draw(st.booleans()):
                flag += "=" + draw(st.sampled_from(VALUES))
            words.append(flag)
        elif kind == "value":
            words.append(_quote(draw, draw(st.sampled_from(VALUES))))
        elif kind == "text":
            words.append(_quote(draw, draw(_TEXT)))
        else:
            words.append(draw(st.sampled_from(ODD_FLAGS)))
    tail = draw(st.sampled_from(["", "", "", ";", " ;", " \\", "  "]))
    return " ".join(words) + tail


def lines(flags: Flags):
    """Lines for a magic with these flags: well-formed ones and wild ones, about half each."""
    return well_formed(flags) | wild(flags)


@pytest.fixture
def safe_shell(ip, fake_nvml, monkeypatch, tmp_path):
    """The shell on one fake GPU, in a temporary folder; terminal loops end by Ctrl-C."""
    fake_nvml("one_gpu")
    monkeypatch.chdir(tmp_path)
    ip.run_line_magic(
        "config", f"CudaMagics.cuda_cache_dir = {str(tmp_path / 'cuda-cache')!r}"
    )  # not ~/.cache
    from cudamagic.watch import monitor

    real_run_foreground = monitor.run_foreground

    def ctrl_c_after_200ms(*args, **kwargs):
        def press_ctrl_c(signum, frame):
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGALRM, press_ctrl_c)
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        try:
            return real_run_foreground(*args, **kwargs)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    monkeypatch.setattr(monitor, "run_foreground", ctrl_c_after_200ms)
    yield ip
    ip.run_line_magic("gpuwatch", "--stop")
    ip.run_line_magic("cudamem", "off")
    ip.run_line_magic("config", "CudaMagics.cuda_cache_dir = ''")


def run_one(shell, kind: str, name: str, line: str, cell: str = "1") -> str:
    """Run one magic line: ``"ran"``, ``"usage"`` (a plain UsageError), or what failed.

    ``"ran"`` too for a ``%%cuda`` program that the line's own ``--timeout`` (``1e-9``, ``0.05``)
    ended: the documented error of that line, whose program cannot finish in the time given.
    """
    try:
        if kind == "cell":
            shell.run_cell_magic(name, line, cell)
        else:
            shell.run_line_magic(name, line)
    except UsageError as exc:
        if type(exc) is not UsageError:
            kind = type(exc).__name__
            return f"a UsageError subclass {kind} (IPython prints a traceback for it): {exc}"
        return "usage"
    except CudaProgramError as exc:
        if exc.timed_out and "--timeout" in line:
            return "ran"
        return f"{type(exc).__name__}: {exc}"
    except BaseException as exc:  # anything but UsageError: the failure looked for
        return f"{type(exc).__name__}: {exc}"
    finally:
        _tidy(shell)
    return "ran"


def _tidy(shell):
    """Stop what a line may have started, so every line starts from the same state."""
    shell.run_line_magic("gpuwatch", "--stop")
    shell.run_line_magic("cudamem", "off")


def test_every_magic_is_discovered(ip):
    names = {(kind, name) for kind, name, _ in our_magics(ip)}
    expected = {
        ("line", "cudainfo"),
        ("line", "gpuwatch"),
        ("cell", "autograd_graph"),
        ("line", "cudamem"),
        ("cell", "cudamem"),
        ("line", "cudaexplain"),
    }
    assert expected <= names, f"missing: {expected - names}"
    flags = {name: f for kind, name, f in our_magics(ip) if kind == "line"}
    assert "--interval" in flags["gpuwatch"] and "--json" in flags["cudainfo"]


# : Values each flag of each magic gets, as ``--flag=VALUE`` and ``--flag VALUE`` (``--flag=--``
# gives an empty list
#: instead of a value on Python 3.11's argparse).
FLAG_VALUES = ["--", "nan", "", "-1"]


def test_hand_picked_lines_run_or_raise_usage_error(safe_shell, capsys):
    failures, ran = [], {}
    for kind, name, flags in our_magics(safe_shell):
        per_flag = [
            f"{flag}{sep}{value!r}" if value == "" else f"{flag}{sep}{value}"
            for flag in flags
            for value in FLAG_VALUES
            for sep in ("=", " ")
            if flag.startswith("--")
        ]
        for line in HAND_PICKED + per_flag:
            for cell in CELLS_OF.get(name, CELLS) if kind == "cell" else [None]:
                outcome = run_one(safe_shell, kind, name, line, cell)
                if outcome == "ran":
                    ran[(kind, name)] = ran.get((kind, name), 0) + 1
                elif outcome != "usage":
                    failures.append(f"{'%%' if kind == 'cell' else '%'}{name} {line!r}: {outcome}")
    capsys.readouterr()
    assert not failures, "\n".join(failures)
    # the safe set-up must leave every magic able to run (else this test would only ever see
    # UsageErrors)
    assert set(ran) == {(kind, name) for kind, name, _ in our_magics(safe_shell)}, ran


@pytest.mark.parametrize(
    "kind, name, line, flag",
    [
        ("cell", "autograd_graph", "--depth=--", "--depth"),
        ("line", "gpuwatch", "--interval=--", "--interval"),
        ("line", "cudamem", "free --var=--", "--var"),
        ("line", "cudainfo", "--json=--", None),
    ],
)
def test_flag_equals_double_dash_says_what_to_type(safe_shell, kind, name, line, flag):
    """Python 3.11's argparse turns ``--flag=--`` into an empty list, skipping ``type``."""
    if flag is None:  # a store_true flag takes no value: argparse's own message
        with pytest.raises(UsageError, match="ignored explicit argument"):
            safe_shell.run_line_magic(name, line)
        return
    with pytest.raises(UsageError, match=f"{flag}=-- gives {flag} no value; type a value after it"):
        if kind == "cell":
            safe_shell.run_cell_magic(name, line, "1")
        else:
            safe_shell.run_line_magic(name, line)


def _fuzz(shell, kind: str, name: str, flags: Flags) -> None:
    """60 random lines for one magic; AssertionError names the smallest failing line."""

    @settings(
        max_examples=60,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(line=lines(flags), cell=st.sampled_from(CELLS_OF.get(name, CELLS)))
    def check(line, cell):
        outcome = run_one(shell, kind, name, line, cell)
        assert outcome in ("ran", "usage"), (
            f"{'%%' if kind == 'cell' else '%'}{name} {line!r}: {outcome}"
        )

    check()


def test_random_lines_run_or_raise_usage_error(safe_shell, capsys):
    failures = []
    for kind, name, flags in our_magics(safe_shell):
        try:
            _fuzz(safe_shell, kind, name, flags)
        except AssertionError as exc:
            failures.append(str(exc).splitlines()[0])
    capsys.readouterr()
    assert not failures, "\n".join(failures)
