# Source: roboflow/rf-detr, src/rfdetr/training/coco_map.py (merge_distributed_state) and the evaluation callbacks, develop @ 6b91a48e
# Report: https://github.com/roboflow/rf-detr/issues/1507
# Run: torchrun --nproc-per-node 2 train.py
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class BoxDataset(Dataset):
    """Tiny stand-in for a COCO split: one object per image, class + box regression."""

    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, 3, (n,), generator=g)
        self.boxes = torch.rand(n, 4, generator=g)
        protos = torch.randn(3, 16, generator=torch.Generator().manual_seed(123))
        self.images = protos[self.labels] + 1.5 * torch.randn(n, 16, generator=g)
        self.images[:, :4] += self.boxes

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {"image": self.images[i], "labels": self.labels[i], "boxes": self.boxes[i], "image_id": i}


class OnePassMeanPrecision:
    """Per-image hit records accumulated on each rank, merged across ranks at the end."""

    def __init__(self):
        self.records = []

    def update(self, preds, targets):
        for p, t, img_id in zip(preds, targets["labels"], targets["image_id"]):
            self.records.append((int(img_id), int(p == t)))

    def merge_distributed_state(self):
        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, self.records)
        merged = []
        for records in gathered:
            merged.extend(records)
        return merged

    def compute(self):
        merged = self.merge_distributed_state()
        return sum(hit for _, hit in merged) / len(merged), len(merged)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    train_ds, valid_ds = BoxDataset(200, seed=1), BoxDataset(21, seed=2)
    train_loader = DataLoader(train_ds, batch_size=20, sampler=DistributedSampler(train_ds, shuffle=True, seed=0))
    valid_loader = DataLoader(valid_ds, batch_size=4, sampler=DistributedSampler(valid_ds, shuffle=False))
    model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 3)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for epoch in range(3):
        train_loader.sampler.set_epoch(epoch)
        for batch in train_loader:
            loss = F.cross_entropy(model(batch["image"]), batch["labels"])
            opt.zero_grad()
            loss.backward()
            opt.step()
    metric = OnePassMeanPrecision()
    model.eval()
    with torch.no_grad():
        for batch in valid_loader:
            metric.update(model(batch["image"]).argmax(1), batch)
    precision, n_images = metric.compute()
    print(f"[rank {rank}] merge_distributed_state: local images={len(metric.records)} merged images={n_images}")
    if rank == 0:
        with torch.no_grad():
            single = (model.module(valid_ds.images).argmax(1) == valid_ds.labels).float().mean().item()
        print(f"valid split: {len(valid_ds)} images | distributed precision {precision:.4f} over {n_images} images | "
              f"single-process precision {single:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
