"""Tier 4: a monitor running when JupyterLab shuts the kernel down leaves its final snapshot.

``kernel_end_check.ipynb`` (written here into the server's temporary copy of ``examples/``) replays
``trace_demo.jsonl`` every second (60 samples: still running when the kernel goes). The test runs
it, shuts the kernel down with Lab's own command (Kernel > Shut Down Kernel,
``kernelmenu:shutdown``), saves, closes, and opens the notebook again: the monitor's output must be
the static snapshot (issue 16: "when the monitor stops (Stop, ``--count``, kernel end) its output
is replaced by a static snapshot"), not "Error displaying widget".

Kernel > Restart Kernel... is run the same way and is expected to fail (strict xfail,
:data:`RESTART_LIMIT`): JupyterLab drops what the old kernel sends once a restart is asked.

The kernel-to-page messages are recorded from the notebook's kernel websocket, so a failure says
which of them reached the page and in which order (``update_display_data`` must come before
``shutdown_reply``).
"""

import os
import re
import time

import pytest

from tests.browser import jlab, notebooks

pytestmark = [pytest.mark.browser, pytest.mark.slow]

NAME = "kernel_end_check.ipynb"
CELLS = [
    "%load_ext cudamagic",
    f"w = %gpuwatch --replay {notebooks.TRACE} --interval 1\nw",
    (
        "import time\n"
        "t0 = time.monotonic()\n"
        "while w.samples_taken < 3 and time.monotonic() - t0 < 60:\n"
        "    time.sleep(0.05)\n"
        "print(f'live: running={w.running} samples={w.samples_taken}')"
    ),
]
_MSG_TYPE = re.compile(rb'"msg_type":\s*"(\w+)"')
_STATE = re.compile(rb'"execution_state":\s*"(\w+)"')


def _write(root):
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
    }
    nb.metadata["language_info"] = {"name": "python"}
    nb.cells = [nbformat.v4.new_code_cell(src) for src in CELLS]
    nbformat.write(nb, os.path.join(root, NAME))


def _record_kernel_messages(page, seen):
    """Append the type of every kernel message the page receives to ``seen``.

    A ``status`` message is appended with its state.
    """

    def on_ws(ws):
        if "/api/kernels/" not in ws.url:
            return

        def on_frame(payload):
            data = payload if isinstance(payload, bytes) else payload.encode()
            found = _MSG_TYPE.search(data)  # the header comes before the parent header
            if found:
                kind = found.group(1).decode()
                state = _STATE.search(data) if kind == "status" else None
                seen.append(f"status:{state.group(1).decode()}" if state else kind)

        ws.on("framereceived", on_frame)
        ws.on("close", lambda _ws: seen.append("(websocket closed)"))

    page.on("websocket", on_ws)


def _watch_output(page):
    cell = jlab.code_cells(page).nth(1)
    cell.scroll_into_view_if_needed()
    return jlab.outputs(cell)


RESTART_LIMIT = (
    "JupyterLab's KernelConnection.restart() disposes the notebook's futures and forgets every "
    "display id (_clearKernelState) before it asks the server to restart, so the "
    "update_display_data the kernel sends while it handles the shutdown_request (it does: see the "
    "recorded messages) is dropped by the page; the saved output keeps the widget view, which a "
    "reopened notebook cannot show. A kernel cannot change that."
)


@pytest.fixture(
    scope="module",
    params=[
        "shutdown",
        pytest.param("restart", marks=pytest.mark.xfail(strict=True, reason=RESTART_LIMIT)),
    ],
)
def after_kernel_end(request, page, lab, screenshots):
    """``(live line, saved monitor outputs, kernel messages seen, the reopened page)``."""
    how = request.param
    _write(lab.root)
    seen = []
    _record_kernel_messages(page, seen)
    jlab.open_notebook(page, lab, NAME)
    jlab.run_all(page)
    assert jlab.error_texts(page) == [], jlab.page_state(page)
    live = jlab.text(jlab.outputs(jlab.code_cells(page).nth(2)))
    assert re.search(r"live: running=True samples=[3-9]", live), (
        live
    )  # still running when the kernel goes
    out = _watch_output(page)
    out.locator(".widget-button").first.wait_for(
        state="visible", timeout=30_000
    )  # the live widget is shown
    jlab.shot(out, screenshots, f"kernel-end-{how}-live")
    seen.append(f"({how} asked)")
    if how == "shutdown":
        page.evaluate("() => window.jupyterapp.commands.execute('kernelmenu:shutdown')")
        page.wait_for_function(
            f"() => {{ const n = document.querySelector('{jlab.PANEL} .jp-Toolbar-kernelName');"
            " return n && /No Kernel/.test(n.textContent); }",
            timeout=60_000,
            polling=250,
        )
    else:  # Kernel > Restart Kernel..., and its dialog answered as a person does
        page.evaluate("() => { window.jupyterapp.commands.execute('kernelmenu:restart'); }")
        page.locator(".jp-Dialog .jp-mod-accept").click(timeout=30_000)
        deadline = time.monotonic() + 60
        while (
            "kernel_info_reply" not in seen[seen.index(f"({how} asked)") :]
            and time.monotonic() < deadline
        ):
            page.wait_for_timeout(250)
        page.wait_for_function(jlab._KERNEL_READY_JS, timeout=60_000, polling=250)
    page.wait_for_timeout(1000)  # anything still in flight lands
    seen.append("(kernel gone)")
    jlab.shot(_watch_output(page), screenshots, f"kernel-end-{how}-after")
    saved = jlab.save_close_reopen(page, lab, NAME, check_cell=2)
    out = _watch_output(page)
    out.locator(".jp-OutputArea-output").first.wait_for(state="visible", timeout=30_000)
    deadline = (
        time.monotonic() + 15
    )  # a widget output reads "Loading widget..." until Lab knows it has no model
    while "Loading widget" in jlab.text(out) and time.monotonic() < deadline:
        page.wait_for_timeout(250)
    jlab.shot(out, screenshots, f"kernel-end-{how}-reopened")
    lab.shutdown_kernels()
    return live, saved[1]["outputs"], seen, page


def test_kernel_shutdown_leaves_final_snapshot(after_kernel_end):
    live, saved_outputs, seen, page = after_kernel_end
    shown = jlab.text(_watch_output(page))
    order = " ".join(seen[[i for i, m in enumerate(seen) if m.endswith(" asked)")][-1] :])
    assert "Error displaying widget" not in shown, (
        f"the reopened notebook shows: {shown[:300]!r}; messages: {order}"
    )
    assert shown.strip(), "the monitor's output is empty after reopening"
    assert re.search(r"·\s*stopped", shown) and not re.search(r"\brunning\b", shown), (
        f"not the final snapshot: {shown[:400]!r}; messages after the shutdown request: {order}"
    )
    mimes = [m for o in saved_outputs for m in o.get("data", {})]
    assert "text/html" in mimes, mimes
    assert "application/vnd.jupyter.widget-view+json" not in mimes, (
        f"the saved monitor output still needs a widget model: {mimes}; messages: {order}"
    )
    # the snapshot reached the page before the kernel's goodbye (not from atexit, after it)
    after = seen[[i for i, m in enumerate(seen) if m.endswith(" asked)")][-1] :]
    assert "update_display_data" in after and "shutdown_reply" in after, order
    assert after.index("update_display_data") < after.index("shutdown_reply"), order
