"""``%cudamem`` options, checked before anything runs."""

from __future__ import annotations

import re

from IPython.core.error import UsageError

#: action (None: the cell magic) -> the flags it accepts.
ALLOWED_FLAGS = {
    None: {"--reset-peak", "--top"},
    "on": {"--threshold"},
    "off": set(),
    "history": {"--json", "--clear"},
    "free": {"--out", "--var"},
}
ACTIONS = "`%cudamem on`, `%cudamem off`, `%cudamem history` or `%cudamem free`"


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
            "`%cudamem free`; or use `%%cudamem` as the first line of a cell to measure it."
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


_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
}


def parse_bytes(text: str) -> int:
    """``'64MiB'`` -> 67108864, ``'1.5GB'`` -> 1500000000, ``'4096'`` -> 4096.

    Raises:
        ValueError: not a size (the magic turns it into a UsageError).
    """
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"not a size: {text!r} (write e.g. 64MiB, 1GiB or a number of bytes)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])
