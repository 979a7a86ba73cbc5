"""Tier 1 for the %gpuwatch widget and HTML: trait updates under ``hold_sync`` without a kernel, the Stop
button, the REPLAY label, escaping of hostile names. No IPython here."""



from cudamagic.watch.text import sample_text
from cudamagic.watch.trace import read_trace
from cudamagic.watch.widget import WatchView, gpu_html, host_html, snapshot_html, sparkline_svg
from tests.fake_nvml import GIB, HOSTILE_NAME
from tests.watch.fakes import DEMO, live


# ---- widget update logic without a kernel -----------------------------------------------------------

def test_widget_view_apply_sets_values_under_hold_sync(fake_nvml, monkeypatch):
    fake_nvml("two_gpus_f03")
    src = live()
    view = WatchView([0, 1], label="live")
    s1, s2 = src.read(1, 1000.0), src.read(2, 1001.0)
    view.apply(s1, [s1], samples_taken=1)
    first = {w: w.value for w in view.widgets() if hasattr(w, "value")}
    held = []
    for w in view.widgets():
        orig = w.hold_sync

        def spy(orig=orig, w=w):
            held.append(w)
            return orig()
        monkeypatch.setattr(w, "hold_sync", spy)
    view.apply(s2, [s1, s2], samples_taken=2)
    assert set(held) == set(view.widgets())
    assert view.cards[0].value != first[view.cards[0]]  # utilization moved
    assert "samples: 2" in view.status.value and "LIVE" in view.status.value
    assert "<polyline" in view.sparks[0].value
    assert "not supported on this GPU" in view.cards[1].value  # NA reason shown and as tooltip
    assert 'title="not supported on this GPU"' in view.cards[1].value
    view.apply(s2, [s1, s2], state="stopped (end)", samples_taken=2, stopped=True)
    assert view.button.disabled and view.button.description == "Stopped"
    view.close()


def test_widget_stop_button_calls_back():
    called = []
    view = WatchView([0], on_stop=lambda: called.append(1))
    view.button.click()
    assert called == [1]
    view.close()


def test_replay_is_labelled_as_replay():
    _, samples = read_trace(DEMO)
    view = WatchView([0, 1], label="replay of examples/<b>trace</b>.jsonl")
    view.apply(samples[0], samples[:1], samples_taken=1)
    assert "REPLAY" in view.status.value and "recorded at" in view.status.value
    assert "<b>trace</b>" not in view.status.value and "&lt;b&gt;trace&lt;/b&gt;" in view.status.value
    assert sample_text(samples[0], "replay of x.jsonl").startswith("gpuwatch  REPLAY of x.jsonl  recorded")
    view.close()


# ---- escaping ------------------------------------------------------------------------------------

def test_hostile_process_names_and_paths_are_escaped(fake_nvml):
    fake = fake_nvml("one_gpu")
    fake.gpus[0]["processes"] = [(4242, GIB)]
    fake.gpus[0]["name"] = "<script>alert('gpu')</script>"
    src = live(proc_info=lambda pid: (HOSTILE_NAME, '/tmp/"><svg onload=alert(2)>/run.py', True),
               show_cmdlines=True)  # another user's command line, shown on request
    s = src.read(1, 0.0)
    html_parts = [gpu_html(s.gpus[0]), host_html(s),
                  snapshot_html(s, [s], 'replay of /tmp/<img src=y onerror=alert(3)>.jsonl', "x", 1,
                                        "<b>err</b>"),
                  sparkline_svg([s], 0)]
    html = "".join(html_parts)
    for bad in (HOSTILE_NAME, "<script>", "<svg onload", "<img src=y", "<b>err</b>"):
        assert bad not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "&lt;script&gt;" in html
    assert "&quot;&gt;&lt;svg onload=alert(2)&gt;" in html
    # the text form shows the name verbatim (it is text)
    assert HOSTILE_NAME in sample_text(s)
