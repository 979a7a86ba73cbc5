"""A monitor still running when its kernel is shut down.

A monitor still running when its kernel is shut down: the snapshot goes out before the kernel says
goodbye.

Tier 3 with a real ipykernel driven by ``jupyter_client`` (as JupyterLab's server drives it): the
kernel's ``shutdown_request`` handlers are wrapped while ``%gpuwatch`` is loaded and restored by
``%unload_ext``; a ``shutdown_request`` sent while a replay runs yields, on IOPub, the
``update_display_data`` that replaces the widget by the stopped snapshot BEFORE the
``shutdown_reply`` ipykernel broadcasts there (one socket, so the order is the kernel's own).
Without the wrapper the snapshot is sent from ``atexit``, after that reply. Tier 2: harmless in a
terminal IPython (no kernel).
"""

import json
import queue
import time

import pytest

from tests.watch.fakes import DEMO, ROOT

CHECK = """\
import json
k = get_ipython().kernel
print(json.dumps({t: hasattr(getattr(k, t)['shutdown_request'], '_cudamagic_wraps')
                  for t in ('control_handlers', 'shell_handlers')}
                 | {'original_' + t: getattr(k, t)['shutdown_request'] == k.shutdown_request
                    for t in ('control_handlers', 'shell_handlers')}))
"""


def _run(kc, code, timeout=60):
    """Execute ``code``; returns (stdout text, display messages) of that cell."""
    msg_id = kc.execute(code)
    out, displays = "", []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = kc.get_iopub_msg(timeout=timeout)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind = msg["msg_type"]
        if kind == "stream":
            out += msg["content"]["text"]
        elif kind in ("display_data", "update_display_data"):
            displays.append(msg)
        elif kind == "error":
            raise AssertionError("\n".join(msg["content"]["traceback"]))
        elif kind == "status" and msg["content"]["execution_state"] == "idle":
            return out, displays
    raise AssertionError(f"no idle after {code!r}")


@pytest.mark.kernel
def test_shutdown_request_sends_snapshot_first_and_unload_restores_handlers():
    pytest.importorskip("ipykernel")
    from jupyter_client.manager import KernelManager

    km = KernelManager(kernel_name="python3")
    km.start_kernel(cwd=ROOT)
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        _run(kc, f"import sys; sys.path.insert(0, {ROOT!r})")
        before = json.loads(_run(kc, CHECK)[0])
        assert before == {
            "control_handlers": False,
            "shell_handlers": False,
            "original_control_handlers": True,
            "original_shell_handlers": True,
        }, before

        # loading wraps both handlers (once); %unload_ext stops the monitor and puts ipykernel's
        # own back
        _run(kc, "%load_ext cudamagic")
        wrapped = json.loads(_run(kc, CHECK)[0])
        assert wrapped == {
            "control_handlers": True,
            "shell_handlers": True,
            "original_control_handlers": False,
            "original_shell_handlers": False,
        }, wrapped
        _run(kc, "w = %gpuwatch --replay examples/trace_demo.jsonl --interval 1\nw")
        assert json.loads(_run(kc, CHECK)[0]) == {
            "control_handlers": True,
            "shell_handlers": True,
            "original_control_handlers": False,
            "original_shell_handlers": False,
        }
        _run(kc, "%unload_ext cudamagic")
        after, running = _run(kc, CHECK + "print(json.dumps(w.running))")[0].splitlines()
        assert json.loads(after) == before, after
        assert running == "false"

        # loaded again, a live monitor, then the kernel is asked to shut down
        _run(kc, "%load_ext cudamagic")
        _, shown = _run(kc, "w = %gpuwatch --replay examples/trace_demo.jsonl --interval 1\nw")
        (display,) = [m for m in shown if m["msg_type"] == "display_data"]
        display_id = display["content"]["transient"]["display_id"]
        assert "application/vnd.jupyter.widget-view+json" in display["content"]["data"]
        _run(kc, "import time; time.sleep(1.5)\nassert w.running")
        kc.shutdown()
        seen = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                msg = kc.get_iopub_msg(timeout=1)
            except queue.Empty:
                if not km.is_alive():
                    break
                continue
            seen.append(msg)
            if msg["msg_type"] == "shutdown_reply":
                break
        kinds = [m["msg_type"] for m in seen]
        assert "shutdown_reply" in kinds, kinds
        updates = [
            m
            for m in seen
            if m["msg_type"] == "update_display_data"
            and m["content"]["transient"].get("display_id") == display_id
        ]
        assert updates, (
            f"no snapshot replaced the widget before the kernel's shutdown_reply: {kinds}"
        )
        data = updates[0]["content"]["data"]
        assert (
            "application/vnd.jupyter.widget-view+json" not in data
            and "stopped" in data["text/html"]
        )
        assert "running" not in data["text/plain"], data["text/plain"]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)


def test_hook_is_harmless_without_a_kernel(ip):
    from cudamagic.watch import monitor

    assert getattr(ip, "kernel", None) is None
    restore = monitor.Monitors().hook_kernel_shutdown(ip)
    restore()
    w = ip.run_line_magic("gpuwatch", f"--replay {DEMO} --text")
    assert "REPLAY" in repr(w)
    ip.run_line_magic(
        "unload_ext", "cudamagic"
    )  # runs the restore registered by the magic: no error
    ip.run_line_magic("load_ext", "cudamagic")
