"""Where splits and fits are seen: wrappers installed through `Session.patch` (restored on
exit, on exceptions too). They call the original first, return its result unchanged, and only
then record (a recording error warns once and never reaches the user's code).

* ``torch.utils.data.Subset.__init__``: `random_split` and hand-made Subsets;
* ``torch.randperm`` called from the user's code: while such a permutation is young (until
  the next forward of a watched model) a pass-through TorchFunctionMode (`_IndexWatch`, pushed
  only when no mode but torchtriage's own is active) notes tensors indexed with a slice of it —
  ``perm = torch.randperm(n); X[perm[:k]], X[perm[k:]]`` is a split of X. (Patching
  ``Tensor.__getitem__`` instead would give tensors a sequence slot and change what
  ``torch.tensor([t0, t1])`` does.)
* scikit-learn (patched when it is imported, by a finder on ``sys.meta_path`` removed at the
  end): every splitter's ``split`` (KFold family, ShuffleSplit family, ``train_test_split``
  through its ShuffleSplit), and ``fit`` / ``fit_transform`` / ``transform`` of the scalers,
  encoders, vectorizers, imputer and PCA.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import sys
import threading
import weakref
from types import FrameType
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from ..._frames import is_user_file, trims_errors, user_frame_from_stack
from ..._modestack import push_mode, remove_mode

if TYPE_CHECKING:
    from ._checker import LeakageWatch

SPLIT_MODULE = "sklearn.model_selection._split"
PREPROCESSORS: dict[str, tuple[str, ...]] = {
    "sklearn.preprocessing._data": ("StandardScaler", "MinMaxScaler", "MaxAbsScaler", "RobustScaler",
                                    "QuantileTransformer", "PowerTransformer"),
    "sklearn.preprocessing._encoders": ("OneHotEncoder", "OrdinalEncoder"),
    "sklearn.feature_extraction.text": ("CountVectorizer", "TfidfVectorizer"),
    "sklearn.impute._base": ("SimpleImputer",),
    "sklearn.decomposition._pca": ("PCA",),
}
MAX_DATA_CELLS = 1 << 26  # a dataset's `.data` hashed at split time only below this size
_state = threading.local()


def _inside() -> int:
    return getattr(_state, "depth", 0)


class _Depth:
    def __enter__(self) -> None:
        _state.depth = _inside() + 1

    def __exit__(self, *exc: Any) -> None:
        _state.depth = _inside() - 1


def subset_rows(dataset: Any, indices: Any) -> tuple[Any, Any, torch.Tensor]:
    """A Subset's dataset followed down to the one a split was drawn from: (that dataset, its
    rows to hash or None when known by index only, the indices into it)."""
    from torch.utils.data import Subset, TensorDataset

    idx = torch.as_tensor(indices, dtype=torch.int64).reshape(-1)
    while isinstance(dataset, Subset):
        idx = torch.as_tensor(dataset.indices, dtype=torch.int64).reshape(-1)[idx]
        dataset = dataset.dataset
    if isinstance(dataset, TensorDataset) and dataset.tensors:
        rows: Any = dataset.tensors[0]
    else:
        rows = getattr(dataset, "data", None)
        if not hasattr(rows, "shape") or len(rows) != len(dataset) or int(np.prod(rows.shape)) > MAX_DATA_CELLS:
            # Rows without content to hash (a list of samples, files read on access) or too
            # many to hash (an image set's raw pixels): known by index, through the loaders.
            rows = None
    return dataset, rows, idx


class Patches:
    def __init__(self, session: Any, watch: LeakageWatch) -> None:
        self.session = session
        self.watch = watch
        self.done: set[str] = set()
        self.finder: _Finder | None = None
        self.perms: dict[int, tuple[Any, Any, dict[int, tuple[Any, list[torch.Tensor]]]]] = {}
        self.mode: _IndexWatch | None = None
        self.made: weakref.WeakSet[Any] = weakref.WeakSet()  # Subsets made during the session
        self.adopted: weakref.WeakSet[Any] = weakref.WeakSet()  # made before it, taken up (`_adopt`)

    def leave_mode(self) -> None:
        """Take the index watch off the torch-function mode stack (modes pushed above it stay)."""
        mode, self.mode = self.mode, None
        if mode is None:
            return
        mode.active = False
        remove_mode(mode)

    def guarded(self, where: str, fn: Any, *args: Any, **kwargs: Any) -> None:
        try:
            fn(*args, **kwargs)
        except Exception as e:  # our bug must never reach the user's code
            self.session.internal_error(f"leakage.{where}", e)

    # ---------------------------------------------------------------- torch
    def install_torch(self) -> None:
        from torch.utils.data import Subset

        original = Subset.__init__
        patches = self

        @functools.wraps(original)
        def __init__(subset: Any, dataset: Any, indices: Any) -> None:
            original(subset, dataset, indices)
            patches.made.add(subset)  # (seen being made: never taken up again at its loader)
            f = sys._getframe(1)
            kind = "random_split" if "random_split" in (f.f_code.co_name, f.f_back and f.f_back.f_code.co_name) \
                else "Subset"  # (a list comprehension is its own frame before Python 3.12)
            patches.guarded("subset", patches.on_subset, dataset, indices, kind)

        self.session.patch(Subset, "__init__", __init__)
        original_randperm = torch.randperm

        @functools.wraps(original_randperm)
        def randperm(*args: Any, **kwargs: Any) -> Any:
            out = original_randperm(*args, **kwargs)
            if is_user_file(sys._getframe(1).f_code.co_filename):
                patches.guarded("randperm", patches.on_randperm, out)
            return out

        self.session.patch(torch, "randperm", randperm)

    def on_subset(self, dataset: Any, indices: Any, kind: str) -> None:
        base, rows, idx = subset_rows(dataset, indices)
        self.watch.extend_subset(base, rows, idx, user_frame_from_stack(), kind)

    def on_randperm(self, perm: Any) -> None:
        if not isinstance(perm, torch.Tensor) or perm.dim() != 1 or perm.numel() < 2:
            return
        if self.mode is None:
            if any(not type(m).__module__.startswith("torchtriage.")
                   for m in torch.overrides._get_current_function_mode_stack()):
                return  # inside another mode's block (torch.device(...), a user mode): not ours to nest
            self.mode = _IndexWatch(self)
            push_mode(self.mode)
        self.perms[id(perm)] = (weakref.ref(perm), user_frame_from_stack(), {})

    def on_index(self, t: Any, index: torch.Tensor) -> None:
        if index.dim() != 1 or index.dtype != torch.int64 or t.dim() < 2:
            return
        perm = index._base if index._base is not None else index
        rec = self.perms.get(id(perm))
        if rec is None or rec[0]() is not perm or t.shape[0] != perm.numel() or index.numel() == perm.numel():
            return
        parts = rec[2].setdefault(id(t), (weakref.ref(t), []))[1]
        if not any(p is index for p in parts):
            parts.append(index)

    def settle(self) -> None:
        """At a forward: the young permutations' index splits become draws: 2 or 3 slices of
        one permutation that index the same tensor and cover at least 90% of it (mini-batches
        cover a few slices at a time, and are not a split)."""
        if not self.perms:
            return
        perms, self.perms = self.perms, {}
        self.leave_mode()
        for ref, frame, tensors in perms.values():
            for tref, parts in tensors.values():
                t = tref()
                covered = sum(p.numel() for p in parts)
                perm = ref()
                if t is not None and perm is not None and 2 <= len(parts) <= 3 and covered >= 0.9 * perm.numel():
                    self.guarded("randperm", self.watch.observe, t, t, parts, frame, "randperm")

    # ---------------------------------------------------------------- scikit-learn
    def install_sklearn(self) -> None:
        for name in (SPLIT_MODULE, *PREPROCESSORS):
            if name in sys.modules:
                self.patch_module(name)
        if len(self.done) < 1 + len(PREPROCESSORS):
            self.finder = _Finder(self)
            sys.meta_path.insert(0, self.finder)

    def patch_module(self, name: str) -> None:
        if name in self.done or name not in sys.modules:
            return
        self.done.add(name)
        module = sys.modules[name]
        if name == SPLIT_MODULE:
            bases = tuple(getattr(module, n) for n in ("BaseCrossValidator", "BaseShuffleSplit", "_RepeatedSplits")
                          if hasattr(module, n))
            for obj in list(vars(module).values()):
                if isinstance(obj, type) and issubclass(obj, bases) and "split" in vars(obj):
                    self.session.patch(obj, "split", self._wrap_split(vars(obj)["split"]))
            return
        for cls_name in PREPROCESSORS[name]:
            cls = getattr(module, cls_name, None)
            if cls is None:
                continue
            for method in ("fit", "fit_transform", "transform"):
                if method in vars(cls):
                    self.session.patch(cls, method, self._wrap_fit(vars(cls)[method], method))

    def _wrap_split(self, original: Any) -> Any:
        patches = self

        @functools.wraps(original)
        def split(cv: Any, *args: Any, **kwargs: Any) -> Any:
            if _inside():
                return original(cv, *args, **kwargs)
            f: FrameType | None = sys._getframe(1)
            for _ in range(4):  # through a mixin's `split` that calls super().split()
                if f is None or f.f_code.co_name != "split":
                    break
                f = f.f_back
            caller = f.f_code.co_name if f is not None else ""
            with _Depth():
                gen = original(cv, *args, **kwargs)
            X = args[0] if args else kwargs.get("X")
            return patches.folds(gen, X, "train_test_split" if caller == "train_test_split" else type(cv).__name__,
                                  caller == "train_test_split")

        return split

    def folds(self, gen: Any, X: Any, kind: str, single: bool) -> Any:
        family = 0 if single else self.watch.new_family()
        while True:
            with _Depth():
                try:
                    item = next(gen)
                except StopIteration:
                    return
            if X is not None:
                self.guarded("split", self.watch.observe, X, X, [item[0], item[1]], user_frame_from_stack(),
                             kind, train=0, family=family)
            yield item

    def _wrap_fit(self, original: Any, method: str) -> Any:
        patches = self

        @functools.wraps(original)
        def wrapped(est: Any, X: Any, *args: Any, **kwargs: Any) -> Any:
            if _inside():
                return original(est, X, *args, **kwargs)
            with _Depth():
                out = original(est, X, *args, **kwargs)
            if method == "transform":
                patches.guarded("transform", patches.watch.observe_transform, est, X, out)
            else:
                patches.guarded("fit", patches.watch.observe_fit, est, X,
                                out if method == "fit_transform" else None, user_frame_from_stack())
            return out

        return wrapped

    def close(self) -> None:
        self.leave_mode()
        if self.finder is not None:
            if self.finder in sys.meta_path:
                sys.meta_path.remove(self.finder)
            self.finder = None
        self.perms.clear()


class _IndexWatch(TorchFunctionMode):
    """On the torch-function mode stack only while a permutation from the user's code is young
    (pushed at `randperm`, popped at the next forward): notes ``t[index]`` where the index is a
    slice of that permutation. Never changes a result."""

    def __init__(self, patches: Patches) -> None:
        super().__init__()
        self.patches = patches
        self.active = True

    @trims_errors
    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if self.active and func is _GETITEM and len(args) == 2 and isinstance(args[1], torch.Tensor):
            self.patches.guarded("index", self.patches.on_index, args[0], args[1])
        return out


_GETITEM = torch.Tensor.__getitem__


class _Finder(importlib.abc.MetaPathFinder):
    """Patches a scikit-learn module right after it is first imported (the script usually
    imports scikit-learn after `torchtriage run` started the session)."""

    def __init__(self, patches: Patches) -> None:
        self.patches = weakref.ref(patches)

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        p = self.patches()
        if p is None or fullname not in (SPLIT_MODULE, *PREPROCESSORS) or fullname in p.done:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module: Any) -> None:
            original(module)
            q = self.patches()
            if q is not None:
                q.guarded("import", q.patch_module, fullname)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install(session: Any, watch: LeakageWatch) -> Patches:
    patches = Patches(session, watch)
    patches.install_torch()
    patches.install_sklearn()
    return patches
