"""Tier 1 tests of cudamagic.mem.free: frame clearing, with no IPython shell."""

from __future__ import annotations

import weakref

import torch

from cudamagic.mem import free


def test_clear_frames_drops_locals_even_after_f_locals_was_read():
    def inner():
        big = torch.ones(1000)  # noqa: F841
        raise RuntimeError("boom")

    try:
        inner()
    except RuntimeError as exc:
        err = exc
    tb = err.__traceback__
    frame = tb.tb_next.tb_frame
    big_ref = weakref.ref(frame.f_locals["big"])  # reading f_locals creates the 3.11 snapshot dict
    module_ns = {"keep": 1}
    free._clear_frames(tb)
    assert big_ref() is None
    assert module_ns == {"keep": 1}
