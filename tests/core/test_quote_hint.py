"""Quotes in magic lines: unquoted values, whole program arguments, an unclosed quote's hint."""

import pytest
from IPython.core.error import UsageError


def test_unclosed_quote_hint_does_not_name_another_magics_flag(ip):
    # %%cuda has no --log option: the hint must not tell the user to type `--log "run 1.jsonl"`.
    with pytest.raises(UsageError, match=r"^(?!.*--log).*cannot split the arguments") as info:
        ip.run_cell_magic("cuda", '--args "1 2', "int main() { return 0; }\n")
    assert "%cuda?" in str(info.value)


def test_quoted_log_path_is_unquoted(ip, fake_nvml, tmp_path, monkeypatch, capsys):
    # The UsageError hint itself says: quote a value with spaces as a whole, e.g. --log "run
    # 1.jsonl". IPython's magic_arguments split lines with posix=False, which keeps the quote
    # characters in the value.
    fake_nvml("one_gpu")
    monkeypatch.chdir(tmp_path)
    ip.run_line_magic("gpuwatch", '--log "run 1.jsonl" --count 1 --text')
    ip.run_line_magic("gpuwatch", "--stop")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run 1.jsonl"]


def test_quoted_save_path_with_a_space_is_one_unquoted_value(ip, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ip.run_cell("import torch\nw = torch.ones(2, requires_grad=True)")
    ip.run_cell_magic("autograd_graph", '--format dot --save "my graph.dot"', "(w * 2).sum()")
    assert (tmp_path / "my graph.dot").read_text().lstrip().startswith("digraph")


def test_split_line_keeps_backslashes_and_removes_quotes():
    from cudamagic.core.magic import split_line

    line = r'--log "C:\Users\me\run 1.jsonl" --x \n #y ' + "--save='g.svg' --nvcc-flags \"-lcuda\""
    assert split_line(line) == [
        "--log",
        r"C:\Users\me\run 1.jsonl",
        "--x",
        r"\n",
        "#y",
        "--save=g.svg",
        "--nvcc-flags=-lcuda",
    ]
    with pytest.raises(ValueError, match="No closing quotation"):
        split_line('--log "run 1')


def test_a_quoted_program_argument_arrives_whole(ip):
    from cudamagic.cuda.options import check

    magics = ip.magics_manager.registry["CudaCellMagics"]
    for line, expected in (
        ("--args \"'a b'\"", ("a b",)),
        ("--args \"'a b' c\"", ("a b", "c")),
        ("--args '1 \"two words\"'", ("1", "two words")),
        ('--nvcc-flags "-O3 -lineinfo"', ()),
    ):
        args = magics.parse(magics.cuda, line, prefix="%%")
        assert check(args).args == expected, line
    args = magics.parse(magics.cuda, '--nvcc-flags "-lcuda"', prefix="%%")
    assert check(args).nvcc_flags == ("-lcuda",)


def test_a_comment_is_not_part_of_the_magic_language(ip):
    with pytest.raises(UsageError, match=r"^%cudainfo: unrecognized arguments: # display nothing"):
        ip.run_line_magic("cudainfo", "-q # display nothing")
