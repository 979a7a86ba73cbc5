"""Tier 1 for the %gpuwatch text view: terminal control characters neutralised, 100 columns.

No IPython here.
"""

import pytest

from cudamagic.core.fmt import terminal_safe
from cudamagic.watch.render import TEXT_WIDTH, sample_text
from tests.fake_nvml import GIB, HOSTILE_NAME
from tests.watch.fakes import live

TERMINAL_ATTACK = "evil\x1b[2J\x1b[31mRED\nGPU 9  fake row\r\x07\u202egnp.exe"


def test_text_view_neutralises_terminal_control_characters(fake_nvml):
    """Terminal control characters in names are neutralised.

    A process or GPU name with ESC, newline, CR or a bidi override must not clear the terminal,
    colour it or forge a table row in the text view (it did: the bytes went out raw).
    """
    fake = fake_nvml("one_gpu")
    fake.gpus[0]["processes"] = [(4242, GIB)]
    fake.gpus[0]["name"] = "H100\x1b]0;title\x07"
    clean = sample_text(live(proc_info=lambda pid: ("proc", "cmd", True)).read(1, 0.0))
    s = live(proc_info=lambda pid: (TERMINAL_ATTACK, TERMINAL_ATTACK, True)).read(1, 0.0)
    text = sample_text(s, "replay of /tmp/a\x1b[2Jb.jsonl", error="bad\nline")
    assert not any(ch in text for ch in "\x1b\r\x07\u202e")
    assert len(text.splitlines()) == len(clean.splitlines()) + 1  # + the error line; no forged rows
    assert "evil\\x1b[2J\\x1b[31mRED\\x0aGPU 9  fake row\\x0d\\x07\\u202egnp.exe" in text
    assert "H100\\x1b]0;title\\x07" in text and "a\\x1b[2Jb.jsonl" in text.splitlines()[0]
    assert HOSTILE_NAME == terminal_safe(
        HOSTILE_NAME
    )  # ordinary text (and HTML-looking text) unchanged


@pytest.mark.parametrize(
    "scenario",
    [
        "gpu_without_fan",
        "mig",
        "process_in_other_pid_namespace",
        "no_driver",
        "version_mismatch",
        "training",
    ],
)
def test_text_view_fits_100_columns(fake_nvml, scenario):
    """The text view fits 100 columns.

    Terminal width: the GPU table was 122 columns and the no-driver and 'no process' lines up to
    200; a 100-column terminal wrapped them mid-word. Prose now wraps at 100 and the table fits.
    """
    from tests import fake_nvml as fm

    fake = fake_nvml(fm.training_scenario() if scenario == "training" else scenario)
    if fake.gpus:
        fake.gpus[0]["processes"] = [(4242, GIB)]
    src = live(proc_info=lambda pid: ("python", "python train.py", True))
    src.read(1, 0.0)
    s = src.read(2, 1.0)
    text = sample_text(s, "live", "running, every 1 s")
    too_wide = [ln for ln in text.splitlines() if len(ln) > TEXT_WIDTH]
    assert too_wide == []
    if fake.gpus:
        assert "1980/2619" in text or "345/2619" in text
    else:
        assert "No GPU data:" in text and text.count("No GPU data:") == 1
