# Source: Lightning-AI/pytorch-lightning, src/lightning/fabric/utilities/distributed.py (_DatasetSamplerWrapper, DistributedSamplerWrapper), src/lightning/fabric/utilities/data.py (_set_sampler_epoch), commit 027455bcd9433f201b1136f68d54b1a07588abe3
# Report: https://github.com/Lightning-AI/pytorch-lightning/issues/21454
from collections.abc import Sized
from typing import Any, Iterable, Iterator, Optional, Union

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler, TensorDataset


class _DatasetSamplerWrapper(Dataset):
    """Dataset to create indexes from `Sampler` or `Iterable`"""

    def __init__(self, sampler: Union[Sampler, Iterable]) -> None:
        if not isinstance(sampler, Sized):
            raise TypeError("sampler without __len__")
        self._sampler = sampler
        # defer materializing an iterator until it is necessary
        self._sampler_list: Optional[list[Any]] = None

    def __getitem__(self, index: int) -> Any:
        if self._sampler_list is None:
            self._sampler_list = list(self._sampler)
        return self._sampler_list[index]

    def __len__(self) -> int:
        return len(self._sampler)

    def reset(self) -> None:
        """Reset the sampler list in order to get new sampling."""
        self._sampler_list = list(self._sampler)


class DistributedSamplerWrapper(DistributedSampler):
    """Wrapper over ``Sampler`` for distributed training."""

    def __init__(self, sampler: Union[Sampler, Iterable], *args: Any, **kwargs: Any) -> None:
        super().__init__(_DatasetSamplerWrapper(sampler), *args, **kwargs)

    def __iter__(self) -> Iterator:
        self.dataset.reset()
        return (self.dataset[index] for index in super().__iter__())


def _set_sampler_epoch(dataloader: object, epoch: int) -> None:
    objects: dict = {}
    if (sampler := getattr(dataloader, "sampler", None)) is not None:
        objects[id(sampler)] = sampler
    if (batch_sampler := getattr(dataloader, "batch_sampler", None)) is not None and (
        sampler := getattr(batch_sampler, "sampler", None)
    ) is not None:
        objects[id(sampler)] = sampler
    for obj in objects.values():
        set_epoch = getattr(obj, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)


class BalancedEpochSampler(Sampler):
    """User sampler: oversamples the rare class and reshuffles deterministically from seed + epoch."""

    def __init__(self, labels, seed=0):
        self.labels = labels
        self.seed = seed
        self.epoch = 0
        pos = torch.nonzero(labels == 1).flatten()
        neg = torch.nonzero(labels == 0).flatten()
        self.pool = torch.cat([neg, pos.repeat(len(neg) // len(pos))])

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed + self.epoch)
        return iter(self.pool[torch.randperm(len(self.pool), generator=g)].tolist())

    def __len__(self):
        return len(self.pool)


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(480, 10, generator=g)
    y = (x[:, 0] + 0.5 * x[:, 1] > 1.3).long()
    dataset = TensorDataset(x, y)
    sampler = BalancedEpochSampler(y, seed=42)
    # what the Trainer does under DDP with use_distributed_sampler=True: wrap the user's sampler (rank 0 of 2)
    dist_sampler = DistributedSamplerWrapper(sampler, num_replicas=2, rank=0, shuffle=False)
    loader = DataLoader(dataset, batch_size=32, sampler=dist_sampler)

    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    seen = set()
    for epoch in range(5):
        _set_sampler_epoch(loader, epoch)
        first = None
        total = 0.0
        for xb, yb in loader:
            if first is None:
                first = xb[:, 0][:6]
            loss = loss_fn(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
        seen.update(list(iter(dist_sampler)))
        print(f"epoch {epoch}: wrapper epoch {dist_sampler.epoch}, user sampler epoch {sampler.epoch}, "
              f"loss {total / len(loader):.4f}, first batch x[:,0] {[round(v, 2) for v in first.tolist()]}, "
              f"distinct samples seen by rank 0 so far {len(seen)}")


if __name__ == "__main__":
    main()
