"""Parsers for the version strings and variables behind ``%cudainfo``: plain functions, no I/O.

Each turns one piece of text (``torch.__version__``, ``CUDA_VISIBLE_DEVICES``,
cuDNN's integer) into data; what cannot be parsed becomes None or an :class:`~cudamagic.core.na.NA`
with the reason.
"""

from __future__ import annotations

import re

from ..core.na import NA, is_na


def parse_torch_version(version: str) -> dict:
    """Split ``torch.__version__`` into release and variant.

    ``'2.3.1+cpu'`` -> ``{"release": "2.3.1", "variant": "cpu", "kind": "cpu"}``;
    ``'2.4.0+cu121'`` -> kind ``"cuda"``, ``cuda_tag`` ``"12.1"`` (old two-digit tags too:
    ``'1.1.0+cu90'`` -> ``"9.0"``); ``'2.4.0+rocm6.1'`` -> kind ``"rocm"``;
    ``'2.5.0'`` (PyPI default wheel, CUDA on Linux x86) -> variant ``""``, kind ``"default"``;
    ``'2.6.0a0+git1234'`` (source build) -> kind ``"source"``.
    """
    version = str(version)
    release, _, local = version.partition("+")
    out = {"release": release, "variant": local, "kind": "default", "cuda_tag": None}
    if local == "cpu" or local.startswith("cpu"):
        out["kind"] = "cpu"
    elif re.fullmatch(r"cu\d{2,4}", local):
        digits = local[2:]
        out["kind"] = "cuda"
        out["cuda_tag"] = f"{int(digits[:-1])}.{digits[-1]}"
    elif local.startswith("rocm"):
        out["kind"] = "rocm"
    elif local.startswith("git") or "a0" in release:
        out["kind"] = "source"
    return out


def decode_cudnn_version(value):
    """Decode ``torch.backends.cudnn.version()``'s integer into ``'major.minor.patch'``.

    cuDNN 7 and 8 encode ``major*1000 + minor*100 + patch`` (``7605`` -> ``'7.6.5'``,
    ``8902`` -> ``'8.9.2'``); cuDNN 9 encodes ``major*10000 + minor*100 + patch``
    (``90100`` -> ``'9.1.0'``, ``91002`` -> ``'9.10.2'``). None (no cuDNN) -> NA.
    """
    if value is None:
        return NA("PyTorch has no cuDNN: CPU build, or cuDNN not loaded", "not_available")
    if is_na(value):
        return value
    try:
        v = int(value)
    except (TypeError, ValueError, OverflowError):  # int(float("inf"))
        v = 0
    if v <= 0:
        return NA(f"unreadable cuDNN version {value!r}", "error")
    if v >= 90000:
        return f"{v // 10000}.{(v % 10000) // 100}.{v % 100}"
    return f"{v // 1000}.{(v % 1000) // 100}.{v % 100}"


def parse_cuda_visible_devices(value):
    """Parse ``CUDA_VISIBLE_DEVICES`` as the CUDA runtime does.

    Args:
        value: the variable's text, or None when unset.

    Returns:
        dict: ``set`` (bool), ``raw``, ``entries`` (list of ``{"kind": "index"|"uuid"|"mig",
            "value": str|int}``
        that CUDA will honour, in order), ``ignored`` (entries after the first invalid one, which
        CUDA drops silently), ``invalid`` (the first invalid entry or None), ``repeated`` (the first
        entry repeated within the leading run of one form, as PyTorch's
        ``torch.cuda._parse_visible_devices`` reads it, or None), ``hides_all`` (bool: empty,
        ``-1``, the first entry invalid, or a repeat: PyTorch then sees no GPU). A leading
        ``GPU-``/``MIG-`` prefix marks UUID forms; CUDA accepts unique UUID prefixes.
    """
    out = {
        "set": value is not None,
        "raw": value,
        "entries": [],
        "ignored": [],
        "invalid": None,
        "repeated": None,
        "hides_all": False,
    }
    if value is None:
        return out
    parts = [p.strip() for p in value.split(",")]
    if value.strip() == "" or parts == [""]:
        out["hides_all"] = True
        return out
    for i, p in enumerate(parts):
        entry = None
        if re.fullmatch(r"\d+", p):
            entry = {"kind": "index", "value": int(p)}
        elif p.upper().startswith("MIG-") and len(p) > 4:
            entry = {"kind": "mig", "value": p}
        elif p.upper().startswith("GPU-") and len(p) > 4:
            entry = {"kind": "uuid", "value": p}
        if entry is None:
            out["invalid"] = p
            out["ignored"] = parts[i + 1 :]
            break
        out["entries"].append(entry)
    # PyTorch (torch.cuda._parse_visible_devices) reads the leading run of entries of the first
    # entry's form (indices, GPU- or MIG- UUIDs) and makes a repeat inside that run an empty set: no
    # GPU at all
    lead = []
    for e in out["entries"]:
        if e["kind"] != out["entries"][0]["kind"]:
            break
        if e["value"] in lead:
            out["repeated"] = e["value"]
            break
        lead.append(e["value"])
    if not out["entries"] or out["repeated"] is not None:
        out["hides_all"] = True
    return out
