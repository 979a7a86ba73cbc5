"""Whole fact sets for the findings tests.

Facts collected through the fake NVML, with a PyTorch or nvcc section swapped in.
"""

from cudamagic.core.na import NA
from cudamagic.info.facts import collect_facts
from cudamagic.info.versions import parse_torch_version


def torch_facts(version="2.13.0+cpu", cuda=None, available=False, count=0, arch=()):
    return {
        "installed": True,
        "version": version,
        "variant": parse_torch_version(version),
        "file": "/x/torch/__init__.py",
        "cuda_build": cuda or NA("this PyTorch build has no CUDA support", "not_available"),
        "hip_build": NA("not a ROCm build", "not_available"),
        "cudnn": NA("x", "not_available"),
        "nccl": NA("x", "not_available"),
        "cuda_available": available,
        "device_count": count,
        "arch_list": list(arch),
        "cuda_initialized": False,
        "devices": [],
    }


def facts_for(fake_nvml, scenario, torch=None, env=None, nvcc=None, monkeypatch=None):
    fake_nvml(scenario)
    env = dict(env or {})
    f = collect_facts(env=env)
    if torch is not None:
        f["torch"] = torch
    if nvcc is not None:
        f["toolkit"] = nvcc
    return f


def ids(found):
    return [x.id for x in found]
