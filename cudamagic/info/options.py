"""Option checks of ``%cudainfo``."""

from __future__ import annotations

import argparse

from IPython.core.error import UsageError

USAGE = "%cudainfo [--json | -q]"


def check(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` unchanged, or a ``UsageError`` when ``--json`` and ``-q`` are both given."""
    if args.json and args.quiet:
        raise UsageError(f"%cudainfo: use either --json or -q. Usage: {USAGE}.")
    return args
