"""Tier 1: the shared text helpers align by terminal columns, not characters."""

from cudamagic.core.fmt import clip, display_width, pad, text_table


def test_double_width_names_keep_columns_aligned():
    table = text_table(
        ["pid", "process", "GPU memory"],
        [[1, "python", "1.0 GiB"], [2, "训练脚本.py", "2.0 GiB"], [3, "e\u0301cole", "3 B"]],
    )
    lines = table.splitlines()
    # the third column starts at the same terminal column on every row
    starts = {
        display_width(line[: line.index(mem)])
        for line, mem in zip(lines[2:], ["1.0", "2.0", "3 B"], strict=True)
    }
    assert starts == {display_width(lines[0][: lines[0].index("GPU memory")])}
    assert display_width("训练脚本.py") == 11 and display_width("e\u0301") == 1


def test_pad_and_clip_count_columns():
    assert display_width(pad("训练", 6)) == 6 and pad("训练", 6) == "训练  "
    assert (
        clip("训练脚本训练脚本", 7) == "训练脚\u2026"
        and display_width(clip("训练脚本训练脚本", 7)) == 7
    )
    assert clip("short", 10) == "short"


def test_html_table_marks_numeric_and_prose_columns_and_escapes_titles():
    from cudamagic.core.fmt import html_table

    out = html_table(
        ["name", "bytes", "note"],
        [["a", "1 B", "long words"]],
        num=[1],
        prose=[2],
        titles=["", "size <bytes>", None],
        col_cls={0: "cm-mono"},
    )
    assert out.startswith(
        '<table class="cm-table"><thead><tr><th class="cm-mono">name</th>'
        '<th class="cm-num" title="size &lt;bytes&gt;">bytes</th><th class="cm-prose">note</th>'
    )
    assert (
        '<td class="cm-mono">a</td><td class="cm-num">1 B</td><td class="cm-prose">long words</td>'
        in out
    )
    assert html_table(["", ""], [["k", "v"]], cls="cm-kv") == (
        '<table class="cm-table cm-kv"><tbody><tr><td>k</td><td>v</td></tr></tbody></table>'
    )
    assert (
        html_table(["a"], [["x"]]) == '<table class="cm-table"><thead><tr><th>a</th></tr></thead>'
        "<tbody><tr><td>x</td></tr></tbody></table>"
    )
