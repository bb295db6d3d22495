# Source: facebookresearch/ClassyVision, classy_vision/dataset/classy_dataset.py, classy_vision/tasks/classification_task.py, commit 34388fc14bd473b3a373561bdaab9f1f6d375600
# Report: https://github.com/facebookresearch/ClassyVision/pull/118
import logging

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def get_world_size():
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def get_rank():
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


class ClassyDataset:
    def __init__(self, split, batchsize_per_replica, shuffle, transform, num_samples):
        self.split = split
        self.batchsize_per_replica = batchsize_per_replica
        self.shuffle = shuffle
        self.transform = transform
        self.num_samples = num_samples
        self.dataset = None

    def __getitem__(self, idx):
        assert idx >= 0 and idx < len(self.dataset), "Provided idx is outside of dataset range"
        sample = self.dataset[idx]
        if self.transform is None:
            return sample
        return self.transform(sample)

    def __len__(self):
        return len(self.dataset) if self.num_samples is None else self.num_samples

    def _get_sampler(self):
        world_size = get_world_size()
        rank = get_rank()
        return DistributedSampler(
            self, num_replicas=world_size, rank=rank, shuffle=self.shuffle
        )

    def iterator(self, *args, **kwargs):
        return DataLoader(
            self,
            batch_size=self.batchsize_per_replica,
            num_workers=kwargs.get("num_workers", 0),
            pin_memory=kwargs.get("pin_memory", False),
            sampler=self._get_sampler(),
        )

    def get_batchsize_per_replica(self):
        return self.batchsize_per_replica

    def get_global_batchsize(self):
        return self.get_batchsize_per_replica() * get_world_size()


class SyntheticImageDataset(ClassyDataset):
    def __init__(self, split, batchsize_per_replica, shuffle, num_samples, num_classes=4, seed=0):
        super().__init__(split, batchsize_per_replica, shuffle, None, None)
        centers = torch.randn(num_classes, 3, 8, 8, generator=torch.Generator().manual_seed(1234))
        g = torch.Generator().manual_seed(seed)
        targets = torch.arange(num_samples) % num_classes
        images = centers[targets] + 2.5 * torch.randn(num_samples, 3, 8, 8, generator=g)
        self.dataset = [{"input": images[i], "target": targets[i]} for i in range(num_samples)]


class ClassificationTask:
    def __init__(self, num_epochs, datasets, model, loss, optimizer):
        self.num_epochs = num_epochs
        self.datasets = datasets
        self.base_model = model
        self.loss = loss
        self.optimizer = optimizer
        self.phase_idx = -1
        self.train_phase_idx = -1
        self.train = True
        self.losses = []
        self.data_iterator = None

    @property
    def phase_type(self):
        return "train" if self.train else "test"

    def _build_phases(self):
        phases = [{"train": True} for _ in range(self.num_epochs)]
        final_phases = []
        for phase in phases:
            final_phases.append(phase)
            final_phases.append({"train": False})
        return final_phases

    def build_dataloader(self, split, num_workers, pin_memory, **kwargs):
        return self.datasets[split].iterator(num_workers=num_workers, pin_memory=pin_memory, **kwargs)

    def build_dataloaders(self, num_workers, pin_memory, **kwargs):
        return {split: self.build_dataloader(split, num_workers=num_workers, pin_memory=pin_memory, **kwargs)
                for split in self.datasets.keys()}

    def prepare(self, num_dataloader_workers=0, pin_memory=False):
        self.phases = self._build_phases()
        self.dataloaders = self.build_dataloaders(num_workers=num_dataloader_workers, pin_memory=pin_memory)

    def train_step(self):
        sample = next(self.data_iterator)
        if self.first_targets is None:
            self.first_targets = sample["target"][:12].tolist()
        context = torch.enable_grad() if self.train else torch.no_grad()
        with context:
            output = self.base_model(sample["input"])
            local_loss = self.loss(output, sample["target"])
            self.losses.append(local_loss.item() * sample["target"].size(0))
            self.correct += (output.argmax(1) == sample["target"]).sum().item()
            self.seen += sample["target"].size(0)
        if self.train:
            self.optimizer.zero_grad()
            local_loss.backward()
            self.optimizer.step()

    def advance_phase(self):
        self.losses = []
        self.correct = self.seen = 0
        self.first_targets = None
        self.phase_idx += 1
        phase = self.phases[self.phase_idx]
        self.train = True if phase["train"] else False
        if self.train:
            self.train_phase_idx += 1
        self._recreate_data_loader_from_dataset()
        self.data_iterator = iter(self.dataloaders[self.phase_type])
        self.base_model.train(phase["train"])

    def done_training(self):
        return self.phase_idx + 1 >= len(self.phases)

    def _recreate_data_loader_from_dataset(self, phase_type=None):
        if phase_type is None:
            phase_type = self.phase_type
        logging.info("Recreating data loader for new phase")
        if phase_type == "test":
            current_phase_id = 0
        else:
            current_phase_id = max(self.train_phase_idx, 0)
        self.dataloaders[phase_type] = self.build_dataloader(
            split=phase_type, num_workers=0, pin_memory=False, current_phase_id=current_phase_id,
        )


def train(task):
    task.prepare()
    while not task.done_training():
        task.advance_phase()
        while True:
            try:
                task.train_step()
            except StopIteration:
                break
        if task.train:
            print(f"train phase {task.train_phase_idx}: loss {sum(task.losses) / task.seen:.4f}, "
                  f"first batch targets {task.first_targets}")
        else:
            print(f"  test accuracy {task.correct / task.seen:.3f}")


def main():
    torch.manual_seed(0)
    datasets = {
        "train": SyntheticImageDataset("train", batchsize_per_replica=32, shuffle=True, num_samples=480, seed=0),
        "test": SyntheticImageDataset("test", batchsize_per_replica=64, shuffle=False, num_samples=256, seed=1),
    }
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(),
                          nn.Linear(64, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    task = ClassificationTask(6, datasets, model, nn.CrossEntropyLoss(), optimizer)
    train(task)


if __name__ == "__main__":
    main()
