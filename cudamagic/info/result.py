"""What ``%cudainfo`` returns: the facts, the findings and the verdict."""

from __future__ import annotations

import dataclasses
import json

from ..core.display import Displayed
from ..core.na import NA, jsonable
from ..core.nvml import FIELD_UNITS
from .render import report_html, report_text


@dataclasses.dataclass(frozen=True)
class Finding:
    """One diagnostic of ``%cudainfo``.

    Attributes:
        severity: ``"error"``, ``"warning"``, ``"info"`` or ``"ok"``.
        id: stable name of the rule (``"driver-too-old"``).
        title: one line.
        cause: one or two sentences.
        fix: the command or setting that fixes it, or ``""``.
    """

    severity: str
    id: str
    title: str
    cause: str
    fix: str = ""

    def to_dict(self) -> dict:
        """The fields as a dict."""
        return dataclasses.asdict(self)


class CudaInfoReport(Displayed):
    """The facts and findings of ``%cudainfo``.

    Args:
        facts: dict from :func:`cudamagic.info.facts.collect_facts`.
        findings: :class:`Finding` list, the verdict last.
    """

    def __init__(self, facts: dict, findings):
        self.facts = facts
        self.findings = list(findings)

    @property
    def verdict(self) -> Finding:
        """The overall verdict finding."""
        return self.findings[-1]

    def gpus(self) -> list:
        """The GPU rows, each with ``multiprocessor_count`` from initialised CUDA or NA."""
        by_ordinal = {
            d["ordinal"]: d for d in self.facts["torch"].get("devices", []) if isinstance(d, dict)
        }
        not_yet = NA("known once CUDA is initialised in this kernel", "not_initialized")
        out = []
        for gpu in self.facts["gpus"]:
            ordinal = gpu.get("cuda_ordinal")
            device = by_ordinal.get(ordinal) if isinstance(ordinal, int) else None
            out.append(
                {
                    **gpu,
                    "multiprocessor_count": device["multiprocessor_count"] if device else not_yet,
                }
            )
        return out

    def to_dict(self) -> dict:
        """Everything as JSON-ready data.

        GPU keys follow ``nvidia-smi --query-gpu`` names; values are raw NVML units, listed
        under ``units``; NA values are ``{"na": reason, "code": ...}``.
        """
        f = self.facts
        return jsonable(
            {
                "python": f["python"],
                "torch": f["torch"],
                "driver": f["driver"],
                "toolkit": f["toolkit"],
                "gpus": self.gpus(),
                "mapping": f["mapping"],
                "env": f["env"],
                "cuda_visible_devices": f["cuda_visible_devices"],
                "findings": [x.to_dict() for x in self.findings],
                "verdict": self.verdict.to_dict(),
                "units": dict(FIELD_UNITS),
            }
        )

    def to_json(self, indent: int = 2) -> str:
        """:meth:`to_dict` as JSON text."""
        return json.dumps(self.to_dict(), indent=indent, default=str)

    def to_text(self) -> str:
        """The report as plain text."""
        return report_text(self)

    def to_html(self) -> str:
        """The report as one HTML page."""
        return report_html(self)
