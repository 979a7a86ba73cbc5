"""`make lab` starts JupyterLab on examples/, as root and as a normal user.

As root (the set-up path of CONTRIBUTING.md on a fresh machine or container): the exact command
`make -n lab` prints is started on a free port, must answer /api/status, and is then stopped.
As a normal user (the tests run as root here and in CI): a throwaway user is created with its HOME
under /tmp, gets its own copy of the tracked files `make lab` reads and its own virtualenv (made by
that user with the system Python of this X.Y; this virtualenv's installed packages linked in, since
nothing can be downloaded), and runs the real `make lab` in it; its ~/.jupyter config picks the
port and token. The server must answer, serve the JupyterLab page, and have been started without
--allow-root.

Marked ``slow``: each test starts a real JupyterLab server.
"""

from __future__ import annotations

import json
import os
import re
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

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("make") is None
        or os.name != "posix"
        or not os.path.exists(os.path.join(VENV, "bin", "jupyter")),
        reason="needs make and JupyterLab in this virtualenv",
    ),
]


def lab_command(user_cmd=()) -> list:
    """The JupyterLab line of `make -n lab`, run as the user ``user_cmd`` names.

    VENV= is this virtualenv.
    """
    out = subprocess.run(
        [*user_cmd, "make", "-n", "lab", f"VENV={VENV}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    lines = [line for line in out.splitlines() if "jupyter lab" in line]
    assert len(lines) == 1, out
    return shlex.split(lines[0])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_and_check(cmd: list, runtime_dir: str, user_cmd=(), env_extra=None):
    """Start ``cmd`` on a free port, wait for /api/status, stop it; return the status JSON.

    The wait is 120 s at most.
    """
    port = free_port()
    full = [
        *user_cmd,
        *cmd,
        f"--port={port}",
        "--no-browser",
        f"--ServerApp.token={TOKEN}",
        "--ServerApp.port_retries=0",
        "--ip=127.0.0.1",
    ]
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=runtime_dir, **(env_extra or {}))
    log = open(os.path.join(runtime_dir, "lab.log"), "w+")
    proc = subprocess.Popen(
        full, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                log.seek(0)
                pytest.fail(
                    f"{shlex.join(full)} exited with {proc.returncode}:\n{log.read()[-3000:]}"
                )
            try:
                req = urllib.request.Request(
                    f"http://127.0.0.1:{port}/api/status",
                    headers={"Authorization": f"token {TOKEN}"},
                )
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


@pytest.mark.skipif(
    os.name != "posix" or os.geteuid() != 0, reason="runs as root only when the tests run as root"
)
def test_make_lab_as_root(tmp_path):
    cmd = lab_command()
    assert "--allow-root" in cmd and "--notebook-dir=examples" in cmd
    status = start_and_check(cmd, str(tmp_path))
    assert "started" in status
    # without --allow-root JupyterLab refuses root: the reason the Makefile adds it
    without = [c for c in cmd if c != "--allow-root"] + ["--no-browser", f"--port={free_port()}"]
    res = subprocess.run(
        without,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path)),
    )
    assert res.returncode != 0 and "--allow-root" in res.stdout + res.stderr


def _user_python():
    """A Python of this X.Y that every user can run (the system one), or None."""
    name = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    for cand in (f"/usr/bin/{name}", f"/usr/local/bin/{name}", shutil.which(name)):
        if (
            cand
            and os.path.isfile(cand)
            and os.stat(cand).st_mode & 0o001
            and all(
                os.stat(d).st_mode & 0o001
                for d in _ancestors(os.path.dirname(os.path.realpath(cand)))
            )
        ):
            return cand
    return None


def _ancestors(path):
    path = os.path.abspath(path)
    out = [path]
    while os.path.dirname(path) != path:
        path = os.path.dirname(path)
        out.append(path)
    return out


@pytest.fixture
def normal_user():
    """A throwaway non-root user with HOME under /tmp: ``(name, home)``; removed afterwards."""
    if (
        os.name != "posix"
        or os.geteuid() != 0
        or not all(shutil.which(p) for p in ("useradd", "userdel", "runuser"))
    ):
        pytest.skip("creating a user needs root, useradd, userdel and runuser")
    import tempfile

    name = f"cmlab{os.getpid() % 100000}"
    home = tempfile.mkdtemp(prefix="cudamagic-lab-home-", dir="/tmp")
    subprocess.run(
        [
            "useradd",
            "--no-create-home",
            "--home-dir",
            home,
            "--shell",
            "/bin/sh",
            "--user-group",
            name,
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    try:
        subprocess.run(["chown", f"{name}:{name}", home], check=True, timeout=60)
        yield name, home
    finally:
        subprocess.run(["userdel", name], capture_output=True, timeout=60)
        shutil.rmtree(home, ignore_errors=True)


def _clone_for(user, home) -> str:
    """What `git clone` gives the user: the tracked files `make lab` reads.

    Those are the Makefile, setup files, scripts/ and examples/, owned by the user, in
    ``home/cudamagic``.
    """
    files = (
        subprocess.run(
            [
                "git",
                "ls-files",
                "-z",
                "Makefile",
                "setup.cfg",
                "pyproject.toml",
                "scripts",
                "examples",
            ],
            cwd=ROOT,
            capture_output=True,
            check=True,
            timeout=60,
        )
        .stdout.decode()
        .split("\0")
    )
    clone = os.path.join(home, "cudamagic")
    for rel in filter(None, files):
        os.makedirs(os.path.dirname(os.path.join(clone, rel)), exist_ok=True)
        shutil.copy2(os.path.join(ROOT, rel), os.path.join(clone, rel))
    subprocess.run(["chown", "-R", f"{user}:{user}", clone], check=True, timeout=60)
    return clone


def _venv_for(user, python, clone) -> str:
    """The virtualenv `make setup` would have made for the user, built offline.

    ``python -m venv`` is run by the user, with this test virtualenv's installed packages
    (site-packages, share/jupyter, etc/jupyter) linked in and its `jupyter*` entry scripts written
    for the user's interpreter, as pip writes them; then the install stamps, so `make lab` does not
    reinstall.
    """
    venv = os.path.join(clone, ".venv")
    subprocess.run(
        ["runuser", "-u", user, "--", python, "-m", "venv", "--without-pip", venv],
        check=True,
        capture_output=True,
        timeout=120,
    )
    xy = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    site = os.path.join(venv, "lib", xy, "site-packages")
    os.rmdir(site)
    os.symlink(os.path.join(VENV, "lib", xy, "site-packages"), site)
    for sub in ("share/jupyter", "etc/jupyter"):
        if os.path.isdir(os.path.join(VENV, sub)):
            os.makedirs(os.path.dirname(os.path.join(venv, sub)), exist_ok=True)
            os.symlink(os.path.join(VENV, sub), os.path.join(venv, sub))
    for script in os.listdir(os.path.join(VENV, "bin")):
        if script.startswith("jupyter"):
            with open(os.path.join(VENV, "bin", script)) as fh:
                body = fh.read().split("\n", 1)[1]
            dest = os.path.join(venv, "bin", script)
            with open(dest, "w") as fh:
                fh.write(f"#!{venv}/bin/python\n{body}")
            os.chmod(dest, 0o755)
    torch = re.search(r"^TORCH \?= (.*)$", open(os.path.join(ROOT, "Makefile")).read(), re.M).group(
        1
    )
    with open(os.path.join(venv, ".cudamagic-torch"), "w") as fh:
        fh.write(torch.strip() + "\n")
    open(os.path.join(venv, ".cudamagic-installed"), "w").close()
    subprocess.run(["chown", "-hR", f"{user}:{user}", venv], check=True, timeout=60)
    return venv


@pytest.fixture
def readable_venv():
    """Let other users traverse the folders above this virtualenv during the test.

    CI's clone sits in a `mktemp -d` folder, mode 0700; the modes are restored afterwards.
    """
    changed = []
    for d in _ancestors(VENV):
        mode = os.stat(d).st_mode
        if not mode & 0o001:
            os.chmod(d, (mode & 0o7777) | 0o001)
            changed.append((d, mode & 0o7777))
    try:
        yield
    finally:
        for d, mode in changed:
            os.chmod(d, mode)


def test_make_lab_as_a_normal_user(tmp_path, request):
    if os.name == "posix" and os.geteuid() != 0:  # the tests already run as a normal user
        cmd = lab_command()
        assert "--allow-root" not in cmd
        assert "started" in start_and_check(cmd, str(tmp_path))
        return
    python = _user_python()
    if python is None:
        pytest.skip(
            f"no python{sys.version_info[0]}.{sys.version_info[1]} that every user can run "
            "(the user's own virtualenv needs one of this version to share these installed "
            "packages)"
        )
    user, home = request.getfixturevalue("normal_user")
    request.getfixturevalue("readable_venv")
    clone = _clone_for(user, home)
    _venv_for(user, python, clone)
    # the user's own Jupyter configuration (~/.jupyter) chooses the port and token; `make lab` is
    # run as it is
    port = free_port()
    os.makedirs(os.path.join(home, ".jupyter"))
    with open(os.path.join(home, ".jupyter", "jupyter_server_config.json"), "w") as fh:
        json.dump(
            {
                "ServerApp": {
                    "port": port,
                    "port_retries": 0,
                    "ip": "127.0.0.1",
                    "open_browser": False,
                },
                "IdentityProvider": {"token": TOKEN},
            },
            fh,
        )
    subprocess.run(
        ["chown", "-R", f"{user}:{user}", os.path.join(home, ".jupyter")], check=True, timeout=60
    )
    log_path = os.path.join(home, "make-lab.log")
    env = {
        "HOME": home,
        "USER": user,
        "LOGNAME": user,
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
    }
    with open(log_path, "w+") as log:
        proc = subprocess.Popen(
            [
                "runuser",
                "-u",
                user,
                "--",
                "env",
                "-i",
                *(f"{k}={v}" for k, v in env.items()),
                "make",
                "lab",
            ],
            cwd=clone,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            status = _wait_status(proc, port, log)
            with urllib.request.urlopen(
                f"http://127.0.0.1:{port}/lab?token={TOKEN}", timeout=30
            ) as resp:
                page = resp.read().decode()  # the JupyterLab page itself: its assets were found
            out = _read(log)
        finally:
            _stop(proc)
    assert "started" in status and "<title>JupyterLab</title>" in page
    lab_lines = [
        line
        for line in out.splitlines()
        if "jupyter lab" in line and "--notebook-dir=examples" in line
    ]
    assert len(lab_lines) == 1 and "--allow-root" not in lab_lines[0], out[-3000:]
    assert "pip install" not in out, out[
        -3000:
    ]  # the set-up was already done: make lab only starts the server
    assert (
        os.stat(os.path.join(home, ".local", "share", "jupyter", "runtime")).st_uid != 0
    )  # the user's own files


def _read(log) -> str:
    log.seek(0)
    return log.read()


def _wait_status(proc, port, log) -> dict:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"`make lab` exited with {proc.returncode}:\n{_read(log)[-3000:]}")
        try:
            req = urllib.request.Request(
                f"http://127.0.0.1:{port}/api/status", headers={"Authorization": f"token {TOKEN}"}
            )
            with urllib.request.urlopen(req, timeout=2) as resp:
                return json.loads(resp.read())
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"no /api/status after 120 s from `make lab`:\n{_read(log)[-3000:]}")


def _stop(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
