"""Context for errors about the tensors an operation got.

Devices that differ, shapes that do not multiply or broadcast, dtypes that differ, class labels and
embedding indices of the wrong dtype or out of range.

Only the tensors and modules named on the failing lines are looked at where that suffices (a
variable that merely exists in the namespace may have nothing to do with the error). Each
``ctx_*(match, scene)`` returns a :class:`~cudamagic.explain.result.Context`.
"""

from __future__ import annotations

import math
import re

from ..result import Context
from ..scene import (
    _argument_tensor,
    _dtype_name,
    _failing_modules,
    _failing_tensors,
    _failing_values,
    _is_module,
    _is_tensor,
    _lookup,
    _module_device,
    _module_dtype,
    _named_modules,
    _shape,
    _target_arguments,
    _tensors,
    _torch,
)
from ..source import _root_name_of, inplace_uses


def ctx_devices(match, scene):
    """Which of the failing tensors and modules are on which device."""
    found = (
        {d for d in match.groups() if d and re.match(r"^(cpu|cuda|mps|meta|xpu)", d)}
        if match.groups()
        else set()
    )

    def by_device(pairs):
        where = {}
        for name, value in pairs:
            if _is_tensor(value):
                where.setdefault(str(value.device), []).append(name)
            elif _is_module(value):
                dev = _module_device(value)
                if dev:
                    where.setdefault(dev, []).append(f"{name} (model)")
        return where

    # the failing line's own tensors and models first: only they are certainly involved
    where, scope = by_device(_failing_values(scene)), "On the failing line"
    if len(where) < 2:
        where, scope = by_device(scene.variables()), "In your namespace"
    notes = []
    if len(where) > 1:
        for dev, names in sorted(where.items()):
            notes.append(f"{scope}, on {dev}: " + ", ".join(f"`{n}`" for n in names[:6]) + ".")
    return Context(
        notes=tuple(notes),
        facts={
            "devices": sorted(found),
            "by_device": where,
            "scope": "failing line" if scope.startswith("On") else "namespace",
        },
    )


def _int_dtypes():
    torch = _torch()
    if torch is None:
        return ()
    return (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def ctx_index_tensors(match, scene, wide: bool = False):
    """Integer tensors (labels, indices) with their range, and embeddings to compare.

    On the CPU the error is raised by the failing line, so only its tensors and modules are
    looked at. A CUDA device-side assert is reported later than the kernel that failed, so
    there (and with ``wide``, for the other asynchronous CUDA errors) the integer tensors of the
    whole namespace are listed, labelled as such.
    """
    notes, facts = [], {"int_tensors": {}, "scope": "failing line"}
    torch = _torch()
    int_dtypes = _int_dtypes()
    tensors = _failing_tensors(scene)
    modules = _failing_modules(scene)
    if not any(t.dtype in int_dtypes for _, t in tensors) and (
        wide or "device-side assert" in match.string
    ):
        tensors, modules, facts["scope"] = (
            list(_tensors(scene)),
            list(_named_modules(scene)),
            "namespace",
        )
    limits = []
    for name, module in modules:
        if torch is not None and isinstance(module, torch.nn.Embedding):
            limits.append(
                f"`{name}` = Embedding({module.num_embeddings}, ...) accepts indices "
                f"0..{module.num_embeddings - 1}"
            )
    found = []
    for name, t in tensors:
        if t.dtype in int_dtypes and t.numel() and t.device.type == "cpu":
            lo, hi = int(t.min()), int(t.max())
            facts["int_tensors"][name] = (lo, hi)
            found.append(f"`{name}` holds integers from {lo} to {hi} (shape {list(_shape(t))})")
    if found:
        where = (
            "in your namespace (the failing line may be later than the one that failed)"
            if facts["scope"] == "namespace"
            else "on the failing line"
        )
        notes.append(f"Integer tensors {where}: " + "; ".join(found[:5]) + ".")
    bad = match.groupdict().get("target")
    if bad is not None:
        facts["target"] = int(bad)
        for name, t in tensors:
            if t.is_floating_point() and t.dim() >= 2:
                classes = int(t.shape[1])
                facts.setdefault("classes", {})[name] = classes
                notes.append(
                    f"`{name}` (shape {list(_shape(t))}) scores {classes} classes, so labels must "
                    f"be "
                    f"0..{classes - 1}; the label {bad} is not."
                )
                break
    notes.extend(limits[:3])
    return Context(notes=tuple(notes), facts=facts)


def ctx_matmul(match, scene):
    """The two matrix shapes and the tensors and layers that have them."""
    torch = _torch()
    a = (int(match.group("a0")), int(match.group("a1")))
    b = (int(match.group("b0")), int(match.group("b1")))
    notes, facts = (
        [
            f"The left matrix is {a[0]}x{a[1]}, the right one {b[0]}x{b[1]}: "
            f"{a[1]} columns cannot meet {b[0]} rows."
        ],
        {"left": a, "right": b, "module": None, "input": None},
    )
    fix = ""
    modules = _failing_modules(scene)
    modules += [m for m in _named_modules(scene) if all(m[1] is not k for _, k in modules)]
    for name, module in modules:
        if (
            torch is not None
            and isinstance(module, torch.nn.Linear)
            and (module.in_features, module.out_features) == b
        ):
            facts["module"] = name
            notes.append(
                f"`{name}` is Linear(in_features={b[0]}, out_features={b[1]}): it expects {b[0]} "
                f"features per row, the input has {a[1]}."
            )
            fix = (
                f"Make the sizes agree: build `{name}` as `nn.Linear({a[1]}, {b[1]})` (or use "
                f"`nn.LazyLinear({b[1]})`), or fix the input so its last dimension is {b[0]} "
                "(did you forget `nn.Flatten()` / `{x}.view({x}.size(0), -1)`?)."
            )
            break
    # tensors on the failing line first; the namespace only when the line names none that fits
    on_line = _failing_tensors(scene)
    for side, _want in (("input", a), ("right", b)):
        for pool in (on_line, [] if on_line else list(_tensors(scene))):
            hit = None
            for name, t in pool:
                shape = _shape(t)
                if (
                    side == "input"
                    and shape
                    and shape[-1] == a[1]
                    and math.prod(shape[:-1]) == a[0]
                ):
                    hit = (name, shape)
                elif side == "right" and shape == b and facts["module"] is None:
                    hit = (name, shape)
                if hit:
                    break
            if hit:
                facts[side if side == "input" else "right_name"] = hit[0]
                which = "left" if side == "input" else "right"
                notes.append(f"`{hit[0]}` has shape {list(hit[1])}: it matches the {which} matrix.")
                break
    fix = fix.replace("{x}", facts["input"] or "x")
    return Context(notes=tuple(notes), facts=facts, fix=fix)


def ctx_broadcast(match, scene):
    """The mismatched dimension and the failing tensors' shapes."""
    gd = match.groupdict()
    a, b = int(gd["a"]), int(gd["b"])
    names = [f"`{name}` {list(_shape(t))}" for name, t in _failing_tensors(scene)]
    notes = [
        f"Dimension {gd['dim']} is {a} on one side and {b} on the other; broadcasting needs equal "
        f"sizes "
        "or a 1."
    ]
    if names:
        notes.append("Tensors on the failing line: " + ", ".join(names[:6]) + ".")
    return Context(
        notes=tuple(notes),
        facts={"sizes": (a, b), "dim": int(gd["dim"]), "tensors": [n.split("`")[1] for n in names]},
    )


def ctx_dtype(match, scene):
    """The dtypes of the tensors, arrays and models on the failing lines (not the whole namespace.

    A float64 tensor elsewhere may have nothing to do with the error).
    """
    notes, facts = [], {"float64": [], "model_dtype": {}, "tensor_dtype": {}}
    for name, value in _failing_values(scene):
        if _is_tensor(value):
            dt = _dtype_name(value)
            facts["tensor_dtype"][name] = dt
            if dt == "float64":
                facts["float64"].append(name)
            notes.append(f"`{name}` is {dt} (shape {list(_shape(value))}).")
        elif _is_module(value):
            dt = _module_dtype(value)
            if dt:
                facts["model_dtype"][name] = dt
                notes.append(f"`{name}`'s parameters are {dt}.")
        elif (
            type(value).__module__ == "numpy"
            and hasattr(value, "dtype")
            and hasattr(value, "shape")
        ):
            facts["tensor_dtype"][name] = str(value.dtype)
            if str(value.dtype) == "float64":
                facts["float64"].append(name)
            notes.append(
                f"`{name}` is a NumPy array of {value.dtype} (NumPy's default; torch.from_numpy "
                f"keeps it)."
            )
    fix = ""
    if facts["float64"] and (
        facts["model_dtype"] or len(facts["tensor_dtype"]) > len(facts["float64"])
    ):
        first = facts["float64"][0]
        if first in facts["tensor_dtype"] and _is_tensor(_lookup(scene, first)):
            fix = (
                f"Convert the data once: `{first} = {first}.float()` (or build it with "
                f"dtype=torch.float32)."
            )
        else:
            fix = (
                f"Convert the array when you make the tensor: `torch.from_numpy({first}).float()`."
            )
    return Context(notes=tuple(notes[:6]), facts=facts, fix=fix)


def _targets_context(scene, *, wrong, convert, indices=False, purpose=""):
    """Context for a loss / embedding that got targets of the wrong dtype.

    Only the arguments on the failing lines are looked at (a variable that merely exists in
    the namespace may have nothing to do with the error). ``wrong(tensor)`` says whether a
    tensor has the dtype the error complains about; ``convert`` is ``"long"`` or ``"float"``.
    """
    notes, facts = [], {"targets": [], "expressions": []}
    for callee, expr in _target_arguments(scene, indices=indices):
        role = "indices" if indices else "targets"
        value = _argument_tensor(scene, expr)
        if value is not None:
            if wrong(value):
                facts["targets"].append(expr)
                notes.append(
                    f"`{expr}`, the {role} passed to `{callee}`, is {_dtype_name(value)} with "
                    f"shape "
                    f"{list(_shape(value))}."
                )
        elif not re.fullmatch(r"[A-Za-z_]\w*", expr):
            facts["expressions"].append(expr)
            notes.append(f"The {role} passed to `{callee}` are `{expr}`.")
            root = _root_name_of(expr)
            value = _argument_tensor(scene, root) if root else None
            if value is not None and wrong(value):
                facts["targets"].append(root)
                notes.append(f"`{root}` is {_dtype_name(value)} with shape {list(_shape(value))}.")
        if notes:
            break
    fix = ""
    if facts["targets"]:
        n = facts["targets"][0]
        fix = f"`{n} = {n}.{convert}()` before the call{purpose}."
    elif facts["expressions"]:
        fix = f"Pass `({facts['expressions'][0]}).{convert}()` instead{purpose}."
    return Context(notes=tuple(notes), facts=facts, fix=fix)


def ctx_targets(match, scene):
    """The targets (or indices) that are not integers, and the conversion."""
    indices = "indices" in match.re.pattern
    return _targets_context(
        scene,
        wrong=lambda t: t.dtype not in _int_dtypes(),
        convert="long",
        indices=indices,
        purpose=" (embedding indices must be integers)"
        if indices
        else " (class indices must be int64)",
    )


def ctx_float_targets(match, scene):
    """The targets that are not floating point, and the conversion."""
    return _targets_context(
        scene,
        wrong=lambda t: not t.is_floating_point(),
        convert="float",
        purpose=" (this loss compares real numbers)",
    )


def ctx_result_cast(match, scene):
    """A float result written into an integer tensor: a BCE target, or an in-place op."""
    context = ctx_float_targets(match, scene)
    if context.facts.get("targets"):
        return context
    notes, facts = [], {"targets": [], "inplace": []}
    for line in reversed(scene.failing_lines):
        for name, op in inplace_uses(line):
            value = _lookup(scene, name)
            if _is_tensor(value) and not value.is_floating_point() and name not in facts["inplace"]:
                facts["inplace"].append(name)
                notes.append(
                    f"`{op}` writes into `{name}`, which is {_dtype_name(value)} "
                    f"(shape {list(_shape(value))})."
                )
    fix = ""
    if facts["inplace"]:
        n = facts["inplace"][0]
        fix = (
            f"Make `{n}` float first (`{n} = {n}.float()`), or write the result to a new tensor "
            f"instead of in place."
        )
    return Context(notes=tuple(notes), facts=facts, fix=fix)


def ctx_numpy(match, scene):
    """Nothing beyond the catalogue entry: its fix is general."""
    return Context()
