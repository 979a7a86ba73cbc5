"""Floating-point operations of profiled work: matmuls, convolutions and attention.

Two ways in, one set of formulas:

- :func:`flops_from_events` reads the operators a profile recorded (``record_shapes=True`` gives
  input shapes, dtypes and scalar arguments) and counts each outermost operator that has a formula,
  so ``aten::linear -> aten::addmm`` counts once and a backend's inner kernel call
  (``_flash_attention_forward`` inside ``_scaled_dot_product_flash_attention``) is not counted
  again. The cell runs once, untouched: nothing is added to its dispatch path.
- :func:`count_flops` runs a function under ``torch.utils.flop_counter.FlopCounterMode`` with the
  same formulas (:func:`counter_mapping`), which adds those PyTorch lacks: the CPU flash attention
  (``_scaled_dot_product_flash_attention_for_cpu``, the path of ``scaled_dot_product_attention`` on
  CPU in train and in ``eval()``/``no_grad``), the ``fused_attention_overrideable`` backend,
  ``_addmm_activation`` and the ``eval()`` fast paths of ``nn.MultiheadAttention`` and
  ``nn.TransformerEncoderLayer``.

A matmul ``[m, k] @ [k, n]`` is ``2*m*k*n`` FLOPs (a multiply and an add), a convolution ``2 *
batch * output positions * weight elements``, attention ``2*B*H*L*S*(E + Ev)`` forward and twice
that backward (no causal discount, as PyTorch's own counter).
"""

from __future__ import annotations

from math import prod

#: forward attention operators (every backend): query, key, value are inputs 0, 1, 2.
SDPA_FORWARD = (
    "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_cudnn_attention",
    "aten::_scaled_dot_product_fused_attention_overrideable",
)
#: backward attention operators: grad_out, query, key, value are inputs 0..3.
SDPA_BACKWARD = tuple(f"{n}_backward" for n in SDPA_FORWARD)
#: the inner kernels of the flash/efficient backends, in [B, L, H, E] layout.
ATTENTION_KERNELS = {
    "aten::_flash_attention_forward": 1,
    "aten::_efficient_attention_forward": 1,
    "aten::_flash_attention_backward": 2,
    "aten::_efficient_attention_backward": 2,
}
_DTYPES = {
    "float": "fp32",
    "double": "fp64",
    "c10::BFloat16": "bf16",
    "c10::Half": "fp16",
    "c10::Float8_e4m3fn": "fp8",
    "c10::Float8_e5m2": "fp8",
}


def _mm(shapes, _concrete) -> float:
    (m, k), (_, n) = shapes[0][-2:], shapes[1][-2:]
    return 2.0 * m * k * n


def _addmm(shapes, _concrete) -> float:
    return _mm(shapes[1:], None)


def _bmm(shapes, _concrete) -> float:
    b, m, k = shapes[0]
    return 2.0 * b * m * k * shapes[1][-1]


def _baddbmm(shapes, _concrete) -> float:
    return _bmm(shapes[1:], None)


def conv_out_spatial(x_sp, w_sp, stride, padding, dilation) -> list:
    """Output sizes of a (non-transposed) convolution per spatial dimension."""
    n = len(x_sp)
    stride, padding, dilation = (_per_dim(v, n) for v in (stride, padding, dilation))
    return [
        (x + 2 * p - d * (k - 1) - 1) // s + 1
        for x, k, s, p, d in zip(x_sp, w_sp, stride, padding, dilation, strict=True)
    ]


def _per_dim(value, n: int) -> list:
    if isinstance(value, (list, tuple)):
        return list(value) if len(value) == n else [value[0]] * n
    return [int(value)] * n


def conv_flops(x_shape, w_shape, stride, padding, dilation, transposed: bool) -> float:
    """FLOPs of one convolution: ``2 * batch * positions * weight elements``.

    Positions are the output's (the input's for a transposed convolution).
    """
    sp = (
        list(x_shape[2:])
        if transposed
        else conv_out_spatial(x_shape[2:], w_shape[2:], stride, padding, dilation)
    )
    return 2.0 * x_shape[0] * prod(sp) * prod(w_shape)


def _convolution(shapes, concrete) -> float:
    stride, padding, dilation, transposed = concrete[3:7]
    return conv_flops(shapes[0], shapes[1], stride, padding, dilation, bool(transposed))


def _convolution_backward(shapes, concrete) -> float:
    _, x, w = shapes[:3]
    stride, padding, dilation, transposed = concrete[4:8]
    mask = concrete[10] if len(concrete) > 10 and concrete[10] else [True, True, True]
    fwd = conv_flops(x, w, stride, padding, dilation, bool(transposed))
    return fwd * (bool(mask[0]) + bool(mask[1]))


def attention_flops(q, k, v) -> float:
    """Forward FLOPs of attention: ``QK^T`` and ``PV``.

    Queries ``[..., L, E]``, keys ``[..., S, E]``, values ``[..., S, Ev]``.
    """
    batch = prod(q[:-2])
    L, E = q[-2], q[-1]
    S, Ev = k[-2], v[-1]
    return 2.0 * batch * L * S * (E + Ev)


def _sdpa(shapes, _concrete) -> float:
    return attention_flops(*shapes[:3])


def _sdpa_backward(shapes, _concrete) -> float:
    return 2.0 * attention_flops(*shapes[1:4])


def _blhe(shape) -> list:
    """[B, L, H, E] -> [B, H, L, E]."""
    b, length, h, e = shape
    return [b, h, length, e]


def _attention_kernel(shapes, _concrete, factor: int) -> float:
    first = 0 if factor == 1 else 1
    q, k, v = (_blhe(s) for s in shapes[first : first + 3])
    return factor * attention_flops(q, k, v)


#: operator name -> formula(shapes, concrete inputs) -> FLOPs.
FORMULAS = {
    "aten::mm": _mm,
    "aten::addmm": _addmm,
    "aten::bmm": _bmm,
    "aten::baddbmm": _baddbmm,
    "aten::convolution": _convolution,
    "aten::_convolution": _convolution,
    "aten::convolution_backward": _convolution_backward,
    **dict.fromkeys(SDPA_FORWARD, _sdpa),
    **dict.fromkeys(SDPA_BACKWARD, _sdpa_backward),
    **{
        name: (lambda s, c, f=factor: _attention_kernel(s, c, f))
        for name, factor in ATTENTION_KERNELS.items()
    },
}


def dtype_name(dtypes) -> str:
    """Short dtype of an operator's first tensor input (``fp32``, ``bf16``, ``fp16``...)."""
    for d in dtypes:
        if d in _DTYPES:
            return _DTYPES[d]
    return "other"


def flops_from_events(events) -> dict:
    """FLOPs per dtype of recorded operators.

    Args:
        events: iterable of ``(thread, start_us, end_us, name, shapes, dtypes, concrete)`` (shapes:
            list of input shapes; dtypes: list of input dtype names as the profiler writes them;
            concrete: list of scalar inputs, None for tensors). Any order.

    Returns:
        dtype name -> FLOPs. An operator inside another counted operator of its thread is not
        counted; an operator whose shapes do not fit its formula is skipped.
    """
    by_thread: dict = {}
    for ev in events:
        if ev[3] in FORMULAS:
            by_thread.setdefault(ev[0], []).append(ev)
    out: dict = {}
    for items in by_thread.values():
        items.sort(key=lambda e: (e[1], -e[2]))
        covered_until = float("-inf")
        for _, start, end, name, shapes, dtypes, concrete in items:
            if start < covered_until:
                continue
            try:
                n = FORMULAS[name](shapes, concrete)
            except (TypeError, ValueError, IndexError):
                continue
            covered_until = end
            key = dtype_name(dtypes)
            out[key] = out.get(key, 0.0) + n
    return out


def flops_from_profiler(prof) -> dict:
    """FLOPs per dtype of a stopped ``torch.profiler.profile``.

    The profile must be recorded with ``record_shapes=True`` (see :func:`flops_from_events`); an
    empty dict when it kept no operator events.
    """
    kin = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    if kin is None:
        return {}
    rows = []
    for e in kin.events():
        name = e.name()
        if name in FORMULAS:
            start = e.start_ns() / 1000.0
            rows.append(
                (
                    e.start_thread_id(),
                    start,
                    start + e.duration_ns() / 1000.0,
                    name,
                    e.shapes(),
                    e.dtypes(),
                    e.concrete_inputs(),
                )
            )
    return flops_from_events(rows)


def _mha(shapes, concrete, first: int = 0) -> float:
    """``_native_multi_head_attention``: the q/k/v and output projections and the attention."""
    q, k = shapes[first], shapes[first + 1]
    heads = concrete[first + 4]
    d = q[-1]
    batch, length, source = prod(q[:-2]), q[-2], k[-2]
    proj = 2.0 * batch * (length + 2 * source) * d * d + 2.0 * batch * length * d * d
    head_q = [batch, heads, length, d // heads]
    head_k = [batch, heads, source, d // heads]
    return proj + attention_flops(head_q, head_k, head_k)


def _encoder_layer(shapes, concrete) -> float:
    """``_transformer_encoder_layer_fwd``: self-attention and two feed-forward matmuls.

    The ``eval()`` fast path of ``nn.TransformerEncoderLayer``.
    """
    src, heads = shapes[0], concrete[2]
    ffn = shapes[14]
    tokens = prod(src[:-1])
    mha = _mha([src, src, src, [], [], *shapes[3:7]], [None, None, None, src[-1], heads])
    return mha + 2 * 2.0 * tokens * ffn[0] * ffn[1]


FORMULAS.update(
    {
        "aten::_addmm_activation": _addmm,
        "aten::_native_multi_head_attention": _mha,
        "aten::_transformer_encoder_layer_fwd": _encoder_layer,
    }
)


def counter_mapping() -> dict:
    """``FlopCounterMode(custom_mapping=...)`` with every formula of :data:`FORMULAS`.

    Keys are the aten operators of this torch build. They replace PyTorch's own for those
    operators, so both ways count the same model FLOPs: PyTorch counts the recomputed scores of
    the attention backward (2.5x the forward instead of 2x), and has no formula for the CPU flash
    attention, the fused attention backend, ``_addmm_activation`` or the ``eval()`` fast paths
    of the transformer layers.
    """
    import torch

    out = {}
    for name, formula in FORMULAS.items():
        op = getattr(torch.ops.aten, name[6:], None)
        if op is not None:
            out[op] = _counter_formula(formula)
    return out


def _counter_formula(formula):
    """A :data:`FORMULAS` entry as ``FlopCounterMode`` calls it (tensors and plain arguments)."""
    import torch

    def count(*args, out_val=None, **kwargs):
        shapes = [list(a.shape) if isinstance(a, torch.Tensor) else [] for a in args]
        concrete = [None if isinstance(a, torch.Tensor) else a for a in args]
        return int(formula(shapes, concrete))

    count._get_raw = True
    return count


def count_flops(fn, *args, **kwargs) -> tuple[float, object]:
    """Run ``fn(*args, **kwargs)`` under ``FlopCounterMode`` with :func:`counter_mapping`.

    Returns:
        (total FLOPs, fn's return value). The run is slower (every operator goes through Python):
        use it on a model, not inside a timed cell.
    """
    from torch.utils.flop_counter import FlopCounterMode

    mode = FlopCounterMode(display=False, custom_mapping=counter_mapping())
    with mode:
        value = fn(*args, **kwargs)
    return float(mode.get_total_flops()), value
