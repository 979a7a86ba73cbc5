"""Context for autograd errors: backward through a freed graph (a carried tensor, a re-run
cell), backward on a tensor without a graph or with several elements, in-place changes of a
leaf or of a tensor saved for backward.

Each ``ctx_*(match, scene)`` returns a :class:`~cudamagic.explain.model.Context`.
"""

from __future__ import annotations

import re

from ..model import Context
from ..scene import _is_module, _is_tensor, _lookup, _named_modules, _shape, _source_text
from ..source import _IDENT, _assigns_in, _last_cell_assigning, backward_calls, carried_names, inplace_uses


def ctx_backward_twice(match, scene):
    src = _source_text(scene)
    calls = backward_calls(src)
    carried = carried_names(src)
    notes, facts, fix = [], {"backward_on": [c[1] for c in calls], "carried": None, "rerun_cell": None}, ""
    for expr, root in calls:
        # the loss often derives from the carried tensor: any carried name that has a graph
        for name in carried:
            value = _lookup(scene, name)
            if _is_tensor(value) and value.grad_fn is not None:
                facts["carried"] = name
                notes.append(f"`{name}` is carried from one loop iteration into the next and still has a "
                             f"grad_fn ({type(value.grad_fn).__name__}): each `{expr}.backward()` reaches back "
                             "into the previous iteration's graph, which the previous backward already freed.")
                fix = (f"Cut the graph at each iteration: `{name} = {name}.detach()` before using it in the next "
                       "step (truncated backpropagation through time). `retain_graph=True` would hide the error "
                       "but keep every iteration's graph in memory and backpropagate through all of them.")
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
            notes.append(f"This cell calls `{expr}.backward()` but does not compute `{root}`: `{root}` comes from "
                         f"{where}, and its graph was freed by the first backward.")
            fix = (f"Re-run the forward cell ({where}) before running this cell again, or compute `{root}` and "
                   "call backward in the same cell.")
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
    """Which tensor backward was called on, how it lost its graph, and whether the models it
    could come from have parameters that require grad.

    Models are looked for where the tensor was made (the failing lines, this cell, the cell
    that assigned the tensor), never in the whole namespace: a model that has nothing to do
    with the tensor says nothing about it.
    """
    src = _source_text(scene)
    calls = backward_calls(src)
    line_calls = [c for line in scene.failing_lines for c in backward_calls(line)]
    calls = line_calls + [c for c in calls if c not in line_calls]
    notes, facts = [], {"tensor": None, "requires_grad": None, "params_requiring_grad": None,
                        "params_total": None, "signs": [], "models": {}}
    origin = ""  # source of the cell that assigned the tensor, if earlier than this one
    root_module = None
    for expr, root in calls:
        value = _lookup(scene, root)
        if _is_tensor(value):
            facts["tensor"] = root
            facts["requires_grad"] = bool(value.requires_grad)
            how = ""
            try:
                if value.is_inference():
                    how = " It is an inference tensor (created under torch.inference_mode())."
            except Exception:
                pass
            notes.append(f"`{root}.requires_grad` is {value.requires_grad} and `{root}.grad_fn` is "
                         f"{value.grad_fn!r}: autograd recorded nothing for it.{how}")
            index = _last_cell_assigning(scene.history, root) if not _assigns_in(src, root) else None
            if index:
                origin = scene.history[index] or ""
                facts["assigned_in"] = index
            break
        if _is_module(value):  # model(x).sum().backward()
            root_module = root
            facts["tensor"] = expr
            break
    # the models that can have produced it: on the failing line, in this cell, in the cell that made it
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
            notes.append(f"None of the {t} parameters of `{name}` requires grad (frozen with "
                         "requires_grad_(False)?), so nothing computed from it is tracked.")
        elif facts["tensor"] and root_module is None:
            notes.append(f"{r} of the {t} parameters of `{name}` require grad: if `{facts['tensor']}` comes from "
                         f"`{name}`, the graph was cut between them.")
        else:
            notes.append(f"{r} of the {t} parameters of `{name}` require grad.")
    value = _lookup(scene, facts["tensor"]) if facts["tensor"] and root_module is None else None
    for pattern, label in _NO_GRAD_SIGNS:
        if re.search(pattern, src + "\n" + origin):
            facts["signs"].append(label)
    if _is_tensor(value) and value.grad_fn is None and not facts["models"] and not facts["signs"]:
        notes.append(f"`{facts['tensor']}` is a leaf: no operation that autograd recorded produced it. If you "
                     "want gradients, create it (or the tensors it is computed from) with requires_grad=True.")
    if facts["signs"]:
        where = "this cell" + (f" and In[{facts['assigned_in']}], where `{facts['tensor']}` was computed"
                               if origin else "")
        notes.append(f"Likely culprit in {where}: " + ", ".join(facts["signs"]) + ".")
    return Context(notes=tuple(notes), facts=facts)


def ctx_scalar(match, scene):
    calls = backward_calls(_source_text(scene))
    for expr, root in calls:
        value = _lookup(scene, root)
        if _is_tensor(value) and value.dim() > 0:
            shape = list(_shape(value))
            fix = (f"Reduce `{root}` to one number first: `{root}.mean().backward()` or `{root}.sum().backward()`; "
                   f"or pass the upstream gradient: `{root}.backward(torch.ones_like({root}))`.")
            return Context(notes=(f"`{root}` has shape {shape}, not a single number.",),
                           facts={"tensor": root, "shape": tuple(shape)}, fix=fix)
    return Context()


def ctx_leaf_inplace(match, scene):
    uses = inplace_uses(_source_text(scene))
    for name, op in uses:
        value = _lookup(scene, name)
        if _is_tensor(value) and value.requires_grad and value.grad_fn is None:
            return Context(
                notes=(f"`{op}` changes `{name}` in place; `{name}` is a leaf that requires grad "
                       f"(a parameter or a tensor created with requires_grad=True).",),
                facts={"tensor": name, "op": op},
                fix=(f"If this is an initialisation or a manual update, do it under `with torch.no_grad():` "
                     f"(`with torch.no_grad(): {op.replace(' ...', ' <value>')}`); if it is part of the "
                     f"computation, write it out of place: `y = {name} + ...` instead of changing `{name}`."))
    return Context(facts={"tensor": None, "op": None})


def ctx_modified_inplace(match, scene):
    gd = match.groupdict()
    shape = tuple(int(s) for s in re.findall(r"\d+", gd.get("shape") or ""))
    notes = [f"The tensor is a {gd.get('ttype')} of shape {list(shape)}, output {gd.get('output')} of "
             f"`{gd.get('op')}`; it was changed {int(gd.get('version') or 0) - int(gd.get('expected') or 0)} "
             "time(s) after the forward pass saved it."]
    facts = {"shape": shape, "op": gd.get("op"), "tensor_type": gd.get("ttype"), "suspects": []}
    for name, op in inplace_uses(_source_text(scene)):
        value = _lookup(scene, name)
        if _is_tensor(value) and _shape(value) == shape:
            facts["suspects"].append(name)
            notes.append(f"`{op}` changes `{name}` (shape {list(shape)}) in place: that is the likely culprit.")
    for name, module in _named_modules(scene):
        if getattr(module, "inplace", False) is True:
            facts["suspects"].append(name)
            notes.append(f"`{name}` is {module!r}: an in-place activation overwrites its input.")
            if len(notes) > 4:
                break
    fix = ""
    if facts["suspects"]:
        s = facts["suspects"][0]
        fix = (f"Make the change to `{s}` out of place (`{s} = {s} * 2` instead of `{s} *= 2` / `{s}.mul_(2)`), "
               f"or set `inplace=False` on the module.")
    return Context(notes=tuple(notes), facts=facts, fix=fix)

