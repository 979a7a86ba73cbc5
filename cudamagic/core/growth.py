"""Memory that keeps growing: a steady-growth detector fed one reading per step, cell or sample.

``%cudamem on`` feeds it once per cell (PyTorch's ``allocated``/``reserved`` when CUDA is in use,
the C heap's bytes in use otherwise) and ``%gpuwatch`` once per sample (this kernel's allocator);
both areas use it, so it lives in ``core``. The rule:

* **leak**: ``allocated`` rose by at least ``min_step_bytes`` (1 MiB) at each of the last
  ``steps`` (3) readings. A one-time rise (the first step's gradients and optimizer state) or a
  cache that fills in one or two steps and then stops never makes three rises in a row.
* **fragmentation**: ``reserved`` rose by at least ``min_step_bytes`` at each of the last ``steps``
  readings while ``allocated`` moved by less than that: the caching allocator holds more and more
  blocks it cannot reuse, nothing is leaking.

A run of growth is told once (:attr:`Growth.new`); the detector re-arms after a step without
growth. Nothing here imports IPython or torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from .fmt import format_bytes

MiB = 1 << 20

#: What the notice tells the user to run next.
WHY = "`%cudamem why` names what holds it"
#: The fix for a fragmented allocator (restart needed: the setting is read when CUDA starts).
FRAGMENTATION_FIX = (
    "the allocator is fragmented, not leaking: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
    "(restart the kernel) or torch.cuda.empty_cache()"
)


@dataclass(frozen=True)
class Growth:
    """A run of steady growth.

    Attributes:
        kind: ``"leak"`` (allocated grows) or ``"fragmentation"`` (reserved grows, allocated flat).
        metric: what grew, as the notice names it: ``"allocated"``, ``"reserved"``,
            ``"CPU RSS"``.
        rate_bytes: mean growth per step over the run, in bytes.
        steps: readings in a row that grew (``>= 3``).
        total_bytes: growth over the run, in bytes.
        gap_bytes: ``reserved - allocated`` at the last reading (fragmentation), else 0.
        unit: the step's name: ``"cell"``, ``"step"``, ``"sample"``.
        new: True on the reading that first confirmed the run (the notice is printed then).
    """

    kind: str
    metric: str
    rate_bytes: int
    steps: int
    total_bytes: int
    gap_bytes: int
    unit: str
    new: bool

    def line(self) -> str:
        """The one-line notice: ``allocated grows 48.0 MiB per cell (3 cells, +144.0 MiB): ...``."""
        run = f"{self.steps} {self.unit}s, +{format_bytes(self.total_bytes)}"
        if self.kind == "fragmentation":
            return (
                f"{self.metric} grows {format_bytes(self.rate_bytes)} per {self.unit} while "
                f"allocated stays flat ({run}; reserved - allocated = "
                f"{format_bytes(self.gap_bytes)}): {FRAGMENTATION_FIX}"
            )
        return f"{self.metric} grows {format_bytes(self.rate_bytes)} per {self.unit} ({run}): {WHY}"


class GrowthDetector:
    """Watches one series of readings for steady growth (see the module docstring).

    Args:
        min_step_bytes: smallest rise per reading that counts as growth, in bytes (1 MiB).
        steps: rises in a row needed before growth is told (3).
        unit: what one reading is, for the notice (``"cell"``, ``"step"``, ``"sample"``).
        metric: what ``allocated_bytes`` measures (``"allocated"``, or ``"CPU RSS"`` without
            CUDA).
    """

    def __init__(
        self,
        min_step_bytes: int = MiB,
        steps: int = 3,
        unit: str = "step",
        metric: str = "allocated",
    ):
        self.min_step_bytes = int(min_step_bytes)
        self.steps = int(steps)
        self.unit = unit
        self.metric = metric
        self._last = None  # (allocated, reserved) of the previous reading
        self._run = []  # allocated deltas of the current leak run
        self._frag = []  # reserved deltas of the current fragmentation run
        self._told = set()  # kinds already told in the current runs
        self.started = False  # the latest reading began a run of rises (take a baseline now)

    def reset(self) -> None:
        """Forget every reading (a new series: another metric, CUDA just initialised)."""
        self._last, self._run, self._frag, self._told = None, [], [], set()
        self.started = False

    def add(self, allocated_bytes: int, reserved_bytes: int | None = None) -> Growth | None:
        """Take one reading; return the run of growth it belongs to, or None.

        Args:
            allocated_bytes: bytes in use now (PyTorch ``allocated``, or the process RSS).
            reserved_bytes: bytes the allocator holds now (PyTorch ``reserved``), or None where
                there is no such figure (CPU).

        Returns:
            :class:`Growth` while a run of at least ``steps`` rises lasts (``new`` on its first
            reading), else None.
        """
        last, self._last = self._last, (int(allocated_bytes), reserved_bytes)
        self.started = False
        if last is None:
            return None
        d_alloc = int(allocated_bytes) - last[0]
        d_resv = (
            None if reserved_bytes is None or last[1] is None else int(reserved_bytes) - last[1]
        )
        if d_alloc >= self.min_step_bytes:
            self.started = not self._run
            self._run.append(d_alloc)
        else:
            self._run = []
            self._told.discard("leak")
        flat = abs(d_alloc) < self.min_step_bytes
        if flat and d_resv is not None and d_resv >= self.min_step_bytes:
            self._frag.append(d_resv)
        else:
            self._frag = []
            self._told.discard("fragmentation")
        if len(self._run) >= self.steps:
            return self._growth("leak", self.metric, self._run, 0)
        if len(self._frag) >= self.steps:
            gap = int(reserved_bytes) - int(allocated_bytes)
            return self._growth("fragmentation", "reserved", self._frag, gap)
        return None

    def _growth(self, kind, metric, deltas, gap) -> Growth:
        new = kind not in self._told
        self._told.add(kind)
        total = sum(deltas)
        return Growth(kind, metric, total // len(deltas), len(deltas), total, gap, self.unit, new)

    @property
    def growing(self) -> bool:
        """True while the latest readings rose (a leak run of any length is open)."""
        return bool(self._run)
