"""Real machines' ``nvidia-smi -q -x`` captures, read and turned into stand-in NVML scenarios.

:func:`parse` reads a capture (``tests/data/real/*.xml``, see ``PROVENANCE.md`` there) into plain
values in nvidia-smi's own units: MiB, %, degrees C, W, MHz, a P-state number, or :data:`NA_TEXT`
where the capture says ``N/A`` (or lacks the element). :func:`scenario` turns that into a scenario
for the stand-in library (``tests/nvml_stub``, under the real ``pynvml``) and the fake
(``tests/fake_nvml.py``): an ``N/A`` becomes the NVML function raising NotSupported, a driver
before R510 (no ``<reserved>``) the legacy v1 memory call only. :func:`needs_fake` says when a
capture has what only the fake plays (the Windows driver model, graphics processes, process
memory N/A). ``scripts/gpu_check.py`` uses :func:`parse` on the machine's own capture.

A ``*.q.txt`` capture is ``nvidia-smi -q`` (the same report as text, where a public repository
keeps no ``-q -x`` of that GPU): :func:`_q_to_xml` turns it into the ``-q -x`` tree, so both
forms go through the same reading.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "real")
MIB = 1024**2
NA_TEXT = "N/A"

#: nvidia-smi's ``<current_dm>`` words -> NVML_DRIVER_* values (WDDM 0, TCC 1, MCDM 2).
DRIVER_MODELS = {"WDDM": 0, "TCC": 1, "MCDM": 2}


def captures() -> list:
    """Paths of every ``*.xml`` and ``*.q.txt`` capture under ``tests/data/real``, sorted."""
    return sorted(os.path.join(HERE, f) for f in os.listdir(HERE) if f.endswith((".xml", ".q.txt")))


Q_HEADER = "==============NVSMI LOG=============="

#: ``nvidia-smi -q`` labels whose ``-q -x`` tag is not the label in snake case, by parent tag.
_Q_TAGS = {
    ("gpu", "gpu uuid"): "uuid",
    ("pci", "bus id"): "pci_bus_id",
    ("utilization", "gpu"): "gpu_util",
    ("utilization", "memory"): "memory_util",
    ("temperature", "gpu current temp"): "gpu_temp",
    ("clocks", "sm"): "sm_clock",
    ("clocks", "memory"): "mem_clock",
    ("ecc_mode", "current"): "current_ecc",
    ("driver_model", "current"): "current_dm",
    ("mig_mode", "current"): "current_mig",
    ("mig_device", "shared fb memory usage"): "fb_memory_usage",
    ("process_info", "name"): "process_name",
    ("process_info", "used gpu memory"): "used_memory",
}


def _q_to_xml(text: str):
    """The ``-q -x`` element tree of an ``nvidia-smi -q`` report (the fields :func:`parse` reads).

    Indentation gives the nesting; ``GPU <bus id>`` opens a ``<gpu>``; each ``MIG Device`` opens a
    ``<mig_device>`` in ``<mig_devices>``; under ``Processes`` each ``Process ID`` opens a
    ``<process_info>`` holding its ``pid`` and the lines under it.
    """
    root = ET.Element("nvidia_smi_log")
    stack = [(-1, root)]
    for line in text.splitlines():
        if not line.strip() or line.startswith("="):
            continue
        indent = len(line) - len(line.lstrip(" "))
        while stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        head = re.fullmatch(r"GPU ([0-9A-Fa-f:.]+)", line.strip())
        if head:
            stack.append((indent, ET.SubElement(root, "gpu", id=head.group(1))))
            continue
        label, colon, value = line.strip().partition(" : ")
        label = label.rstrip(" :").strip()
        if label == "MIG Device":  # -q lists them in the GPU, -q -x in <mig_devices>
            box = parent.find("mig_devices")
            box = ET.SubElement(parent, "mig_devices") if box is None else box
            stack.append((indent, ET.SubElement(box, "mig_device")))
            continue
        if label == "Process ID":
            parent = ET.SubElement(parent, "process_info")
            ET.SubElement(parent, "pid").text = value.strip()
            stack.append((indent, parent))
            continue
        tag = _Q_TAGS.get((parent.tag, label.lower())) or re.sub(r"\W+", "_", label.lower())
        el = ET.SubElement(parent, tag)
        if colon:
            el.text = value.strip()
        else:
            stack.append((indent, el))
    return root


def _text(node, path: str):
    """Text of ``node/path`` stripped, or None when the element is missing or empty."""
    el = node.find(path)
    if el is None or el.text is None or not el.text.strip():
        return None
    return el.text.strip()


def _number(node, *paths):
    """The first of ``paths`` that holds a number (unit word dropped), else :data:`NA_TEXT`."""
    for path in paths:
        t = _text(node, path)
        if t is None:
            continue
        m = re.match(r"^-?\d+(?:\.\d+)?", t)
        if m:
            v = float(m.group(0))
            return int(v) if v.is_integer() and "." not in m.group(0) else v
        return NA_TEXT  # present and "N/A" (or a word): not a fallback to another element
    return NA_TEXT


def _ecc_total(gpu, which: str):
    """Uncorrected ECC errors (``volatile``/``aggregate``) as NVML totals them, or NA_TEXT.

    Newer captures count them per memory (``sram_uncorrectable*``, ``dram_uncorrectable``), older
    ones as ``double_bit/total``.
    """
    node = gpu.find(f"ecc_errors/{which}")
    if node is None:
        return NA_TEXT
    texts = [
        (el.text or "").strip() for el in node.iter() if not len(el) and "uncorrectable" in el.tag
    ]
    if not texts and _text(node, "double_bit/total") is not None:
        texts = [_text(node, "double_bit/total")]
    if not texts or not all(t.isdigit() for t in texts):
        return NA_TEXT
    return sum(int(t) for t in texts)


def parse(path_or_text: str) -> dict:
    """A capture's values: ``{"timestamp", "driver_version", "cuda_version", "gpus": [...]}``.

    Each GPU is a dict with ``name``, ``uuid``, ``pci_bus_id``, ``memory_total_mib``,
    ``memory_used_mib``, ``memory_reserved_mib`` (NA_TEXT before R510), ``util_gpu_pct``,
    ``util_mem_pct``, ``temperature_c``, ``power_draw_w`` (``average_power_draw`` where the
    capture has it: what NVML's power usage returns on Ampere and later, else ``power_draw``),
    ``power_limit_w``, ``clock_sm_mhz``, ``clock_mem_mhz``, ``pstate`` (0 for P0), ``fan_pct``,
    ``ecc_mode`` (``"Enabled"``, ``"Disabled"`` or NA_TEXT), ``ecc_volatile_uncorrected``,
    ``ecc_aggregate_uncorrected``, ``driver_model``, ``mig_mode``, ``mig_devices`` (``[(gpu
    instance id, total MiB, used MiB)]``) and ``processes`` (``[(pid, type, name, used MiB or
    NA_TEXT)]``).
    """
    if Q_HEADER in path_or_text:
        root = _q_to_xml(path_or_text)
    elif path_or_text.lstrip().startswith("<"):
        root = ET.fromstring(path_or_text)
    elif path_or_text.endswith(".txt"):
        with open(path_or_text, encoding="utf-8") as fh:
            root = _q_to_xml(fh.read())
    else:
        root = ET.parse(path_or_text).getroot()
    out = {
        "timestamp": _text(root, "timestamp"),
        "driver_version": _text(root, "driver_version"),
        "cuda_version": _text(root, "cuda_version"),
        "gpus": [],
    }
    for gpu in root.findall("gpu"):
        pstate = _text(gpu, "performance_state") or NA_TEXT
        procs = []
        for p in gpu.findall("processes/process_info"):
            procs.append(
                (
                    int(_text(p, "pid")),
                    _text(p, "type"),
                    _text(p, "process_name") or "",
                    _number(p, "used_memory"),
                )
            )
        migs = []
        for m in gpu.findall("mig_devices/mig_device"):
            migs.append(
                (
                    _number(m, "gpu_instance_id"),
                    _number(m, "fb_memory_usage/total"),
                    _number(m, "fb_memory_usage/used"),
                )
            )
        out["gpus"].append(
            {
                "name": _text(gpu, "product_name"),
                "uuid": _text(gpu, "uuid"),
                "pci_bus_id": _text(gpu, "pci/pci_bus_id") or gpu.get("id"),
                "memory_total_mib": _number(gpu, "fb_memory_usage/total"),
                "memory_used_mib": _number(gpu, "fb_memory_usage/used"),
                "memory_reserved_mib": _number(gpu, "fb_memory_usage/reserved"),
                "util_gpu_pct": _number(gpu, "utilization/gpu_util"),
                "util_mem_pct": _number(gpu, "utilization/memory_util"),
                "temperature_c": _number(gpu, "temperature/gpu_temp"),
                "power_draw_w": _number(
                    gpu,
                    "gpu_power_readings/average_power_draw",
                    "gpu_power_readings/power_draw",
                    "power_readings/average_power_draw",
                    "power_readings/power_draw",
                ),
                "power_limit_w": _number(
                    gpu,
                    "gpu_power_readings/current_power_limit",
                    "gpu_power_readings/enforced_power_limit",
                    "power_readings/enforced_power_limit",
                    "power_readings/power_limit",
                ),
                "clock_sm_mhz": _number(gpu, "clocks/sm_clock"),
                "clock_mem_mhz": _number(gpu, "clocks/mem_clock"),
                "pstate": int(pstate[1:]) if re.fullmatch(r"P\d+", pstate) else NA_TEXT,
                "fan_pct": _number(gpu, "fan_speed"),
                "ecc_mode": _text(gpu, "ecc_mode/current_ecc") or NA_TEXT,
                "ecc_volatile_uncorrected": _ecc_total(gpu, "volatile"),
                "ecc_aggregate_uncorrected": _ecc_total(gpu, "aggregate"),
                "driver_model": _text(gpu, "driver_model/current_dm") or NA_TEXT,
                "mig_mode": _text(gpu, "mig_mode/current_mig") or NA_TEXT,
                "mig_devices": migs,
                "processes": procs,
            }
        )
    return out


def is_windows(cap: dict) -> bool:
    """Whether the capture was taken on Windows (a driver model: WDDM, TCC or MCDM)."""
    return any(g["driver_model"] in DRIVER_MODELS for g in cap["gpus"])


def needs_fake(cap: dict) -> bool:
    """Whether the capture has what only the fake plays.

    That is a driver model (Windows), graphics processes, a process whose memory is N/A (the
    stand-in library has compute processes only) or one ECC counter N/A while ECC is on.
    """
    for g in cap["gpus"]:
        if g["driver_model"] != NA_TEXT:
            return True
        counts = (g["ecc_volatile_uncorrected"], g["ecc_aggregate_uncorrected"])
        if g["ecc_mode"] == "Enabled" and NA_TEXT in counts:  # one counter N/A, not the mode
            return True
        if any(t != "C" or used == NA_TEXT for _, t, _, used in g["processes"]):
            return True
    return False


def _or_none(v):
    return None if v == NA_TEXT else v


def _cuda_version(text) -> int:
    major, _, minor = (text or "12.0").partition(".")
    return int(major) * 1000 + int(minor or 0) * 10


def scenario(cap: dict) -> dict:
    """The stand-in NVML scenario of a capture (:func:`parse`'s dict).

    In ``tests/fake_nvml.py``'s format plus the stand-in's keys: it answers every NVML call
    cudamagic makes with the capture's values, and NotSupported where the capture says N/A.
    """
    gpus = []
    for i, g in enumerate(cap["gpus"]):
        unsupported = set()

        def val(key, scale=1, fn=None, g=g, unsupported=unsupported):
            v = g[key]
            if v == NA_TEXT:
                if fn:
                    unsupported.add(fn)
                return 0
            return int(round(v * scale))

        reserved = g["memory_reserved_mib"]
        spec = {
            "name": g["name"],
            "uuid": g["uuid"],
            "pci_bus_id": g["pci_bus_id"],
            "cc": (8, 0),
            "memory_total": val("memory_total_mib", MIB),
            # before R510 (no <reserved>) nvidia-smi's used is v1's, the reserve included
            "memory_used": val("memory_used_mib", MIB),
            "memory_reserved": 0 if reserved == NA_TEXT else reserved * MIB,
            "memory_v2": reserved != NA_TEXT,
            "util_gpu": val("util_gpu_pct", 1, "nvmlDeviceGetUtilizationRates"),
            "util_mem": val("util_mem_pct", 1, "nvmlDeviceGetUtilizationRates"),
            "temperature": val("temperature_c", 1, "nvmlDeviceGetTemperature"),
            "power_draw_mw": val("power_draw_w", 1000, "nvmlDeviceGetPowerUsage"),
            "power_limit_mw": val("power_limit_w", 1000, "nvmlDeviceGetEnforcedPowerLimit"),
            "fan": val("fan_pct", 1, "nvmlDeviceGetFanSpeed"),
            "clock_sm": val("clock_sm_mhz", 1, "nvmlDeviceGetClockInfo"),
            "clock_mem": val("clock_mem_mhz", 1, "nvmlDeviceGetClockInfo"),
            "pstate": val("pstate", 1, "nvmlDeviceGetPerformanceState"),
            "throttle": 0,
            "persistence": 0,
            "mig_mode": (1, 1) if g["mig_mode"] == "Enabled" else (0, 0),
            "mig_devices": [
                {
                    "uuid": f"MIG-capture-{i}-{gi}",
                    "memory_total": total * MIB,
                    "memory_used": used * MIB,
                }
                for gi, total, used in g["mig_devices"]
            ],
            "processes": [
                (pid, None if used == NA_TEXT else used * MIB)
                for pid, t, _, used in g["processes"]
                if "C" in t
            ],
            "graphics_processes": [
                (pid, None if used == NA_TEXT else used * MIB)
                for pid, t, _, used in g["processes"]
                if "G" in t
            ],
            "ecc": {}
            if g["ecc_mode"] != "Enabled"
            else {
                "current": 1,
                "volatile_uncorrected": _or_none(g["ecc_volatile_uncorrected"]),
                "aggregate_uncorrected": _or_none(g["ecc_aggregate_uncorrected"]),
            },
            "unsupported": unsupported,
            "lost": False,
            "max_clock_sm": 0,
            "max_clock_mem": 0,
        }
        if g["driver_model"] in DRIVER_MODELS:
            spec["driver_model"] = (DRIVER_MODELS[g["driver_model"]],) * 2
        gpus.append(spec)
    return {
        "driver_version": cap["driver_version"],
        "nvml_version": f"12.{cap['driver_version']}",
        "cuda_driver_version": _cuda_version(cap["cuda_version"]),
        "process_names": {
            pid: name for g in cap["gpus"] for pid, _, name, _ in g["processes"] if name
        },
        "gpus": gpus,
    }
