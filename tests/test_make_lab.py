"""`make lab` starts JupyterLab on examples/, as root (the README's own set-up path on a fresh machine or container)
and as a normal user: the exact command `make -n lab` prints is started on a free port, must answer /api/status,
and is then stopped."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.dirname(os.path.dirname(sys.executable))  # the virtualenv running the tests
TOKEN = "cudamagic-test-token"

pytestmark = pytest.mark.skipif(shutil.which("make") is None or os.name != "posix" or
                                not os.path.exists(os.path.join(VENV, "bin", "jupyter")),
                                reason="needs make and JupyterLab in this virtualenv")


def lab_command(user_cmd=()) -> list:
    """The JupyterLab line of `make -n lab` (with VENV= this virtualenv), run as the user ``user_cmd`` names."""
    out = subprocess.run([*user_cmd, "make", "-n", "lab", f"VENV={VENV}"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, check=True).stdout
    lines = [line for line in out.splitlines() if "jupyter lab" in line]
    assert len(lines) == 1, out
    return shlex.split(lines[0])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_and_check(cmd: list, runtime_dir: str, user_cmd=(), env_extra=None):
    """Start ``cmd`` on a free port, wait for /api/status (120 s at most), stop it; returns the status JSON."""
    port = free_port()
    full = [*user_cmd, *cmd, f"--port={port}", "--no-browser", f"--ServerApp.token={TOKEN}",
            "--ServerApp.port_retries=0", "--ip=127.0.0.1"]
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=runtime_dir, **(env_extra or {}))
    log = open(os.path.join(runtime_dir, "lab.log"), "w+")
    proc = subprocess.Popen(full, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                log.seek(0)
                pytest.fail(f"{shlex.join(full)} exited with {proc.returncode}:\n{log.read()[-3000:]}")
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{port}/api/status",
                                             headers={"Authorization": f"token {TOKEN}"})
                with urllib.request.urlopen(req, timeout=2) as resp:
                    return json.loads(resp.read())
            except OSError:
                time.sleep(0.5)
        log.seek(0)
        pytest.fail(f"no /api/status after 120 s from {shlex.join(full)}:\n{log.read()[-3000:]}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)  # the server and anything it started (its own session)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()
        log.close()


@pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0, reason="runs as root only when the tests run as root")
def test_make_lab_as_root(tmp_path):
    cmd = lab_command()
    assert "--allow-root" in cmd and "--notebook-dir=examples" in cmd
    status = start_and_check(cmd, str(tmp_path))
    assert "started" in status
    # without --allow-root JupyterLab refuses root: the reason the Makefile adds it
    without = [c for c in cmd if c != "--allow-root"] + ["--no-browser", f"--port={free_port()}"]
    res = subprocess.run(without, cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path)))
    assert res.returncode != 0 and "--allow-root" in res.stdout + res.stderr


def _nobody_can_run_the_venv() -> str:
    """'' when `nobody` can run this virtualenv's Python (root needed to switch to it), else why not."""
    if os.name != "posix" or os.geteuid() != 0 or shutil.which("runuser") is None:
        return "switching to the user nobody needs root and runuser"
    res = subprocess.run(["runuser", "-u", "nobody", "--", sys.executable, "-c", "import jupyterlab"],
                         capture_output=True, text=True, timeout=60)
    if res.returncode:
        return (f"the user nobody cannot run {sys.executable} ({(res.stderr or res.stdout).strip()[-200:]}); a "
                "virtualenv made by `make setup` as that user is what a normal user runs")
    return ""


def test_make_lab_as_a_normal_user(tmp_path):
    if os.name == "posix" and os.geteuid() != 0:  # the tests already run as a normal user
        cmd = lab_command()
        assert "--allow-root" not in cmd
        assert "started" in start_and_check(cmd, str(tmp_path))
        return
    why = _nobody_can_run_the_venv()
    if why:
        pytest.skip(why)
    user = ["runuser", "-u", "nobody", "--"]
    cmd = lab_command(user)
    assert "--allow-root" not in cmd
    os.chmod(tmp_path, 0o777)
    assert "started" in start_and_check(cmd, str(tmp_path), user, {"HOME": str(tmp_path)})
