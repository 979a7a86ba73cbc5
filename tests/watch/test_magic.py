"""Tier 2 for %gpuwatch: a real InteractiveShell (text-only display, like terminal IPython)."""

import atexit
import json
import re
import threading
import time

import pytest
from IPython.core.error import UsageError

from cudamagic import extension as cm_extension
from cudamagic.core.na import is_na
from cudamagic.watch import monitor as W
from cudamagic.watch import render, trace, widget
from cudamagic.watch.sources import HostReader, LiveSource
from tests.watch.fakes import DEMO, gpu_row, wait_until


def sampler_threads():
    return [t for t in threading.enumerate() if t.name == "cudamagic-gpuwatch" and t.is_alive()]


@pytest.fixture(autouse=True)
def no_thread_left():
    yield
    assert sampler_threads() == []


def monitors(ip):
    """The monitor registry of the loaded ``%gpuwatch``."""
    return cm_extension.current().magics["watch"].monitors


def test_terminal_prints_a_table_once_and_builds_no_widget(ip, fake_nvml):
    fake_nvml("gpu_without_fan")
    watch = ip.run_line_magic("gpuwatch", "")
    assert watch.view is None and not watch.running and watch.samples_taken == 1
    assert sampler_threads() == []
    data, _ = ip.display_formatter.format(watch)
    assert set(data) == {"text/plain"}  # --text / terminal: no widget, no HTML
    text = data["text/plain"]
    assert text.startswith("gpuwatch  live") and "H100 80GB HBM3" in text and "Tesla T4" in text
    assert "GPU 1 fan: N/A (not supported on this GPU)" in text
    assert "VBox" not in text and "Widget" not in text
    assert not is_na(watch.latest.host.cpu_util_pct)  # one snapshot still measures CPU %
    rows = watch.history
    assert [r["index"] for r in rows] == [0, 1] and rows[0]["name"] == "NVIDIA H100 80GB HBM3"


def test_terminal_without_driver(ip, fake_nvml, capsys):
    fake_nvml("no_driver")
    watch = ip.run_line_magic("gpuwatch", "")
    text = watch.text()
    assert sum(ln.startswith("No GPU data:") for ln in text.splitlines()) == 1
    assert "host: CPU" in text and "Traceback" not in capsys.readouterr().err
    assert sampler_threads() == []


def test_terminal_loop_refreshes_until_count(ip, fake_nvml, capsys):
    fake_nvml("one_gpu")
    t0 = time.monotonic()
    watch = ip.run_line_magic("gpuwatch", "--loop --count 3 --interval 0.1")
    elapsed = time.monotonic() - t0
    out = capsys.readouterr().out
    assert out.count("gpuwatch  live") == 3 and "Ctrl-C stops" in out
    assert watch.samples_taken == 3 and not watch.running and 0.15 < elapsed < 10
    utils = [r["utilization.gpu"] for r in watch.history]
    assert len(set(utils)) == 3


def test_terminal_loop_stops_on_ctrl_c(ip, fake_nvml, monkeypatch, capsys):
    fake_nvml("one_gpu")
    real = render.sample_text
    calls = []

    def interrupting(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(widget, "sample_text", interrupting)  # what the machine view calls
    watch = ip.run_line_magic("gpuwatch", "--loop --interval 0.1")
    assert watch.sampler.finished == "stopped by Ctrl-C" and not watch.running
    assert capsys.readouterr().out.count("gpuwatch  live") == 1


def test_log_in_background_then_stop_then_replay(ip, fake_nvml, tmp_path, capsys):
    fake_nvml("gpu_without_fan")
    log = str(tmp_path / "run.jsonl")
    watch = ip.run_line_magic("gpuwatch", f"--log {log} --interval 0.1")
    assert watch.running and len(sampler_threads()) == 1
    # running it again re-displays the same monitor: no second thread
    assert ip.run_line_magic("gpuwatch", "") is watch and len(sampler_threads()) == 1
    assert wait_until(lambda: watch.samples_taken >= 3)
    ip.run_line_magic("gpuwatch", "--stop")
    assert "stopped after" in capsys.readouterr().out
    assert not watch.running and sampler_threads() == []
    header, samples = trace.read_trace(log)
    assert len(samples) == watch.samples_taken >= 3
    assert samples[-1].gpus[1].fan_speed_pct.reason == "not supported on this GPU"
    replay = ip.run_line_magic("gpuwatch", f"--replay {log} --text")
    assert replay.text().startswith(f"gpuwatch  REPLAY of {log}  recorded")
    assert replay.latest == samples[0]
    ip.run_line_magic("gpuwatch", "--stop")
    assert "No %gpuwatch is running" in capsys.readouterr().out


def test_start_stop_unload_50_times_leaves_no_thread(ip, fake_nvml, tmp_path):
    fake_nvml("one_gpu")
    log = str(tmp_path / "cycle.jsonl")
    for i in range(50):
        watch = ip.run_line_magic("gpuwatch", f"--log {log} --interval 0.1")
        assert watch.running and len(sampler_threads()) == 1
        if i % 3 == 0:
            ip.run_line_magic("gpuwatch", "--stop")
        elif i % 3 == 1:
            watch.stop()
        else:
            ip.run_line_magic("unload_ext", "cudamagic")
            assert sampler_threads() == []
            ip.run_line_magic("load_ext", "cudamagic")
        assert not watch.running
        assert sampler_threads() == []
    assert len(trace.read_trace(log)[1]) >= 50


def test_new_options_replace_the_running_monitor(ip, fake_nvml, tmp_path):
    fake_nvml("one_gpu")
    first = ip.run_line_magic("gpuwatch", f"--log {tmp_path / 'a.jsonl'} --interval 0.1")
    second = ip.run_line_magic("gpuwatch", f"--log {tmp_path / 'b.jsonl'} --interval 0.2")
    assert second is not first and not first.running and second.running
    assert len(sampler_threads()) == 1


def test_one_off_text_leaves_the_running_monitor_alone(ip, fake_nvml, tmp_path, capsys):
    fake_nvml("one_gpu")
    log = tmp_path / "keep.jsonl"
    first = ip.run_line_magic("gpuwatch", f"--log {log} --interval 0.1")
    snap = ip.run_line_magic("gpuwatch", "--text")
    assert snap is not first and not snap.running and snap.samples_taken == 1
    assert first.running and monitors(ip).current is first
    assert "stopped" not in capsys.readouterr().out
    assert ip.run_line_magic("gpuwatch", "") is first  # the bare magic shows the running one
    ip.run_line_magic("gpuwatch", "--stop")
    assert not first.running


def test_replacing_a_monitor_says_how_to_start_it_again(ip, fake_nvml, tmp_path, capsys):
    fake_nvml("one_gpu")
    first = ip.run_line_magic("gpuwatch", f"--log {tmp_path / 'a.jsonl'} --interval 0.1")
    capsys.readouterr()
    second = ip.run_line_magic("gpuwatch", f"--log {tmp_path / 'b.jsonl'} --interval 0.2")
    out = capsys.readouterr().out
    assert not first.running and second.running
    again = re.search(r"`(%gpuwatch [^`]*)` starts it again", out).group(1)
    third = ip.run_line_magic("gpuwatch", again.removeprefix("%gpuwatch "))
    assert third.options["log"] == str(tmp_path / "a.jsonl") and third.sampler.interval_s == 0.1
    third.stop()


def test_count_ends_the_background_thread(ip, fake_nvml, tmp_path):
    fake_nvml("one_gpu")
    watch = ip.run_line_magic("gpuwatch", f"--log {tmp_path / 'c.jsonl'} --interval 0.1 --count 3")
    assert watch.wait(10)
    assert not watch.running and watch.samples_taken == 3 and "--count" in watch.sampler.finished


def test_config_trait_sets_the_default_interval(ip, fake_nvml, tmp_path):
    fake_nvml("one_gpu")
    try:
        ip.run_line_magic("config", "CudaMagics.watch_interval_s = 0.25")
        watch = ip.run_line_magic("gpuwatch", f"--log {tmp_path / 'c.jsonl'}")
        assert watch.sampler.interval_s == 0.25
        watch.stop()
        ip.run_line_magic(
            "config", "CudaMagics.watch_interval_s = 0.01"
        )  # traitlets logs and keeps 0.25
        magics = cm_extension.current().settings
        assert magics.watch_interval_s == 0.25
    finally:
        ip.config.CudaMagics.pop("watch_interval_s", None)


def test_config_refuses_an_interval_every_live_gpuwatch_would_refuse(
    ip, fake_nvml, tmp_path, caplog
):
    from traitlets import TraitError

    fake_nvml("one_gpu")
    try:
        ip.run_line_magic("config", "CudaMagics.watch_interval_s = 0.5")
        with caplog.at_level("ERROR"):
            ip.run_line_magic(
                "config", "CudaMagics.watch_interval_s = 0.07"
            )  # traitlets logs the TraitError
        assert (
            "below the minimum of 0.1 s for a live watch; type for example `%config "
            "CudaMagics.watch_interval_s = 0.5`" in caplog.text
        )
        settings = cm_extension.current().settings
        assert settings.watch_interval_s == 0.5
        for bad, match in (
            (0.07, r"below the minimum of 0\.1 s"),
            (float("nan"), "not a number of seconds"),
            (7200.0, r"at most 3600 s"),
        ):
            with pytest.raises(TraitError, match=match):
                settings.watch_interval_s = bad
        settings.watch_interval_s = (
            0.1  # the smallest value %config accepts: %gpuwatch accepts it too
        )
        watch = ip.run_line_magic("gpuwatch", f"--log {tmp_path / 'c.jsonl'}")
        assert watch.sampler.interval_s == 0.1
        watch.stop()
    finally:
        ip.config.CudaMagics.pop("watch_interval_s", None)
        cm_extension.current().settings.watch_interval_s = 1.0


@pytest.mark.parametrize(
    "line, message",
    [
        ("--interval 0.01", "below the minimum of 0.1 s"),
        ("--interval 0.07", "below the minimum of 0.1 s"),
        ("--interval nan", "not a number of seconds"),
        ("--interval inf", "at most 3600 s"),
        ("--interval 1e300", "at most 3600 s"),
        ("--replay {DEMO} --interval inf", "at most 3600 s"),
        ("--devices ,", "names no GPU"),
        ("--devices -1", "GPU -1 does not exist"),
        ("--devices 5", "GPU 5 does not exist"),
        ("--devices zero", "not a list of GPU indices"),
        ("--count 0", "at least 1"),
        ("--history 1", "out of range"),
        ("--replay /nonexistent/trace.jsonl", "cannot read /nonexistent/trace.jsonl"),
        ("--replay {DEMO} --interval 0.01", "minimum of 0.05 s"),
        ("--replay {DEMO} --log x.jsonl", "cannot be combined"),
        ("--bogus", "unrecognized arguments"),
    ],
)
def test_usage_errors(ip, fake_nvml, line, message):
    fake_nvml("one_gpu")
    with pytest.raises(UsageError, match=message):
        ip.run_line_magic("gpuwatch", line.format(DEMO=DEMO))
    assert sampler_threads() == []


def test_hostile_replay_file_is_a_usage_error(ip, tmp_path):
    bad = tmp_path / "evil.jsonl"
    bad.write_text(
        '{"cudamagic_trace": 1}\n{"timestamp_s": 1, "gpus": [], "host": {}, "__reduce__": '
        '"os.system"}\n'
    )
    with pytest.raises(
        UsageError, match=r"evil.jsonl, line 2: unknown key '__reduce__'.*%gpuwatch --log"
    ):
        ip.run_line_magic("gpuwatch", f"--replay {bad}")


def test_log_refuses_to_append_to_a_foreign_file(ip, fake_nvml, tmp_path):
    fake_nvml("one_gpu")
    other = tmp_path / "data.jsonl"
    other.write_text('{"my": "data"}\n')
    with pytest.raises(UsageError, match="not a cudamagic trace"):
        ip.run_line_magic("gpuwatch", f"--log {other}")
    assert other.read_text() == '{"my": "data"}\n'


def test_widget_monitor_without_a_kernel(fake_nvml):
    """The notebook path (widgets + thread) driven without a kernel: traits change while we wait."""
    fake_nvml("gpu_without_fan")
    src = LiveSource(host=HostReader())
    watch = W.start_watch(src, interval_s=0.1, history_len=50)
    try:
        assert watch.view is not None and watch.running
        bundle = watch._repr_mimebundle_()
        assert (
            bundle["application/vnd.jupyter.widget-view+json"]["model_id"]
            == watch.view.root.model_id
        )
        assert "Tesla T4" in bundle["text/plain"] and "VBox" not in bundle["text/plain"]
        assert "live monitor, started" in bundle["text/html"]  # what a saved notebook shows for it
        assert "LIVE" in watch.view.status.value
        first = gpu_row(watch.view, 0)

        def shown():  # the sample count the latest sample's line shows
            m = re.search(r"samples: (\d+)", watch.view.gpus.value)
            return int(m.group(1)) if m else -1

        assert wait_until(lambda: shown() >= 4)
        assert gpu_row(watch.view, 0) != first
        assert 4 <= shown() <= watch.samples_taken, (
            watch.view.gpus.value[:200],
            watch.samples_taken,
        )
        watch.view.button.click()  # the Stop button
        assert not watch.running and sampler_threads() == []
        assert watch.view.button.disabled and "stopped" in watch.view.status.value
        assert "stopped (stopped)" not in watch.view.status.value + watch.text()  # said it twice
        assert "  stopped" in watch.text().splitlines()[0]
        stopped = watch._repr_mimebundle_()  # a stopped monitor is its snapshot, without the widget
        assert set(stopped) == {"text/plain", "text/html"} and "stopped" in stopped["text/html"]
        df_rows = watch.history
        assert len(df_rows) == 2 * watch.samples_taken
        json.dumps(trace.sample_to_json(watch.latest))  # the log form stays JSON
    finally:
        watch.stop()
        watch.view.close()


def test_replay_of_a_log_too_big_for_memory_plays_its_end(ip, fake_nvml, tmp_path, monkeypatch):
    """A replay of a log too big for memory plays its end.

    A long --log run (a night at 1 s on one GPU is past 64 MiB) was refused outright by --replay
    ("more than the 67108864-byte limit"): the post-mortem the log was for was impossible. Now the
    replay plays the samples of the last MAX_TRACE_BYTES, labelled as such.
    """
    fake_nvml("one_gpu")
    log = tmp_path / "night.jsonl"
    writer = trace.TraceWriter(str(log), interval_s=1.0)
    src = LiveSource(host=HostReader())
    for i in range(1, 41):
        writer.write(src.read(i, 1000.0 + i))
    writer.close()
    size = log.stat().st_size
    monkeypatch.setattr(trace, "MAX_TRACE_BYTES", size // 4)
    with pytest.raises(trace.TraceError, match="limit"):
        trace.read_trace(str(log), max_bytes=size // 4)  # the strict reader still refuses
    watch = ip.run_line_magic("gpuwatch", f"--replay {log} --count 1")
    seqs = [s.seq for s in watch.sampler.source.samples]
    assert 5 <= len(seqs) < 40 and seqs[-1] == 40 and seqs == list(range(seqs[0], 41))
    assert watch.sampler.source.header["skipped_bytes"] > 0
    assert f"(last {len(seqs)} samples)" in watch.text().splitlines()[0]


def test_gpuwatch_does_no_harm_to_cuda(ip, fake_nvml, cuda_calls):
    """Do no harm: sampling never touches CUDA.

    Do no harm: sampling (text view, widget HTML, history, trace record) with torch imported calls
    nothing that creates a CUDA context, synchronises or resets counters (observed calls:
    tests/cuda_calls.py).
    """
    fake_nvml("one_gpu")
    ip.run_cell("import torch")
    watch = ip.run_line_magic("gpuwatch", "--text")
    watch.text(), watch.history
    from cudamagic.watch.render import gpu_html

    gpu_html(watch.latest.gpus[0])
    assert cuda_calls == []


def test_exit_hook_is_registered_on_load_stops_the_monitor_and_goes_on_unload(
    ip, fake_nvml, monkeypatch, tmp_path
):
    fake_nvml("one_gpu")
    registered = []
    monkeypatch.setattr(atexit, "register", registered.append)
    # like atexit.unregister: a function that is not registered is ignored
    monkeypatch.setattr(
        atexit, "unregister", lambda f: registered.remove(f) if f in registered else None
    )
    ip.run_line_magic("unload_ext", "cudamagic")
    ip.run_line_magic("load_ext", "cudamagic")
    hook = monitors(ip).stop
    assert registered.count(hook) == 1  # once, at load
    watch = ip.run_line_magic("gpuwatch", f"--log {tmp_path / 'run.jsonl'} --interval 0.1")
    assert watch.running and registered.count(hook) == 1  # a monitor adds no second hook
    registered[registered.index(hook)]()  # what the interpreter runs at exit
    assert not watch.running and sampler_threads() == []
    ip.run_line_magic("unload_ext", "cudamagic")
    assert hook not in registered
    ip.run_line_magic("load_ext", "cudamagic")


def test_container_that_lost_its_gpus_is_told_how_to_get_them_back(ip, fake_nvml, monkeypatch):
    import pynvml

    from cudamagic.core import platform

    monkeypatch.setattr(platform, "in_container", lambda: True)
    fake_nvml({"init_error": pynvml.NVML_ERROR_UNKNOWN, "gpus": []})
    text = ip.run_line_magic("gpuwatch", "--text").text()
    assert sum(ln.startswith("No GPU data:") for ln in text.splitlines()) == 1
    line = " ".join(text.split("No GPU data:", 1)[1].split())  # the status, unwrapped
    assert "lost access to its GPU devices" in line and "daemon-reload" in line
    assert "Fix: recreate the container" in line and "nvidia-container-toolkit/issues/48" in line
