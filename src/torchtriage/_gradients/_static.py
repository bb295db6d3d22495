"""What can be read off a module tree without running it: unregistered tensors and modules,
frozen parameters. (The parameter index lives in `torchtriage._params`, re-exported here.)

`nn.Module.__setattr__` registers an `nn.Parameter` or `nn.Module` assigned as an attribute.
It does not register a plain tensor (even one with `requires_grad=True`), nor modules or
tensors kept in a Python list, tuple or dict: those sit in `vars(module)`, invisible to
`parameters()`, to the optimizer, to `.to(device)` and to `state_dict()`.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn as nn

from .._findings import Category, Finding, Severity, Stage, from_catalogue
from .._params import ParamInfo as ParamInfo  # the one index (issue 11)
from .._params import index_parameters as index_parameters

_MAX_ITEMS = 64  # a container's elements inspected (a list of 10k tensors is data, not layers)


def _finding(code: str, severity: Severity, module: str, key: str, **fields: object) -> Finding:
    return from_catalogue(
        Category.GRADIENT, code, f"gradients.{key}.message", fields=dict(fields, module=module or "<root>"),
        cause_key=f"gradients.{key}.cause", next_key=f"gradients.{key}.next",
        evidence={k: v for k, v in fields.items() if k != "parameter"}, severity=severity, stage=Stage.PARAMETER,
        module=module, parameter=fields.get("parameter") if isinstance(fields.get("parameter"), str) else None)


def _items(value: object) -> Iterator[tuple[str, object]]:
    if isinstance(value, dict):
        for i, (k, v) in enumerate(value.items()):
            if i >= _MAX_ITEMS:
                break
            yield f"[{k!r}]", v
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value[:_MAX_ITEMS]):
            yield f"[{i}]", v


def registration_findings(model: nn.Module) -> list[Finding]:
    """Unregistered trainable tensors and modules hidden in Python containers."""
    registered = {id(p) for p in model.parameters()}
    registered_modules = {id(m) for m in model.modules()}
    out: list[Finding] = []
    for mname, mod in model.named_modules():
        for attr, value in vars(mod).items():
            if attr.startswith("_") and attr in ("_parameters", "_buffers", "_modules"):
                continue
            path = f"{mname}.{attr}" if mname else attr
            if isinstance(value, torch.Tensor):
                if value.requires_grad and value.is_leaf and id(value) not in registered:
                    out.append(_finding("gradient.unregistered_tensor", Severity.ERROR, mname, "unregistered_tensor",
                                        parameter=path, attribute=attr, shape=list(value.shape)))
                continue
            hidden_tensors, hidden_modules, trainable = [], [], 0
            for sub, item in _items(value):
                if isinstance(item, nn.Module) and id(item) not in registered_modules:
                    n = sum(p.numel() for p in item.parameters() if p.requires_grad and id(p) not in registered)
                    if n:
                        hidden_modules.append(f"{attr}{sub}")
                        trainable += n
                elif (isinstance(item, torch.Tensor) and item.requires_grad
                      and item.is_leaf and id(item) not in registered):
                    hidden_tensors.append(f"{attr}{sub}")
                    trainable += item.numel()
            if hidden_modules:
                kind = "ModuleDict" if isinstance(value, dict) else "ModuleList"
                out.append(_finding("gradient.unregistered_modules", Severity.ERROR, mname, "unregistered_modules",
                                    parameter=path, attribute=attr, container=type(value).__name__, fix=kind,
                                    items=hidden_modules, values=trainable))
            elif hidden_tensors:
                kind = "ParameterDict" if isinstance(value, dict) else "ParameterList"
                out.append(_finding("gradient.unregistered_tensor", Severity.ERROR, mname, "unregistered_tensors",
                                    parameter=path, attribute=attr, container=type(value).__name__, fix=kind,
                                    items=hidden_tensors, values=trainable))
    return out


def hidden_trainable(model: nn.Module) -> dict[str, list[torch.Tensor]]:
    """The trainable tensors behind each `registration_findings` entry, by its `parameter` path: a
    plain tensor attribute, or the tensors (and hidden modules' parameters) of a Python container."""
    registered = {id(p) for p in model.parameters()}
    registered_modules = {id(m) for m in model.modules()}
    out: dict[str, list[torch.Tensor]] = {}
    for mname, mod in model.named_modules():
        for attr, value in vars(mod).items():
            if attr in ("_parameters", "_buffers", "_modules"):
                continue
            items = [value] if isinstance(value, torch.Tensor) else [v for _, v in _items(value)]
            found: list[torch.Tensor] = []
            for item in items:
                if isinstance(item, nn.Module) and id(item) not in registered_modules:
                    found += [p for p in item.parameters() if p.requires_grad and id(p) not in registered]
                elif isinstance(item, torch.Tensor) and item.requires_grad and item.is_leaf \
                        and id(item) not in registered:
                    found.append(item)
            if found:
                out[f"{mname}.{attr}" if mname else attr] = found
    return out


def unregistered_leaf_ids(model: nn.Module) -> set[int]:
    """Ids of the trainable tensors that `registration_findings` reports (attributes, containers)."""
    registered = {id(p) for p in model.parameters()}
    out: set[int] = set()
    for _, mod in model.named_modules():
        for attr, value in vars(mod).items():
            if attr in ("_parameters", "_buffers", "_modules"):
                continue
            items = [value] if isinstance(value, torch.Tensor) else [v for _, v in _items(value)]
            for item in items:
                if isinstance(item, nn.Module):
                    out |= {id(p) for p in item.parameters() if p.requires_grad and id(p) not in registered}
                elif isinstance(item, torch.Tensor) and item.requires_grad and id(item) not in registered:
                    out.add(id(item))
    return out


def frozen_findings(model: nn.Module) -> list[Finding]:
    """One info per top-most module whose parameters are all frozen (requires_grad=False)."""
    out: list[Finding] = []
    covered: list[str] = []
    for mname, mod in model.named_modules():
        if any(mname == c or mname.startswith(c + ".") for c in covered if c) or ("" in covered):
            continue
        params = list(mod.parameters())
        if params and not any(p.requires_grad for p in params):
            covered.append(mname)
            out.append(_finding("gradient.frozen", Severity.INFO, mname, "frozen",
                                parameters=len(params), values=sum(p.numel() for p in params),
                                requires_grad=False))
    return out
