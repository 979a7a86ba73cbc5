"""Context for autograd errors.

Backward through a freed graph (a carried tensor, a re-run cell), backward on a tensor without a
graph or with several elements, in-place changes of a leaf or of a tensor saved for backward.

Each ``ctx_*(match, scene)`` returns a :class:`~cudamagic.explain.result.Context`.
"""

from __future__ import annotations

import contextlib
import math
import re

from ..result import Context
from ..scene import (
    _is_module,
    _is_tensor,
    _lookup,
    _named_modules,
    _shape,
    _source_text,
    _torch,
)
from ..source import (
    _IDENT,
    _assigns_in,
    _last_cell_assigning,
    _method_calls,
    apply_calls,
    assignments_from_call,
    backward_calls,
    carried_names,
    grads_without_create_graph,
    inplace_uses,
    line_of,
    step_calls,
)


def ctx_backward_twice(match, scene):
    """The carried tensor or the re-run cell whose graph was already freed."""
    src = _source_text(scene)
    calls = backward_calls(src)
    carried = carried_names(src)
    notes, facts, fix = (
        [],
        {"backward_on": [c[1] for c in calls], "carried": None, "rerun_cell": None},
        "",
    )
    for expr, _root in calls:
        # the loss often derives from the carried tensor: any carried name that has a graph
        for name in carried:
            value = _lookup(scene, name)
            if _is_tensor(value) and value.grad_fn is not None:
                facts["carried"] = name
                notes.append(
                    f"`{name}` is carried from one loop iteration into the next and still has a "
                    f"grad_fn ({type(value.grad_fn).__name__}): each `{expr}.backward()` reaches "
                    f"back "
                    "into the previous iteration's graph, which the previous backward already "
                    "freed."
                )
                fix = (
                    f"Cut the graph at each iteration: `{name} = {name}.detach()` before using it "
                    f"in the next "
                    "step (truncated backpropagation through time). `retain_graph=True` would hide "
                    "the error "
                    "but keep every iteration's graph in memory and backpropagate through all of "
                    "them."
                )
                break
        if facts["carried"]:
            break
    if not facts["carried"] and calls:
        expr, root = calls[0]
        cell = scene.history[-1] if scene.history else (scene.sources[0] if scene.sources else "")
        if root and not _assigns_in(cell, root):
            index = _last_cell_assigning(scene.history, root)
            facts["rerun_cell"] = index
            where = f"In[{index}]" if index else "the cell that computes it"
            notes.append(
                f"This cell calls `{expr}.backward()` but does not compute `{root}`: `{root}` "
                f"comes from "
                f"{where}, and its graph was freed by the first backward."
            )
            fix = (
                f"Re-run the forward cell ({where}) before running this cell again, or compute "
                f"`{root}` and "
                "call backward in the same cell."
            )
    return Context(notes=tuple(notes), facts=facts, fix=fix)


_NO_GRAD_SIGNS = (
    (r"torch\.no_grad\(\)", "a `with torch.no_grad():` block"),
    (r"inference_mode\(", "`torch.inference_mode()`"),
    (r"\.detach\(\)", "`.detach()`"),
    (r"\.item\(\)", "`.item()` (a Python number has no graph)"),
    (r"\.numpy\(\)|from_numpy\(|np\.", "a NumPy round trip"),
    (r"torch\.tensor\(", "`torch.tensor(...)` (a new leaf without a graph)"),
    (r"requires_grad_?\(?\s*=?\s*False", "`requires_grad=False`"),
)


def _param_counts(module):
    total = requiring = 0
    for p in module.parameters():
        total += 1
        requiring += bool(p.requires_grad)
    return total, requiring


def ctx_no_grad(match, scene):
    """Which tensor lost its graph, how, and whether its models' parameters require grad.

    Models are looked for where the tensor was made (the failing lines, this cell, the cell
    that assigned the tensor), never in the whole namespace: a model that has nothing to do
    with the tensor says nothing about it.
    """
    src = _source_text(scene)
    calls = backward_calls(src)
    line_calls = [c for line in scene.failing_lines for c in backward_calls(line)]
    calls = line_calls + [c for c in calls if c not in line_calls]
    notes, facts = (
        [],
        {
            "tensor": None,
            "requires_grad": None,
            "params_requiring_grad": None,
            "params_total": None,
            "signs": [],
            "models": {},
        },
    )
    origin = ""  # source of the cell that assigned the tensor, if earlier than this one
    root_module = None
    for expr, root in calls:
        value = _lookup(scene, root)
        if _is_tensor(value):
            facts["tensor"] = root
            facts["requires_grad"] = bool(value.requires_grad)
            how = ""
            with contextlib.suppress(Exception):
                if value.is_inference():
                    how = " It is an inference tensor (created under torch.inference_mode())."
            notes.append(
                f"`{root}.requires_grad` is {value.requires_grad} and `{root}.grad_fn` is "
                f"{value.grad_fn!r}: autograd recorded nothing for it.{how}"
            )
            index = (
                _last_cell_assigning(scene.history, root) if not _assigns_in(src, root) else None
            )
            if index:
                origin = scene.history[index] or ""
                facts["assigned_in"] = index
            break
        if _is_module(value):  # model(x).sum().backward()
            root_module = root
            facts["tensor"] = expr
            break
    # the models that can have produced it: on the failing line, in this cell, in the cell that made
    # it
    model_text = "\n".join([*scene.failing_lines, src, origin])
    mentioned = set(_IDENT.findall(model_text))
    for name, value in scene.variables():
        if _is_module(value) and name in mentioned:
            try:
                facts["models"][name] = _param_counts(value)
            except Exception:
                continue
    total = sum(t for t, _ in facts["models"].values())
    requiring = sum(r for _, r in facts["models"].values())
    if facts["models"]:
        facts["params_total"], facts["params_requiring_grad"] = total, requiring
    for name, (t, r) in list(facts["models"].items())[:3]:
        if not t:
            continue
        if r == 0:
            notes.append(
                f"None of the {t} parameters of `{name}` requires grad (frozen with "
                "requires_grad_(False)?), so nothing computed from it is tracked."
            )
        elif facts["tensor"] and root_module is None:
            notes.append(
                f"{r} of the {t} parameters of `{name}` require grad: if `{facts['tensor']}` comes "
                f"from "
                f"`{name}`, the graph was cut between them."
            )
        else:
            notes.append(f"{r} of the {t} parameters of `{name}` require grad.")
    value = _lookup(scene, facts["tensor"]) if facts["tensor"] and root_module is None else None
    for pattern, label in _NO_GRAD_SIGNS:
        if re.search(pattern, src + "\n" + origin):
            facts["signs"].append(label)
    if _is_tensor(value) and value.grad_fn is None and not facts["models"] and not facts["signs"]:
        notes.append(
            f"`{facts['tensor']}` is a leaf: no operation that autograd recorded produced it. If "
            f"you "
            "want gradients, create it (or the tensors it is computed from) with "
            "requires_grad=True."
        )
    fix = ""
    no_graph = grads_without_create_graph(src + "\n" + origin)
    if facts["tensor"] and facts["tensor"] in no_graph:
        facts["double_backward"] = True
        notes.append(
            f"`{facts['tensor']}` comes from `torch.autograd.grad(...)` without "
            f"`create_graph=True`: a "
            "gradient computed that way has no graph, so it cannot be differentiated again."
        )
        fix = (
            f"Compute `{facts['tensor']}` with `torch.autograd.grad(..., create_graph=True)` to "
            f"differentiate it "
            "again (double backward: gradient penalties, Hessian-vector products)."
        )
    if facts["signs"]:
        where = "this cell" + (
            f" and In[{facts['assigned_in']}], where `{facts['tensor']}` was computed"
            if origin
            else ""
        )
        notes.append(f"Likely culprit in {where}: " + ", ".join(facts["signs"]) + ".")
    return Context(notes=tuple(notes), facts=facts, fix=fix)


def ctx_scalar(match, scene):
    """The non-scalar tensor backward was called on, and how to reduce it."""
    calls = backward_calls(_source_text(scene))
    for _expr, root in calls:
        value = _lookup(scene, root)
        if _is_tensor(value) and value.dim() > 0:
            shape = list(_shape(value))
            fix = (
                f"Reduce `{root}` to one number first: `{root}.mean().backward()` or "
                f"`{root}.sum().backward()`; "
                f"or pass the upstream gradient: `{root}.backward(torch.ones_like({root}))`."
            )
            return Context(
                notes=(f"`{root}` has shape {shape}, not a single number.",),
                facts={"tensor": root, "shape": tuple(shape)},
                fix=fix,
            )
    return Context()


def ctx_leaf_inplace(match, scene):
    """The leaf that requires grad and was changed in place."""
    uses = inplace_uses(_source_text(scene))
    for name, op in uses:
        value = _lookup(scene, name)
        if _is_tensor(value) and value.requires_grad and value.grad_fn is None:
            return Context(
                notes=(
                    f"`{op}` changes `{name}` in place; `{name}` is a leaf that requires grad "
                    f"(a parameter or a tensor created with requires_grad=True).",
                ),
                facts={"tensor": name, "op": op},
                fix=(
                    f"If this is an initialisation or a manual update, do it under `with "
                    f"torch.no_grad():` "
                    f"(`with torch.no_grad(): {op.replace(' ...', ' <value>')}`); if it is part of "
                    f"the "
                    f"computation, write it out of place: `y = {name} + ...` instead of changing "
                    f"`{name}`."
                ),
            )
    return Context(facts={"tensor": None, "op": None})


def _optimizers(scene):
    torch = _torch()
    if torch is None:
        return []
    return [(n, v) for n, v in scene.variables() if isinstance(v, torch.optim.Optimizer)]


def _parameters(scene):
    """``(qualified name, parameter)`` of every module reachable from a variable."""
    out = []
    for mod_name, module in _named_modules(scene):
        try:
            for p_name, p in module.named_parameters(recurse=False):
                out.append((f"{mod_name}.{p_name}", p))
        except Exception:
            continue
    return out


def ctx_version_counter(match, scene):
    """The tensor a version-counter error is about, and what changed it.

    Found among the live objects by shape (or transposed shape: nn.Linear saves ``weight.t()``) and
    by its version counter (``t._version``, shared with its views); whether it is a parameter (and
    which), which optimizer holds it, and whether that optimizer's ``step()`` or an in-place
    operation in the cell changed it between the forward pass and this backward.
    """
    gd = match.groupdict()
    shape = tuple(int(s) for s in re.findall(r"\d+", gd.get("shape") or ""))
    version = int(gd["version"]) if gd.get("version") else None
    expected = int(gd["expected"]) if gd.get("expected") else None
    facts = {
        "shape": shape,
        "op": gd.get("op"),
        "tensor_type": gd.get("ttype"),
        "version": version,
        "expected": expected,
        "tensor": None,
        "parameter": None,
        "transposed": False,
        "optimizer": None,
        "step_called": False,
        "inplace_ops": [],
        "suspects": [],
    }
    notes = []
    if shape:
        changed = (
            f"; it was changed {version - expected} time(s) after the forward pass saved it"
            if version is not None and expected is not None
            else ""
        )
        of = f", output {gd.get('output')} of `{gd.get('op')}`" if gd.get("op") else ""
        notes.append(
            f"The saved tensor is a {gd.get('ttype')} of shape {list(shape)}{of}{changed}."
        )

    def fits(t):
        try:
            s = _shape(t)
        except Exception:
            return None
        if s == shape:
            return "same"
        if len(s) == 2 and s[::-1] == shape:
            return "transposed"
        return None

    candidates = []  # (name, tensor, how, is_parameter)
    for name, p in _parameters(scene):
        how = fits(p)
        if how:
            candidates.append((name, p, how, True))
    seen = {id(c[1]) for c in candidates}
    for name, value in scene.variables():
        if _is_tensor(value) and id(value) not in seen:
            how = fits(value)
            if how:
                candidates.append((name, value, how, False))
    if (
        version is not None
    ):  # the version counter narrows it down (views share their base's counter)
        exact = [c for c in candidates if getattr(c[1], "_version", None) == version]
        candidates = exact or candidates
    src = _source_text(scene)
    steps = step_calls(src)
    failing_line = line_of(src, scene.failing_lines[0]) if scene.failing_lines else None
    optimizers = _optimizers(scene)
    facts["candidates"] = [c[0] for c in candidates]
    if len(candidates) > 1:
        notes.append(
            "Tensors of that shape and version in your session: "
            + ", ".join(f"`{c[0]}`" for c in candidates[:6])
            + " (the first is named below; "
            "`torch.autograd.set_detect_anomaly(True)` names the operation that saved it)."
        )
    for name, t, how, is_param in candidates[:1]:
        facts["tensor"], facts["transposed"] = name, how == "transposed"
        seen_as = (
            " (seen transposed: nn.Linear saves `weight.t()` for backward)"
            if how == "transposed"
            else ""
        )
        if is_param:
            facts["parameter"] = name
            notes.append(
                f"It is the parameter `{name}` (shape {list(_shape(t))}){seen_as}, now at version "
                f"{getattr(t, '_version', '?')}."
            )
        else:
            notes.append(
                f"It is `{name}` (shape {list(_shape(t))}){seen_as}, now at version "
                f"{getattr(t, '_version', '?')}."
            )
        for opt_name, opt in optimizers:
            try:
                held = any(p is t for group in opt.param_groups for p in group["params"])
            except Exception:
                held = False
            if held:
                facts["optimizer"] = opt_name
                called = [line for recv, line in steps if recv == opt_name]
                before = [line for line in called if failing_line is None or line < failing_line]
                if before:
                    facts["step_called"] = True
                    notes.append(
                        f"`{opt_name}.step()` (line {before[-1]} of the cell) updated `{name}` in "
                        f"place "
                        "after the forward pass that saved it and before this backward."
                    )
                else:
                    notes.append(
                        f"`{name}` is optimised by `{opt_name}`: an earlier `{opt_name}.step()` "
                        f"may have "
                        "changed it after the forward pass."
                    )
                break
    for name, op in inplace_uses(src):
        value = _lookup(scene, name)
        if _is_tensor(value) and fits(value):
            facts["inplace_ops"].append(op)
            facts["suspects"].append(name)
            if name != facts["tensor"]:
                notes.append(f"`{op}` changes `{name}` (shape {list(_shape(value))}) in place.")
    for name, module in _named_modules(scene):
        if getattr(module, "inplace", False) is True:
            facts["suspects"].append(name)
            notes.append(f"`{name}` is {module!r}: an in-place activation overwrites its input.")
            break
    fix = ""
    if facts["step_called"]:
        opt, param = facts["optimizer"], facts["parameter"] or facts["tensor"]
        module = param.split(".")[0] if param else None
        reused = list(assignments_from_call(src, module)) if module else []
        forward = reused[0] if reused else None
        losses = [root for line in scene.failing_lines for _, root in backward_calls(line)]
        loss = losses[0] if losses else "the loss"
        redo = (
            f"`{forward[0]} = {forward[1]}`" if forward else f"the forward pass through `{module}`"
        )
        fix = (
            f"Call `{loss}.backward()` before `{opt}.step()` (compute every loss that goes through "
            f"this forward "
            f"pass, backward them all, then step), or run {redo} again after `{opt}.step()` and "
            f"compute `{loss}` "
            "from the new output. In a GAN: train D on `netD(fake.detach())`, step D, then compute "
            "G's loss from a "
            "fresh `netD(fake)`. Copying the tensor would not help: the weight itself changed, so "
            "a gradient "
            "computed with the old value would be wrong."
        )
        if forward and "fake" not in forward[1]:
            fix = fix.replace("`netD(fake.detach())`", f"a detached input to `{module}`").replace(
                "a fresh `netD(fake)`", f"a fresh `{forward[1]}`"
            )
    elif facts["inplace_ops"]:
        s = facts["suspects"][0]
        fix = (
            f"Make the change to `{s}` out of place (`{s} = {s} * 2` instead of `{s} *= 2` / "
            f"`{s}.mul_(2)`), or "
            "do it after the backward."
        )
    elif facts["suspects"]:
        fix = f"Set `inplace=False` on `{facts['suspects'][0]}`."
    return Context(notes=tuple(notes), facts=facts, fix=fix)


def _sum_dims(got, expected):
    """Dimensions of ``got`` to sum into ``expected`` (matched from the right), or None."""
    dims, j = [], len(expected) - 1
    for i in range(len(got) - 1, -1, -1):
        if j >= 0 and got[i] == expected[j]:
            j -= 1
        else:
            dims.append(i)
    return sorted(dims) if j < 0 else None


def ctx_invalid_gradient(match, scene):
    """A custom Function's backward returned a gradient of the wrong shape, device, dtype or count.

    Name the Function (its class in the session), the input (0-based index, the argument passed to
    ``apply`` and its shape) and how to reduce the gradient to that shape.
    """
    gd = match.groupdict()
    node = gd.get("fn") or gd.get("fn2") or ""
    cls_name = (
        node[: -len("Backward")] if node.endswith("Backward") else re.sub(r"Backward\d*$", "", node)
    )
    facts = {
        "node": node,
        "function": cls_name,
        "index": int(gd["index"]) if gd.get("index") else None,
        "got": None,
        "expected": None,
        "argument": None,
        "sum_dims": None,
    }
    notes, fix = [], ""
    torch = _torch()
    cls = _lookup(scene, cls_name)
    is_function = (
        torch is not None and isinstance(cls, type) and issubclass(cls, torch.autograd.Function)
    )
    facts["function_found"] = bool(is_function)
    where = f"`{cls_name}.backward`" if cls_name else "the backward"
    if gd.get("got") is not None:
        got = tuple(int(s) for s in re.findall(r"\d+", gd["got"]))
        expected = tuple(int(s) for s in re.findall(r"\d+", gd["expected"] or ""))
        facts["got"], facts["expected"] = got, expected
        index = facts["index"]
        arg = None
        calls = apply_calls(_source_text(scene), cls_name)
        if calls and index is not None and index < len(calls[0]):
            arg = calls[0][index]
            facts["argument"] = arg
        nth = f"gradient number {index} (0-based), for input {index} of `{cls_name}.forward`"
        if arg:
            nth += f" (`{arg}` in `{cls_name}.apply({', '.join(calls[0])})`)"
        notes.append(
            f"{where} returned {nth} with shape {list(got)}, but that input has shape "
            f"{list(expected)}: "
            "a backward must return one gradient per forward input, each with that input's shape."
        )
        dims = _sum_dims(got, expected)
        if int(math.prod(got)) == int(math.prod(expected)):
            fix = (
                f"In {where}, reshape gradient {index} to the input's shape: "
                f"`grad.reshape({list(expected)})`."
            )
        elif dims is not None:
            facts["sum_dims"] = tuple(dims)
            d = dims[0] if len(dims) == 1 else tuple(dims)
            fix = (
                f"In {where}, reduce gradient {index} to the input's shape by summing over the "
                f"dimension(s) the "
                f"forward broadcast: `.sum(dim={d})` (shape {list(got)} -> {list(expected)}), e.g. "
                f"`return ..., (g * x).sum(dim={d})`. For broadcasting from the left, "
                f"`grad.sum_to_size(...)` does "
                "it in one call."
            )
        else:
            fix = (
                f"In {where}, return gradient {index} with shape {list(expected)} (the shape of "
                f"that input): sum "
                "over the dimensions the forward broadcast or expanded."
            )
    elif gd.get("exp_dev"):
        facts["expected_device"], facts["got_device"] = gd["exp_dev"], gd["got_dev"]
        notes.append(
            f"{where} returned gradient {facts['index']} on {gd['got_dev']}, but that input lives "
            f"on "
            f"{gd['exp_dev']}."
        )
        fix = (
            f"In {where}, create gradients on the input's device (`torch.zeros_like(x)`, "
            f"`.to(x.device)`)."
        )
    elif gd.get("n_expected"):
        facts["n_expected"], facts["n_got"] = int(gd["n_expected"]), int(gd["n_got"])
        notes.append(
            f"{where} returned {gd['n_got']} gradient(s); forward took {gd['n_expected']} "
            f"input(s). Return "
            "exactly one per input, `None` for inputs that need no gradient (ints, flags, tensors "
            "without requires_grad)."
        )
        fix = (
            f"In {where}, return {gd['n_expected']} values, using `None` for non-tensor or "
            f"constant inputs."
        )
    if is_function:
        notes.append(
            f"`{cls_name}` is the torch.autograd.Function defined in your session "
            f"({cls.__module__ if cls.__module__ != '__main__' else 'this notebook'})."
        )
    return Context(notes=tuple(notes), facts=facts, fix=fix)


def ctx_hook_changed(match, scene):
    """A tensor hook returned a gradient of another size or type.

    Which hook, on which tensor (from the ``register_hook`` calls in the cell).
    """
    gd = match.groupdict()
    hook, what = gd.get("hook"), gd.get("what")
    facts = {"hook": hook, "changed": what, "tensors": []}
    for recv, _node in _method_calls(_source_text(scene), "register_hook"):
        facts["tensors"].append(recv)
    notes = [
        f"The hook `{hook}` returned a gradient whose {what} differs from the gradient it received."
    ]
    if facts["tensors"]:
        notes.append(
            "Hooks registered in this cell on: "
            + ", ".join(f"`{t}`" for t in facts["tensors"])
            + "."
        )
    fix = (
        f"Make `{hook}` return a tensor of the same shape and dtype as its argument (e.g. `lambda "
        f"g: g * mask` or "
        "`g.clamp(-1, 1)`), or `None` to keep the gradient unchanged."
    )
    return Context(notes=tuple(notes), facts=facts, fix=fix)
