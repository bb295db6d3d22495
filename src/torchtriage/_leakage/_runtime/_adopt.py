"""Splits made before the session, taken up when their loaders run.

`watch(model, opt)` wraps a loop whose data was split already: the `random_split` (or the
hand-made `Subset`) ran before the session, so the `Subset.__init__` wrapper never saw it. Its
Subsets still reach the session through the DataLoaders that iterate them. At a loader's first
batch, a Subset that was not seen being made is taken up as a split of the dataset it was drawn
from: its indices as one part, the rest of the dataset as the other (a `random_split`'s parts
cover the dataset; a hand-made Subset leaves out what no part holds, which the rest then
stands for). A later Subset of the same dataset equal to a part is that part; any other (a
slice of the training part kept for a quick evaluation, the third part of a three-way split) is
left alone: taking up never redraws a split nor makes a part held out that the user trains on.

The split's line is read from the user's source (`_built_at.split_line`): a `random_split`
whose literal lengths hold the part's size, in the files of the user's code on the stack at the
session's start and now (the loop's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ..._built_at import split_line
from ..._frames import user_files_on_stack
from ._patches import subset_rows

if TYPE_CHECKING:
    from ._checker import LeakageWatch


def adopt(watch: LeakageWatch, dataset: Any, files: list[str]) -> None:
    """Take up every Subset on `dataset`'s chain that the session did not see being made."""
    from torch.utils.data import Subset

    chain = []
    for _ in range(16):
        if not isinstance(dataset, Subset):
            break
        chain.append(dataset)
        dataset = dataset.dataset
    for subset in reversed(chain):  # the split of the dataset itself first, then splits of its parts
        if subset in watch.patches.made or subset in watch.patches.adopted:
            continue
        watch.patches.adopted.add(subset)
        _take_up(watch, subset, files)


def _take_up(watch: LeakageWatch, subset: Any, files: list[str]) -> None:
    base_obj, rows, idx = subset_rows(subset.dataset, subset.indices)
    base = watch.base_for(base_obj, rows)
    if base is None or not idx.numel():
        return
    idx = idx.cpu()
    if any(_same(part, idx) for d in base.draws for part in d.parts):
        return  # a part of a split known already (its sibling was taken up first)
    if base.draws:
        return  # another split of this dataset is known: this Subset is no part of it, left alone
    covered = torch.zeros(base.n, dtype=torch.bool)
    covered[idx] = True
    rest = torch.nonzero(~covered).reshape(-1)
    parts = [idx, rest] if rest.numel() else [idx]
    _observe(watch, base_obj, rows, parts, _line(idx, files))


def _observe(watch: LeakageWatch, base_obj: Any, rows: Any, parts: list[torch.Tensor], frame: Any) -> None:
    if len(parts) < 2:
        return
    kind = "random_split" if frame is not None and "random_split" in frame.source else "Subset"
    draw = watch.observe(base_obj, rows, parts, frame, kind)
    if draw is not None:
        draw.taken_up = True


def _line(idx: torch.Tensor, files: list[str]) -> Any:
    return split_line([int(idx.numel())], [*files, *user_files_on_stack(3)])


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.numel() == b.numel() and bool(torch.equal(torch.sort(a).values, torch.sort(b).values))
