"""Browser suite fixtures: a real JupyterLab and a real headless Chromium driven by Playwright.

JupyterLab runs from this venv. Session scope: one JupyterLab server and one browser for the whole
browser suite (starting Lab and a kernel is the slow part). Both are always shut down in
``finally`` blocks, also when a check or the start-up itself fails: the server runs in its own
process group and is asked to shut down through its REST API (which stops its kernels), then the
group and every process it started are terminated and, if needed, killed.

Isolation: the server's root is a temporary COPY of ``examples/`` (runs never modify the
repository), and its config, runtime, workspace and settings directories are temporary too (no
state from ``~/.jupyter`` leaks in, nothing is written there). Chromium runs with flags that keep
it off the network, and every request that does not go to 127.0.0.1 is aborted by a Playwright
route.

Skips (with the reason) when Playwright, JupyterLab or the Chromium binary is missing; in CI they
are installed (``make test`` installs ``.[test]``; ``scripts/system_deps.sh`` installs Chromium), so
the suite runs there.
"""

from __future__ import annotations

import importlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from urllib.parse import urlparse

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
ARTIFACTS = os.path.join(
    ROOT, "tests", "_artifacts", "screenshots"
)  # git-ignored (tests/_artifacts/)

LAB_START_TIMEOUT_S = 90.0

#: Chromium flags: headless, no sandbox (root in containers), and nothing that phones home.
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-dev-shm-usage",
    "--no-default-browser-check",
    "--metrics-recording-only",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
]


def chromium_path():
    """The system Chromium, or None.

    Looked for as ``$CUDAMAGIC_CHROMIUM``, ``/usr/bin/chromium`` or ``chromium`` on PATH.
    """
    for cand in (
        os.environ.get("CUDAMAGIC_CHROMIUM"),
        "/usr/bin/chromium",
        shutil.which("chromium"),
        shutil.which("chromium-browser"),
    ):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def missing_reason():
    """Why the browser suite cannot run here, or None."""
    try:
        importlib.import_module("playwright.sync_api")
    except ImportError:
        return "playwright is not installed (pip install -e '.[test]')"
    try:
        importlib.import_module("jupyterlab")
    except ImportError:
        return "jupyterlab is not installed (pip install -e '.[test]')"
    if chromium_path() is None:
        return (
            "Chromium not found (/usr/bin/chromium); "
            "run scripts/system_deps.sh or set CUDAMAGIC_CHROMIUM"
        )
    return None


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_json(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f)


def _isolated_env(base):
    """Environment for the server: temp dirs, the repo importable, no network.

    Config and runtime dirs are temporary.
    """
    env = dict(os.environ)
    env.update(
        {
            "JUPYTER_CONFIG_DIR": os.path.join(base, "config"),
            "JUPYTER_RUNTIME_DIR": os.path.join(base, "runtime"),
            "JUPYTERLAB_WORKSPACES_DIR": os.path.join(base, "workspaces"),
            "JUPYTERLAB_SETTINGS_DIR": os.path.join(base, "settings"),
            "IPYTHONDIR": os.path.join(base, "ipython"),
            "JUPYTER_PLATFORM_DIRS": "0",
            "PYTHONPATH": ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""),
            "PYTHONUNBUFFERED": "1",
            "MPLBACKEND": "Agg",
        }
    )
    # Lab must not fetch news or check for updates; the announcements toast must not cover the page.
    _write_json(
        os.path.join(env["JUPYTER_CONFIG_DIR"], "jupyter_server_config.json"),
        {"LabApp": {"news_url": None, "check_for_updates_class": "jupyterlab.NeverCheckForUpdate"}},
    )
    settings = env["JUPYTERLAB_SETTINGS_DIR"]
    _write_json(
        os.path.join(
            settings, "@jupyterlab", "apputils-extension", "notification.jupyterlab-settings"
        ),
        {"fetchNews": "false", "checkForUpdates": False},
    )
    # Every cell rendered (no virtual scrolling): the page checks measure outputs out of view too.
    _write_json(
        os.path.join(settings, "@jupyterlab", "notebook-extension", "tracker.jupyterlab-settings"),
        {"windowingMode": "none"},
    )
    return env


class LabServer:
    """A running JupyterLab.

    ``url(path)`` gives an authenticated URL; ``root`` is the temp copy of examples/.
    """

    def __init__(self, proc, port, token, root, log_path):
        self.proc, self.port, self.token, self.root, self.log_path = (
            proc,
            port,
            token,
            root,
            log_path,
        )
        self.base = f"http://127.0.0.1:{port}"

    def url(self, path=""):
        sep = "&" if "?" in path else "?"
        return f"{self.base}/{path.lstrip('/')}{sep}token={self.token}"

    def api(self, path, method="GET", timeout=5.0):
        req = urllib.request.Request(
            f"{self.base}/api/{path.lstrip('/')}",
            method=method,
            headers={"Authorization": f"token {self.token}"},
        )
        with urllib.request.urlopen(req, timeout=timeout) as r:
            body = r.read()
        return json.loads(body) if body else None

    def shutdown_kernels(self):
        """Shut down every kernel of the server (between tests, to free the CPU)."""
        try:
            for k in self.api("kernels"):
                self.api(f"kernels/{k['id']}", method="DELETE", timeout=10.0)
        except Exception:
            pass

    def log_tail(self, n=4000):
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""


def _start_lab(base, root, env):
    """Start JupyterLab on a free 127.0.0.1 port; wait for /api/status.

    A couple of tries guard against port races.
    """
    log_path = os.path.join(base, "jupyterlab.log")
    last = ""
    for _attempt in range(3):
        port, token = _free_port(), secrets.token_hex(24)
        cmd = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}",
            "--ServerApp.open_browser=False",
            "--LabApp.expose_app_in_browser=True",
            "--JupyterNotebookApp.expose_app_in_browser=True",  # Notebook 7's pages (/notebooks/)
            f"--LabApp.workspaces_dir={env['JUPYTERLAB_WORKSPACES_DIR']}",
            f"--LabApp.user_settings_dir={env['JUPYTERLAB_SETTINGS_DIR']}",
            "--LabApp.extension_manager=readonly",
            "--ServerApp.terminals_enabled=False",
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--ServerApp.allow_root=True")  # containers and CI images often run as root
        log = open(log_path, "ab")
        proc = subprocess.Popen(
            cmd,
            cwd=root,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        server = LabServer(proc, port, token, root, log_path)
        deadline = time.monotonic() + LAB_START_TIMEOUT_S
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            try:
                server.api("status", timeout=2.0)
                return server
            except (urllib.error.URLError, ConnectionError, OSError, ValueError):
                time.sleep(0.25)
        last = server.log_tail()
        _stop_lab(server)
        if proc.returncode not in (None, 0) and "already in use" in last:
            continue  # lost a port race: try another port
        break
    raise RuntimeError(
        f"JupyterLab did not answer /api/status within {LAB_START_TIMEOUT_S:.0f} s. "
        f"Log tail:\n{last}"
    )


def _descendants(pid):
    try:
        import psutil

        return psutil.Process(pid).children(recursive=True)
    except Exception:  # psutil missing or process gone
        return []


def _stop_lab(server):
    """Shut the server and its kernels down; leave no process behind.

    The process group is killed, then the known descendants.
    """
    proc = server.proc
    children = _descendants(
        proc.pid
    )  # kernels run in their own sessions: remember them before the server goes
    if proc.poll() is None:
        try:
            server.api("shutdown", method="POST", timeout=5.0)  # stops the kernels cleanly
        except Exception:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
    for child in children:
        try:
            if child.is_running():
                child.kill()
                child.wait(timeout=5)
        except Exception:
            pass


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    """The JupyterLab server (session scope), rooted at a temporary copy of ``examples/``."""
    reason = missing_reason()
    if reason:
        skip_or_fail(reason)
    base = str(tmp_path_factory.mktemp("lab"))
    root = os.path.join(base, "examples")
    shutil.copytree(
        EXAMPLES, root, ignore=shutil.ignore_patterns("out", ".ipynb_checkpoints", "__pycache__")
    )
    from tests.browser import notebooks

    notebooks.strip_outputs(root)
    notebooks.write_browser_check(root)
    notebooks.write_reopen_check(root)
    # cluster_watch.ipynb imports ../scripts/prom_sim.py (the local demo cluster)
    os.makedirs(os.path.join(base, "scripts"))
    shutil.copy(os.path.join(ROOT, "scripts", "prom_sim.py"), os.path.join(base, "scripts"))
    env = _isolated_env(base)
    server = _start_lab(base, root, env)
    try:
        yield server
    finally:
        _stop_lab(server)


@pytest.fixture(scope="session")
def browser():
    """Headless system Chromium through Playwright (session scope); closed in ``finally``."""
    reason = missing_reason()
    if reason:
        skip_or_fail(reason)
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    try:
        # Scrollbars shown as a person's Chromium shows them (Playwright hides them by default in
        # headless): the overflow checks accept a scroll box whose scrollbar is visible.
        b = pw.chromium.launch(
            executable_path=chromium_path(),
            headless=True,
            args=CHROMIUM_ARGS,
            ignore_default_args=["--hide-scrollbars"],
            timeout=60_000,
        )
        try:
            yield b
        finally:
            b.close()
    finally:
        pw.stop()


@pytest.fixture(scope="module")
def page(browser, lab):
    """A fresh browser context and page per test module (each module opens one notebook).

    Only 127.0.0.1 is reachable: every other request is aborted and recorded in
        ``page.blocked_requests``;
    console errors are kept in ``page.console_errors`` for failure messages. Kernels are shut down
    afterwards.
    """
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, service_workers="block")
    blocked, console_errors = [], []

    def only_local(route):
        url = route.request.url
        if url.startswith(("data:", "blob:")) or urlparse(url).hostname == "127.0.0.1":
            route.continue_()
        else:
            blocked.append(url)
            route.abort()

    try:
        context.route("**/*", only_local)
        p = context.new_page()
        p.blocked_requests, p.console_errors = blocked, console_errors
        p.on(
            "console", lambda msg: console_errors.append(msg.text) if msg.type == "error" else None
        )
        p.set_default_timeout(30_000)
        yield p
    finally:
        context.close()
        lab.shutdown_kernels()


@pytest.fixture(scope="session")
def screenshots():
    """Directory for the screenshots of checked states (git-ignored)."""
    os.makedirs(ARTIFACTS, exist_ok=True)
    return ARTIFACTS


def skip_or_fail(reason: str):
    """Skip on a developer machine; FAIL under CI (env ``CI`` set).

    Under CI a missing Chromium, Playwright, JupyterLab or notebook cell means the browser tests did
    not run at all and must not pass as skipped.
    """
    if os.environ.get("CI"):
        pytest.fail(f"browser test could not run under CI: {reason}", pytrace=False)
    pytest.skip(reason)


def pytest_terminal_summary(terminalreporter):
    """After a run with page surveys, print the lowest contrasts and the screenshots.

    One lowest contrast per theme, one screenshot per theme and magic.
    """
    from tests.browser import looks

    if not looks.RESULTS:
        return
    tr = terminalreporter
    tr.section("how the outputs look (issue 16)")
    for which, what in (("min", "cudamagic's outputs"), ("min_all", "all outputs")):
        for theme in looks.THEMES:
            low = looks.lowest(theme, which)
            if low:
                tr.write_line(
                    f"lowest text contrast, {theme} theme, {what}: {low['ratio']}:1 "
                    f"(needs {low['need']}) {low['fg']} on {low['bg']} {low['text']!r} "
                    f"in {low['notebook']} {low['state']} "
                    f"cell {low['cell']} [{low['element']}]"
                )
    for theme in looks.THEMES:
        seen = set()
        for states in looks.RESULTS.values():
            for key, state in states.items():
                if key != f"{theme}-{looks.WIDTHS[0]}":
                    continue
                for magic, path in state["shots"].items():
                    if magic != "page" and magic not in seen:
                        seen.add(magic)
                        tr.write_line(
                            f"screenshot {theme:5} {magic:15} {os.path.relpath(path, ROOT)}"
                        )
    tr.write_line(f"summary: {os.path.relpath(looks.SUMMARY, ROOT)}")
