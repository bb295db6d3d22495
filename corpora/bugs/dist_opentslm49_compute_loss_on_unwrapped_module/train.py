# Source: OpenTSLM/OpenTSLM, curriculum_learning.py, commit 7ee10b5e1df71f02279d784a502a5f7d36a588ec
# Report: https://github.com/OpenTSLM/OpenTSLM/pull/49
# Run: torchrun --nproc-per-node 2 train.py
# Curriculum trainer of a time-series language model, one stage (multiple-choice time-series QA):
# the model encodes each sample's time series and scores the answer options; batches are lists of
# sample dicts, sharded over the ranks by a DistributedSampler. Synthetic series: the answer is the
# pattern class (sine / square / ramp / noise) of the series.
import math

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.nn.utils import clip_grad_norm_
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

GRAD_CLIP_NORM = 1.0


class TimeSeriesQA(nn.Module):
    def __init__(self, num_answers=4, d_model=32):
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv1d(1, d_model, 5, padding=2), nn.GELU(),
                                     nn.Conv1d(d_model, d_model, 5, padding=2), nn.GELU())
        self.answer_head = nn.Linear(d_model, num_answers)

    def forward(self, series):
        return self.answer_head(self.encoder(series.unsqueeze(1)).mean(-1))

    def compute_loss(self, batch):
        series = torch.stack([s["time_series"] for s in batch])
        answers = torch.tensor([s["answer"] for s in batch])
        return F.cross_entropy(self(series), answers)


def make_samples(n, length=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = torch.linspace(0, 4 * math.pi, length)
    samples = []
    for i in range(n):
        answer = int(torch.randint(0, 4, (1,), generator=g))
        phase = float(torch.rand(1, generator=g)) * 6.28
        base = [torch.sin(t + phase), torch.sign(torch.sin(t + phase)), (t + phase) % 3 - 1.5,
                torch.zeros(length)][answer]
        samples.append({"time_series": base + 0.8 * torch.randn(length, generator=g), "answer": answer})
    return samples


class CurriculumTrainer:
    def __init__(self):
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.model = DDP(TimeSeriesQA())

    def _get_model(self):
        """Get the underlying model (unwrapped from DDP if needed)."""
        if hasattr(self.model, "module"):
            return self.model.module
        return self.model

    def _train_stage(self, train_dataset, num_epochs=4, batch_size=16, lr=3e-3):
        train_loader = DataLoader(train_dataset, batch_size=batch_size,
                                  sampler=DistributedSampler(train_dataset, shuffle=True),
                                  collate_fn=lambda b: b)
        optimizer = torch.optim.AdamW(self._get_model().parameters(), lr=lr)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
        for epoch in range(1, num_epochs + 1):
            if hasattr(train_loader.sampler, "set_epoch"):
                train_loader.sampler.set_epoch(epoch)

            # Training
            self.model.train()
            running_loss = 0.0
            for i, batch in enumerate(train_loader):
                optimizer.zero_grad()
                loss = self._get_model().compute_loss(batch)
                loss.backward()

                clip_grad_norm_(self._get_model().parameters(), GRAD_CLIP_NORM)

                optimizer.step()
                scheduler.step()

                running_loss += loss.item()

            avg_train_loss = running_loss / len(train_loader)
            w = torch.cat([p.detach().flatten() for p in self._get_model().parameters()])
            other = w.clone()
            dist.broadcast(other, src=1)
            if self.rank == 0:
                print(f"Epoch {epoch} - train loss: {avg_train_loss:.4f} "
                      f"max |model rank0 - rank1| {(w - other).abs().max().item():.6f}")


def main():
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    trainer = CurriculumTrainer()
    trainer._train_stage(make_samples(384))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
