"""Why is the cell slow: findings with the exact fix, FLOPs and MFU.

The step-time breakdown (:mod:`.breakdown`) is turned into findings, and the FLOPs of the profiled
work (:mod:`.flops`) into achieved TFLOP/s and MFU against a datasheet peak (:mod:`.peaks`).

:func:`build_verdict` is pure (a :class:`~.breakdown.Breakdown`, FLOP counts and machine facts in,
a :class:`Verdict` out); :func:`verdict_of` gathers the machine facts after a profiled cell
without creating a CUDA context (the GPU's name is read only when the cell already initialised
CUDA). Findings are ranked by the share of the step time they cost, biggest first; a finding is
only made when its fix can apply here (no GPU advice on a CPU-only run, no ``pin_memory`` unless
the trace shows copies from pageable host memory).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..core import style
from ..core.display import Displayed
from ..core.fmt import esc, html_table, terminal_safe, text_table
from ..core.na import NA, is_na
from .breakdown import Breakdown
from .peaks import PEAKS

#: a cause is reported when it costs at least this share of the step time, in percent.
MIN_PCT = {
    "data": 10.0,
    "optimizer": 15.0,
    "copies": 10.0,
    "sync": 5.0,
    "launch": 15.0,
    "tiny_ops": 40.0,
    "python": 20.0,
    "tf32": 5.0,
}
#: an optimizer step of at least this many operators works parameter by parameter.
MANY_OPTIMIZER_OPS = 50
#: many tiny operators: at least this many outermost operators per step ...
TINY_OPS_PER_STEP = 100
#: ... and per millisecond of step ...
TINY_OPS_PER_MS = 20.0
#: ... with a median length at most this, in microseconds.
TINY_OP_US = 25.0
_FEWER_TENSORS = (
    "keep the weights in fewer, larger tensors (one `nn.Parameter` of shape (N, d) in place of "
    "N parameters of shape (d,); index it in `forward`)"
)
_VARIANTS = ("super", "laptop", "mobile", "max-q", "ti", "d", "mig")


@dataclass(frozen=True)
class Finding:
    """One avoidable cost.

    Attributes:
        cause: ``data``, ``optimizer``, ``copies``, ``sync``, ``launch``, ``tiny_ops``,
            ``python`` or ``tf32``.
        cost_pct: share of the step time it costs, in percent (what the fix can save at most).
        what: what was measured, in plain words. fix: the change to make, in the user's terms.
        effect: the expected effect of the fix.
    """

    cause: str
    cost_pct: float
    what: str
    fix: str
    effect: str


@dataclass(frozen=True, repr=False)
class Verdict(Displayed):
    """The answer to "why is this cell slow" (``prof.verdict``).

    Attributes:
        breakdown: the step-time :class:`~.breakdown.Breakdown`.
        findings: :class:`Finding` items, biggest cost first (empty: nothing avoidable found).
        flops: dtype (``fp32``, ``bf16``, ``fp16``...) -> FLOPs of the profiled span's matmuls,
            convolutions and attention (:mod:`.flops`).
        achieved_tflops: FLOPs per second of step time, in TFLOP/s, or NA with the reason.
        mfu_pct: model FLOPs utilisation in percent of the GPU's dense peak, or NA with the reason.
        gpu_name: the GPU's name, or NA. peak_source: the datasheet of the peak figures used, or
            None.
    """

    breakdown: Breakdown
    findings: tuple = ()
    flops: dict = field(default_factory=dict)
    achieved_tflops: object = NA("no FLOPs counted", "no_activity")
    mfu_pct: object = NA("no FLOPs counted", "no_activity")
    gpu_name: object = NA("no GPU activity recorded", "not_recorded")
    peak_source: str | None = None

    @property
    def first(self) -> Finding | None:
        """The biggest avoidable cost, or None."""
        return self.findings[0] if self.findings else None

    def text(self) -> str:
        """The breakdown table, the findings and the FLOPs as plain text."""
        return verdict_text(self)

    def html(self) -> str:
        """The same as an HTML fragment (every text escaped)."""
        return verdict_html(self)

    def to_text(self) -> str:
        """The text form (terminal, ``text/plain``)."""
        return verdict_text(self)

    def to_html(self) -> str:
        """The HTML form (notebook), with the area's style."""
        return style.page(verdict_html(self), "prof")


def find_peak(name: str) -> dict | None:
    """The :data:`~.peaks.PEAKS` entry of a GPU, or None.

    ``name`` is ``torch.cuda.get_device_name()``'s. Every ``match`` token must be a whole word
    of the name, and a variant word of the name (``SUPER``, ``Laptop``, ``Ti``, the ``D`` of
    China's 4090 D, ``MIG`` of a slice with a fraction of the SMs) must be in the entry.
    """
    low = name.lower()
    words = set(re.findall(r"[a-z0-9-]+", low))
    for entry in PEAKS:
        tokens = entry["match"]
        if not all(re.search(rf"(?<![a-z0-9]){re.escape(t)}(?![a-z0-9])", low) for t in tokens):
            continue
        entry_words = {w for t in tokens for w in t.split()}
        if any(v in words and v not in entry_words for v in _VARIANTS):
            continue
        return entry
    return None


def mfu(flops: dict, seconds: float, entry: dict | None, fp32_precision: str = "highest"):
    """(achieved TFLOP/s, MFU percent or NA) of ``flops`` (dtype -> FLOPs) in ``seconds``.

    MFU is the time the counted work would take at the dense peak of each dtype, over the time it
    took: FP32 matmuls count at the TF32 peak when ``fp32_precision`` is ``high`` or ``medium``.
    """
    total = sum(flops.values())
    if not total or seconds <= 0:
        return NA("no matmul, convolution or attention was recorded", "no_activity"), NA(
            "no matmul, convolution or attention was recorded", "no_activity"
        )
    achieved = total / seconds / 1e12
    if entry is None:
        return achieved, NA("no GPU peak applies", "not_supported")
    peaks = entry["dense_tflops"]
    at_peak, missing = 0.0, []
    for dtype, n in flops.items():
        key = "tf32" if dtype == "fp32" and fp32_precision != "highest" else dtype
        peak = peaks.get(key) or (peaks.get("fp32") if key == "tf32" else None)
        if peak:
            at_peak += n / (peak * 1e12)
        else:
            missing.append(dtype)
    if missing:
        return achieved, NA(
            f"{entry['name']} has no dense peak figure for {', '.join(sorted(missing))}",
            "not_supported",
        )
    return achieved, 100.0 * at_peak / seconds


def build_verdict(
    bd: Breakdown,
    flops: dict | None = None,
    *,
    gpu_name: object = NA("no GPU activity recorded", "not_recorded"),
    capability: tuple | None = None,
    fp32_precision: str = "highest",
    cpu_count: int = 1,
    windows: bool = False,
) -> Verdict:
    """Findings, FLOPs and MFU from a breakdown and the machine's facts.

    Args:
        bd: the step-time breakdown.
        flops: dtype -> FLOPs of the same span (:mod:`.flops`).
        gpu_name: the GPU's name, or NA (CPU-only run, or CUDA not initialised by the cell).
        capability: the GPU's (major, minor) compute capability, or None.
        fp32_precision: ``torch.get_float32_matmul_precision()`` during the run.
        cpu_count: CPU cores of this machine (the DataLoader advice).
        windows: the machine runs Windows (``os.name == "nt"``).
    """
    flops = dict(flops or {})
    p = bd.pct()
    f = bd.facts
    out = []
    step_ms = bd.step_us / 1000.0
    gpu = bd.gpu

    def add(cause, cost, what, fix, effect=None):
        if cost >= MIN_PCT[cause]:
            speedup = 100.0 / max(1.0, 100.0 - cost)
            effect = effect or (
                f"up to {cost:.0f} % less step time ({speedup:.1f}x faster at most), "
                f"now {step_ms:.1f} ms per step"
            )
            out.append(Finding(cause, cost, what, fix, effect))

    workers = max(1, min(8, cpu_count))
    if gpu and not f.get("htod_copies"):
        data_fix = (
            "the batches are already on the GPU (no host-to-device copy was recorded), so "
            "`pin_memory` and worker processes do not apply (CUDA cannot be used in a worker): "
            "index whole batches of a GPU tensor instead of one sample at a time "
            "(`X[idx]` with a tensor of indices), or move the per-sample work into the step"
        )
    elif f.get("data_iter", "").startswith("_MultiProcessing"):
        data_fix = (
            f"more workers (`num_workers` up to {cpu_count}, the CPU cores here), "
            "`prefetch_factor=4`, or a cheaper `__getitem__` (decode and resize once, cache)"
        )
    else:
        data_fix = (
            f"`DataLoader(..., num_workers={workers}, persistent_workers=True"
            + (", pin_memory=True)` and `.to(device, non_blocking=True)`" if gpu else ")`")
            + f" ({cpu_count} CPU cores here)"
        )
    if windows:
        data_fix += (
            "; on Windows define the Dataset in a .py file and import it: spawned workers "
            "cannot import classes defined in the notebook"
        )
    add(
        "data",
        p.get("data wait", 0.0),
        f"{p.get('data wait', 0):.0f} % of each step waits for "
        "the next batch (inside the DataLoader's `__next__`)",
        data_fix,
    )
    opt = f.get("optimizer", "") or "the optimizer"
    if f.get("optimizer_ops", 0) >= MANY_OPTIMIZER_OPS:
        what = (
            f"{p.get('optimizer', 0):.0f} % of each step is {opt}.step() and zero_grad(), "
            f"{f.get('optimizer_ops', 0):.0f} small operators per optimizer step "
            "(one per parameter tensor)"
        )
        if gpu:
            fix = f"`torch.optim.{opt}(..., fused=True)` (or `foreach=True`)"
        elif f.get("foreach"):
            fix = _FEWER_TENSORS
        else:
            fix = f"{_FEWER_TENSORS}, and `torch.optim.{opt}(..., foreach=True)`"
        add("optimizer", p.get("optimizer", 0.0), what, fix)
    copies = f.get("copy_calls", {})
    if gpu:
        row = p.get("host-device copies", 0.0)
        if f.get("pageable_copies"):
            add(
                "copies",
                row,
                f"{row:.0f} % of each step copies between host and GPU, "
                f"{f['pageable_copies']} copies from pageable (not pinned) host memory",
                "`DataLoader(..., pin_memory=True)` and `.to(device, non_blocking=True)`, "
                "or move the whole data set to the GPU once before the loop if it fits",
            )
        else:
            add(
                "copies",
                row,
                f"{row:.0f} % of each step copies data ({_copy_words(copies)})",
                "move or convert the data once before the loop, not in every step",
            )
    else:
        add(
            "copies",
            p.get("host copies", 0.0),
            f"{p.get('host copies', 0):.0f} % of each step copies tensors ({_copy_words(copies)})",
            "convert the data to the dtype the model uses once, before the loop, and drop "
            "`.clone()` where the tensor is not changed in place",
        )
    if gpu:
        syncs = f.get("sync_calls", {})
        add(
            "sync",
            p.get("sync stalls", 0.0),
            f"{p.get('sync stalls', 0):.0f} % of each step the GPU sits idle after the CPU waited "
            f"for it ({_sync_words(syncs, bd.steps)})",
            "accumulate on the GPU (`total += loss.detach()`) and read it once per epoch; drop "
            "`torch.cuda.synchronize()` and `print(loss)` from the step",
        )
        short = min(f.get("short_gaps_pct", 0.0), p.get("Python overhead", 0.0))
        add(
            "launch",
            p.get("launch gaps", 0.0) + short,
            f"kernels are short (median {f.get('median_kernel_us', 0):.0f} us, "
            f"{f.get('kernels', 0):.0f} per step) and the GPU is idle "
            f"{f.get('gpu_idle_pct', 0):.0f} % of the step between them: the CPU cannot launch "
            "them fast enough",
            "a larger batch, `torch.compile(model, mode='reduce-overhead')`, or CUDA graphs "
            "(`torch.cuda.graphs`)",
        )
        add("python", p.get("Python overhead", 0.0) - short, *_python_words(p, short))
    else:
        tiny = (
            f.get("ops", 0) >= TINY_OPS_PER_STEP
            and f.get("ops", 0) / max(step_ms, 1e-9) >= TINY_OPS_PER_MS
        ) and (0 < f.get("median_op_us", 0) <= TINY_OP_US)
        busy = p.get("compute", 0.0) + f.get("short_gaps_pct", 0.0)
        if tiny and busy >= MIN_PCT["tiny_ops"]:
            add(
                "tiny_ops",
                busy,
                f"{f['ops']:.0f} operators per step, median {f['median_op_us']:.1f} us each: "
                "the time goes to dispatching many tiny operators, not to arithmetic",
                "operate on whole tensors instead of looping in Python over rows or elements "
                "(one batched operator replaces thousands), or `torch.compile` the loop body",
            )
        else:
            add("python", p.get("Python overhead", 0.0), *_python_words(p, 0.0))
    entry = find_peak(gpu_name) if isinstance(gpu_name, str) else None
    fp32_share = flops.get("fp32", 0.0) / (sum(flops.values()) or 1.0)
    if (
        gpu
        and capability is not None
        and tuple(capability) >= (8, 0)
        and fp32_precision == "highest"
        and fp32_share >= 0.5
    ):
        computing = p.get("GPU computing", 0.0)
        peaks = (entry or {}).get("dense_tflops", {})
        ratio = peaks["fp32"] / peaks["tf32"] if "tf32" in peaks and "fp32" in peaks else 0.5
        add(
            "tf32",
            computing * fp32_share * (1.0 - ratio),
            f"{100 * fp32_share:.0f} % of the FLOPs are FP32 matmuls on a compute capability "
            f"{capability[0]}.{capability[1]} GPU, which has TF32 and BF16 tensor cores",
            "`torch.set_float32_matmul_precision('high')` (TF32), or "
            "`with torch.autocast('cuda', dtype=torch.bfloat16):` around the forward pass",
        )
    out.sort(key=lambda x: -x.cost_pct)
    seconds = bd.total_us / 1e6
    if gpu and is_na(gpu_name):
        achieved, mfu_pct = mfu(flops, seconds, None)
        mfu_pct = mfu_pct if is_na(achieved) else NA(gpu_name.reason, gpu_name.code)
    elif not gpu:
        achieved, _ = mfu(flops, seconds, None)
        mfu_pct = NA("no GPU kernel ran: MFU compares with a GPU's peak", "not_supported")
    elif entry is None:
        achieved, _ = mfu(flops, seconds, None)
        cc = f" (compute capability {capability[0]}.{capability[1]})" if capability else ""
        mfu_pct = NA(
            f"no datasheet peak for {gpu_name!r}{cc} in cudamagic's table; MFU is not guessed",
            "not_supported",
        )
    else:
        achieved, mfu_pct = mfu(flops, seconds, entry, fp32_precision)
    return Verdict(
        bd,
        tuple(out),
        flops,
        achieved,
        mfu_pct,
        gpu_name,
        entry["source"] if entry else None,
    )


def _python_words(p: dict, short: float) -> tuple[str, str]:
    """(what, fix) of the Python-overhead finding; ``short``: the part in short gaps."""
    return (
        f"{p.get('Python overhead', 0) - short:.0f} % of each step no operator runs: Python code "
        "between operators (per-element loops, list or NumPy conversions, logging)",
        "find the lines with `%%torchprof --group stack` or line_profiler, and move per-element "
        "Python work into tensor operations (or into the Dataset, where DataLoader workers run "
        "it in parallel)",
    )


def _copy_words(calls: dict) -> str:
    names = {
        "aten::clone": "`.clone()`",
        "aten::to": "`.to()`/`.float()`/`.double()`",
        "aten::_to_copy": "`.to()`/`.float()`/`.double()`",
        "aten::contiguous": "`.contiguous()`",
        "aten::copy_": "`.copy_()`",
    }
    top = sorted(calls.items(), key=lambda kv: -kv[1])
    words = list(dict.fromkeys(names.get(k, k) for k, _ in top))
    return ", ".join(words[:3]) or "copies"


def _sync_words(calls: dict, steps: int) -> str:
    names = {
        "aten::item": "`.item()` / `print(loss)` / `float(loss)`",
        "aten::_local_scalar_dense": "`.item()` / `print(loss)` / `float(loss)`",
        "cudaDeviceSynchronize": "`torch.cuda.synchronize()`",
        "cudaStreamSynchronize": "`.cpu()` / `.tolist()` / `.numpy()`",
        "cudaMemcpy": "a blocking copy to the host",
    }
    seen = {}
    for k, v in calls.items():
        seen[names.get(k, k)] = seen.get(names.get(k, k), 0) + v
    if not seen:
        return "synchronising calls"
    return ", ".join(f"{k} {v / max(1, steps):.0f}x per step" for k, v in seen.items())


def verdict_of(res, prof=None) -> Verdict:
    """The :class:`Verdict` of a :class:`~.result.ProfResult`.

    ``prof`` is the stopped profiler, for the FLOPs. Reads the GPU's name and compute capability
    only when CUDA is already initialised in this process.
    """
    import os

    import torch

    from .breakdown import of_result
    from .flops import FORMULAS, flops_from_profiler

    bd = of_result(res)
    counted = prof is not None and any(op.name in FORMULAS for op in res.ops)
    flops = flops_from_profiler(prof) if counted else {}
    name, cc = NA("no GPU activity recorded", "not_recorded"), None
    if res.kernels:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            dev = res.kernels[0].device
            name = torch.cuda.get_device_name(dev)
            cc = torch.cuda.get_device_capability(dev)
        else:
            name = NA("CUDA is not initialised in this process", "not_initialized")
    return build_verdict(
        bd,
        flops,
        gpu_name=name,
        capability=cc,
        fp32_precision=torch.get_float32_matmul_precision(),
        cpu_count=os.cpu_count() or 1,
        windows=os.name == "nt",
    )


# ---- text and HTML
# -----------------------------------------------------------------------------------------------


def _facts(v: Verdict) -> list:
    total = sum(v.flops.values())
    bd = v.breakdown
    out = [
        (
            "steps",
            f"{bd.steps} x {bd.step_us / 1000:.2f} ms"
            if bd.steps > 1
            else f"{bd.total_us / 1000:.2f} ms (one span; --steps N splits it)",
        ),
        (
            "FLOPs",
            f"{total / 1e9:.3f} GFLOP ("
            + ", ".join(f"{k} {n / 1e9:.3f}" for k, n in sorted(v.flops.items()))
            + ")"
            if total
            else "none counted (no matmul, convolution or attention)",
        ),
        (
            "achieved",
            v.achieved_tflops.describe() if is_na(v.achieved_tflops) else _rate(v.achieved_tflops),
        ),
        (
            "MFU",
            v.mfu_pct.describe()
            if is_na(v.mfu_pct)
            else f"{v.mfu_pct:.1f} % of {v.gpu_name}'s dense peak (source: {v.peak_source})",
        ),
    ]
    return out


def _rate(tflops: float) -> str:
    """TFLOP/s as text, in GFLOP/s under 1 TFLOP/s."""
    return f"{tflops:.1f} TFLOP/s" if tflops >= 1 else f"{tflops * 1000:.2f} GFLOP/s"


def breakdown_rows(bd: Breakdown) -> list:
    """[row, ms per step, percent] of a breakdown, in row order."""
    pct = bd.pct()
    return [
        [k, f"{us / max(1, bd.steps) / 1000:.3f}", f"{pct[k]:.1f}"] for k, us in bd.rows_us.items()
    ]


def no_finding(bd: Breakdown) -> str:
    """The verdict without a finding: which row holds the step time, and why it is not a fault."""
    pct = bd.pct()
    row = max(pct, key=pct.get)
    if row == "optimizer":  # below MANY_OPTIMIZER_OPS: few, large parameter tensors
        return (
            f"no avoidable cost found; most of the step ({pct[row]:.0f} %) is the optimizer's "
            f"arithmetic on a few large parameter tensors ({bd.facts.get('optimizer_ops', 0):.0f} "
            "operators per step): expected when forward and backward are cheap beside the "
            "number of parameters."
        )
    return f"no avoidable cost found; the step time is in operators ({row}, {pct[row]:.0f} %)."


def verdict_text(v: Verdict) -> str:
    """The verdict as plain text."""
    bd = v.breakdown
    out = [
        "Where the step time went ("
        + ("GPU run" if bd.gpu else "no GPU kernel ran: CPU rows")
        + "):",
        text_table(["row", "ms/step", "%"], breakdown_rows(bd)),
        "",
    ]
    if v.findings:
        out.append("Verdict, biggest avoidable cost first:")
        for i, fnd in enumerate(v.findings, 1):
            out.append(f"  {i}. {terminal_safe(fnd.what)}")
            out.append(f"     fix: {terminal_safe(fnd.fix)}")
            out.append(f"     expect: {terminal_safe(fnd.effect)}")
    else:
        out.append(f"Verdict: {no_finding(bd)}")
    out += ["", *(f"  {k}: {terminal_safe(val)}" for k, val in _facts(v))]
    return "\n".join(out)


def verdict_html(v: Verdict) -> str:
    """The verdict as an HTML fragment (every text escaped)."""
    bd = v.breakdown
    parts = [
        "<h4>Where the step time went</h4>",
        html_table(
            ["row", "ms/step", "%"], [[esc(c) for c in r] for r in breakdown_rows(bd)], num=(1, 2)
        ),
    ]
    if v.findings:
        items = "".join(
            f"<li><b>{esc(fnd.what)}</b><br>fix: <code>{esc(fnd.fix)}</code><br>"
            f"expect: {esc(fnd.effect)}</li>"
            for fnd in v.findings
        )
        parts.append(f"<h4>Verdict, biggest avoidable cost first</h4><ol>{items}</ol>")
    else:
        parts.append(f"<h4>Verdict</h4><div>{esc(no_finding(bd))}</div>")
    parts.append(
        html_table(
            ["", ""], [[esc(k), esc(val)] for k, val in _facts(v)], cls="cm-facts", prose=(1,)
        )
    )
    return "".join(parts)


def breakdown_change(a: Breakdown, b: Breakdown) -> list:
    """Which rows changed between two breakdowns, biggest change of time per step first.

    Lines like ``"data wait 62.0 % -> 8.0 % (4.10 -> 0.20 ms/step)"`` for each row whose share
    moved by 1 point or more or whose time per step moved by 1 % of A's step or more, then the
    step time ratio (``"step 2.90x faster"``).
    """
    pa, pb = a.pct(), b.pct()
    per_a = {k: v / max(1, a.steps) for k, v in a.rows_us.items()}
    per_b = {k: v / max(1, b.steps) for k, v in b.rows_us.items()}
    names = list(dict.fromkeys([*pa, *pb]))
    changed = sorted(names, key=lambda k: -abs(per_b.get(k, 0.0) - per_a.get(k, 0.0)))
    lines = [
        f"{k} {pa.get(k, 0.0):.1f} % -> {pb.get(k, 0.0):.1f} % "
        f"({per_a.get(k, 0.0) / 1000:.2f} -> {per_b.get(k, 0.0) / 1000:.2f} ms/step)"
        for k in changed
        if abs(pb.get(k, 0.0) - pa.get(k, 0.0)) >= 1.0
        or abs(per_b.get(k, 0.0) - per_a.get(k, 0.0)) >= 0.01 * a.step_us
    ]
    if a.step_us and b.step_us:
        r = a.step_us / b.step_us
        lines.append(f"step {r:.2f}x faster" if r >= 1 else f"step {1 / r:.2f}x slower")
    return lines
