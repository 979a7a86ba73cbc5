"""What a test of an output's HTML needs about the styles ``core.style.page`` inlines."""

import re

from cudamagic.core.style import INLINE

_INLINED = {decl for value in INLINE.values() for decl in value.split(";")}


def own_styles(html_text: str) -> list:
    """Inline declarations after the stylesheet that are not :data:`INLINE`'s.

    An output's look comes from the shared stylesheet and the shared inline set: an empty list is
    the goal.
    """
    body = html_text.split("</style>", 1)[1]
    found = re.findall(r'\sstyle="([^"]*)"', body)
    return [d for value in found for d in value.split(";") if d and d not in _INLINED]


def plain(html_text: str) -> str:
    """``html_text`` without the declarations ``page`` inlined (for assertions on markup)."""

    def keep(m):
        own = [d for d in m.group(1).split(";") if d and d not in _INLINED]
        return f' style="{";".join(own)}"' if own else ""

    return re.sub(r'\sstyle="([^"]*)"', keep, html_text)
