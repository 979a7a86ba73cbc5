"""A helper library that keeps every tensor it is given on a module-level list (a seeded leak)."""

_seen = []


def normalize(t):
    """``t`` scaled to unit norm; the library keeps ``t`` for "statistics" and never lets go."""
    _seen.append(t)
    return t / t.norm()
