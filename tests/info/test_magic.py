"""Tier 2: %cudainfo, --json, bad flags, unload/reload in a real InteractiveShell."""

import json
import subprocess
import sys
import threading

import pytest
from IPython.core.error import UsageError

from cudamagic import extension as cm_extension
from cudamagic.info.result import CudaInfoReport


def test_cudainfo_returns_report(ip, fake_nvml, monkeypatch):
    import torch

    fake_nvml("no_driver")
    monkeypatch.setattr(torch, "__version__", "2.13.0+cpu")
    r = ip.run_line_magic("cudainfo", "")
    assert isinstance(r, CudaInfoReport)
    d = r.to_dict()
    assert d["torch"]["version"] == "2.13.0+cpu"
    assert d["driver"]["status"]["code"] == "no_driver"
    html = r._repr_html_()
    assert "2.13.0+cpu" in html and "<table" in html


def test_cudainfo_json_keys_follow_nvidia_smi(ip, fake_nvml, capsys):
    fake_nvml("gpu_without_fan")
    ip.run_line_magic("cudainfo", "--json")
    data = json.loads(capsys.readouterr().out)
    g1 = data["gpus"][1]
    for key in (
        "name",
        "uuid",
        "pci.bus_id",
        "memory.total",
        "memory.used",
        "utilization.gpu",
        "power.draw",
    ):
        assert key in g1
    assert g1["name"] == "Tesla T4"
    assert g1["power.draw"] == {"na": "not supported on this GPU", "code": "not_supported"}
    assert data["units"]["memory.total"] == "bytes"


def test_cudainfo_quiet(ip, fake_nvml):
    fake_nvml("one_gpu")
    assert ip.run_line_magic("cudainfo", "-q") is None
    assert isinstance(ip.user_ns["_cudainfo"], CudaInfoReport)


def test_assignment_from_run_cell(ip, fake_nvml):
    fake_nvml("one_gpu")
    res = ip.run_cell("info = %cudainfo\nd = info.to_dict()")
    assert res.success
    assert ip.user_ns["d"]["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize(
    "line, bad", [("--bogus", "--bogus"), ("-x", "-x"), ("--json extra", "extra")]
)
def test_bad_flags_are_usage_errors(ip, line, bad):
    with pytest.raises(
        UsageError, match=rf"^%cudainfo: unrecognized arguments: {bad}\. Usage: %cudainfo \[--json"
    ):
        ip.run_line_magic("cudainfo", line)


def test_bad_flag_in_cell_shows_one_line_not_traceback(ip, capsys):
    res = ip.run_cell("%cudainfo --nope")
    err = capsys.readouterr()
    text = err.out + err.err
    assert not res.success
    assert "UsageError" in text and "Traceback" not in text


def test_unload_reload_leaves_nothing(ip):
    threads = set(threading.enumerate())
    assert "cudainfo" in ip.magics_manager.magics["line"]
    ip.run_line_magic("unload_ext", "cudamagic")
    assert "cudainfo" not in ip.magics_manager.magics["line"]
    ip.run_line_magic("load_ext", "cudamagic")
    ip.run_line_magic("reload_ext", "cudamagic")
    assert "cudainfo" in ip.magics_manager.magics["line"]
    assert set(threading.enumerate()) <= threads


def test_load_ext_imports_neither_torch_nor_pynvml():
    code = (
        "import sys\nfrom IPython.core.interactiveshell import InteractiveShell\n"
        "ip = InteractiveShell.instance()\nip.run_line_magic('load_ext', 'cudamagic')\n"
        "heavy = [m for m in ('torch', 'pynvml', 'torchviz', 'graphviz', 'ipywidgets') if m in "
        "sys.modules]\n"
        "print('HEAVY', heavy)\nassert 'cudainfo' in ip.magics_manager.magics['line']"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "HEAVY []" in out.stdout


def test_extensions_config_loads(tmp_path):
    """c.InteractiveShellApp.extensions = ['cudamagic'] in a real ipython process."""
    cfg = tmp_path / "profile_default"
    cfg.mkdir()
    (cfg / "ipython_config.py").write_text("c.InteractiveShellApp.extensions = ['cudamagic']\n")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "IPython",
            "--ipython-dir",
            str(tmp_path),
            "--no-banner",
            "--quick" if False else "--no-confirm-exit",
            "-c",
            "print('HAS', 'cudainfo' in get_ipython().magics_manager.magics['line'])",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**__import__("os").environ, "IPYTHONDIR": str(tmp_path)},
    )
    assert "HAS True" in out.stdout, out.stdout + out.stderr


def test_does_not_initialise_cuda(ip, fake_nvml, cuda_calls):
    """Observed calls, not torch.cuda.is_initialized() (always False on a CPU build)."""
    fake_nvml("one_gpu")
    r = ip.run_line_magic("cudainfo", "")
    r._repr_html_(), r.to_text()
    assert cuda_calls == []


@pytest.mark.parametrize("cell", ["%cudainfo ;", "%cudainfo -q;", "x = 1\n%cudainfo ;"])
def test_semicolon_silences(ip, fake_nvml, cell, capsys):
    fake_nvml("one_gpu")
    ip.user_ns.pop("_cudainfo", None)
    res = ip.run_cell(cell)
    assert res.success and res.result is None
    assert isinstance(ip.user_ns["_cudainfo"], CudaInfoReport)
    assert "Verdict" not in capsys.readouterr().out


def test_semicolon_is_ipythons_own_silencing(ip, fake_nvml, capsys):
    """IPython drops the result of a magic marked @output_can_be_silenced: no extra magic name."""
    fake_nvml("one_gpu")
    ip.run_line_magic("lsmagic", "")
    assert "cudainfo;" not in capsys.readouterr().out
    assert "cudainfo;" not in ip.magics_manager.magics["line"]
    assert ip.run_line_magic("cudainfo", ";") is None
    assert ip.run_line_magic("cudainfo", "") is not None


def test_bad_flag_message_says_what_to_type(ip):
    with pytest.raises(UsageError, match="--foo") as e:
        ip.run_line_magic("cudainfo", "--foo")
    msg = str(e.value)
    assert "--foo" in msg and "%cudainfo [--json | -q]" in msg and "%cudainfo?" in msg


def test_json_and_quiet_conflict(ip):
    with pytest.raises(UsageError, match="either --json or -q"):
        ip.run_line_magic("cudainfo", "--json -q")


@pytest.mark.parametrize("value", ["float('inf')", "float('nan')", "-1", "0", "1e308"])
def test_nvcc_timeout_rejected_by_config(ip, value, capsys):
    ip.run_cell(f"%config CudaMagics.nvcc_timeout_s = {value}")
    try:
        magics = cm_extension.current().settings
        assert 0.1 <= magics.nvcc_timeout_s <= 600
        assert isinstance(ip.run_line_magic("cudainfo", ""), CudaInfoReport)
        # the rejected value may linger in the shell's config: reloading must still work, with a
        # warning
        capsys.readouterr()
        ip.run_line_magic("reload_ext", "cudamagic")
        assert 0.1 <= cm_extension.current().settings.nvcc_timeout_s <= 600
        assert isinstance(ip.run_line_magic("cudainfo", ""), CudaInfoReport)
    finally:
        ip.config.CudaMagics.pop("nvcc_timeout_s", None)


def test_bad_value_in_config_file_does_not_break_load(ip, capsys):
    ip.run_line_magic("unload_ext", "cudamagic")
    ip.config.CudaMagics.nvcc_timeout_s = -3.0
    ip.config.CudaMagics.graph_format = "jpg"  # traitlets' own message ends in a full stop
    try:
        ip.run_line_magic("load_ext", "cudamagic")
        out = capsys.readouterr().out
        assert (
            "ignoring CudaMagics.nvcc_timeout_s = -3.0" in out
            and "%config CudaMagics.nvcc_timeout_s" in out
        )
        assert "ignoring CudaMagics.graph_format = 'jpg'" in out
        assert ".." not in out  # one full stop between the setting's message and the default
        assert cm_extension.current().settings.nvcc_timeout_s == 5.0
    finally:
        ip.config.CudaMagics.pop("nvcc_timeout_s", None)
        ip.config.CudaMagics.pop("graph_format", None)


def test_unload_resets_nvml_so_a_new_binding_is_seen(ip, monkeypatch):
    """After `%pip install nvidia-ml-py`, reloading the extension looks for the binding again."""
    import sys

    from cudamagic.core import nvml
    from tests import fake_nvml as fm

    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails: binding missing
    nvml.reset()
    r = ip.run_line_magic("cudainfo", "")
    assert r.facts["driver"]["status"].code == "no_binding"
    fake = fm.FakeNVML(fm.SCENARIOS["one_gpu"])
    monkeypatch.setitem(sys.modules, "pynvml", fake.module)
    ip.run_line_magic("reload_ext", "cudamagic")
    r = ip.run_line_magic("cudainfo", "")
    assert r.facts["driver"]["status"] == "ok"
    nvml.reset()


def test_html_is_excluded_from_math_typesetting(ip, fake_nvml, monkeypatch):
    """JupyterLab typesets text between two `$` signs as maths unless the output opts out."""
    fake_nvml("one_gpu")
    monkeypatch.setenv("CUDA_HOME", "$HOME/cuda and $5")
    html = ip.run_line_magic("cudainfo", "")._repr_html_()
    assert html.startswith('<div class="cudamagic mathjax_ignore cm-info">')


def test_first_cudainfo_loads_no_width_tables():
    """The first %cudainfo of a process measures its ASCII labels without importing wcwidth.

    wcwidth's tables cost more to load than the whole report; a non-ASCII width still loads and uses
    it.
    """
    code = (
        "import sys\nfrom IPython.core.interactiveshell import InteractiveShell\n"
        "ip = InteractiveShell.instance()\nip.run_line_magic('load_ext', 'cudamagic')\n"
        "r = ip.run_line_magic('cudainfo', '')\nhtml, text = r._repr_html_(), r.to_text()\n"
        "print('AFTER_REPORT', 'wcwidth' in sys.modules, 'GPUs seen by NVML' in text)\n"
        "from cudamagic.core.fmt import display_width\n"
        "print('WIDE', display_width('训练'), 'wcwidth' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "AFTER_REPORT False True" in out.stdout and "WIDE 4 True" in out.stdout, out.stdout
