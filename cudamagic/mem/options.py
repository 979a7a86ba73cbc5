"""``%cudamem`` options, checked before anything runs."""

from __future__ import annotations

from IPython.core.error import UsageError

from ..core.fmt import parse_bytes

#: action (None: the cell magic) -> the flags it accepts.
ALLOWED_FLAGS = {
    None: {"--reset-peak", "--top"},
    "on": {"--threshold"},
    "off": set(),
    "history": {"--json", "--clear"},
    "free": {"--out", "--var"},
    "why": set(),
}
#: What only the line form takes: the action word and the actions' flags.
LINE_ONLY = {"action"} | set().union(*(f for a, f in ALLOWED_FLAGS.items() if a is not None))
ACTIONS = "`%cudamem on`, `%cudamem off`, `%cudamem history`, `%cudamem free` or `%cudamem why`"


def check_action(args, is_cell: bool) -> str | None:
    """The action word of ``%cudamem``, or None for ``%%cudamem``.

    Raises:
        UsageError: an action word in cell mode, none or an unknown one in line mode, or a flag that
            does not apply to the action (e.g. ``--top`` with ``%cudamem on``).
    """
    action = args.action
    if is_cell and action is not None:
        raise UsageError(
            f"%%cudamem takes no action word (got {action!r}). Put `%cudamem {action}` on a "
            "line of its own, or start the cell with just `%%cudamem`."
        )
    if not is_cell and action is None:
        raise UsageError(
            "%cudamem needs an action: `%cudamem on`, `%cudamem off`, `%cudamem history`, "
            "`%cudamem free`, `%cudamem why`; or use `%%cudamem` as the first line of a cell to "
            "measure it."
        )
    if action not in ALLOWED_FLAGS:
        raise UsageError(f"unknown %cudamem action {action!r}: use {ACTIONS}.")
    used = {
        "--reset-peak": args.reset_peak,
        "--top": args.top is not None,
        "--threshold": args.threshold is not None,
        "--json": args.json,
        "--clear": args.clear,
        "--out": args.out is not None,
        "--var": bool(args.var),
    }
    bad = [flag for flag, on in used.items() if on and flag not in ALLOWED_FLAGS[action]]
    if bad:
        where = "%%cudamem" if action is None else f"%cudamem {action}"
        ok = ", ".join(sorted(ALLOWED_FLAGS[action])) or "no flags"
        raise UsageError(f"{bad[0]} does not apply to {where} (it takes {ok}); see `%cudamem?`.")
    return action


def check_top(top: int) -> int:
    """``--top`` rows (0 or more), else ``UsageError``."""
    if top < 0:
        raise UsageError(f"--top must be 0 or more (got {top}); for example `%%cudamem --top 5`.")
    return top


def threshold_bytes(text: str) -> int:
    """``--threshold`` text (``64MiB``, ``1.5GB``, ``4096``) as bytes, else ``UsageError``."""
    try:
        return parse_bytes(text)
    except ValueError as exc:
        raise UsageError(
            f"--threshold: {exc}; for example `%cudamem on --threshold 64MiB`."
        ) from exc
