"""Tier 1 tests of cudamagic.mem.census: the tensors scan (names, storages, new since before)."""

from __future__ import annotations

import sys

import torch

from cudamagic.mem import census


def test_scan_names_module_paths_grads_containers_optimizer_and_out():
    net = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.BatchNorm1d(4))
    opt = torch.optim.Adam(net.parameters())
    net(torch.randn(3, 8)).sum().backward()
    opt.step()
    big = torch.zeros(1000, 100)
    view = big[:10]  # a view keeps the whole storage: listed once, under the first name
    ns = {
        "net": net,
        "opt": opt,
        "big": big,
        "view": view,
        "pair": (torch.ones(7), {"k": torch.ones(5)}),
        "_hidden": torch.ones(10_000),
        "Out": {3: torch.ones(33)},
        "n": 3,
    }
    rows = census.scan_tensors(ns, hidden={})
    names = {r.name: r for r in rows}
    assert rows[0].name == "big" and rows[0].bytes == 400_000 and rows[0].shape == (1000, 100)
    assert "view" not in names  # same storage as big
    for expected in (
        "net.0.weight",
        "net.0.weight.grad",
        "net.1.running_mean",
        "pair[0]",
        "pair[1]['k']",
        "Out[3]",
        "opt.state[0]['exp_avg']",
    ):
        assert expected in names, (expected, sorted(names))
    assert names["net.0.weight"].shape == (4, 8) and names["net.0.weight"].dtype == "torch.float32"
    # optimizer state is numbered like opt.state_dict()["state"]: parameters in param_groups order
    assert names["opt.state[0]['exp_avg']"].shape == (4, 8) and names[
        "opt.state[1]['exp_avg_sq']"
    ].shape == (4,)
    # _-names (IPython's _, _1, _i...) are not user variables
    assert not any(n.startswith("_") for n in names)
    assert [r.bytes for r in rows] == sorted((r.bytes for r in rows), reverse=True)


def test_scan_marks_storages_new_since_before():
    a = torch.ones(100)
    ns = {"a": a}
    keys = census.storage_keys(ns)
    ns["b"] = torch.ones(200)
    rows = {r.name: r for r in census.scan_tensors(ns, before_keys=keys)}
    assert rows["b"].new and not rows["a"].new


def test_scan_without_torch_imported_is_empty(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch")
    assert census.scan_tensors({"x": 1}) == []
