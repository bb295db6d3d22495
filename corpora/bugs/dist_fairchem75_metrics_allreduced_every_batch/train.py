# Report: https://github.com/facebookresearch/fairchem/pull/75
# Run: torchrun --nproc-per-node 2 train.py
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def all_reduce(data, average=False):
    tensor = torch.tensor(data) if not isinstance(data, torch.Tensor) else data
    dist.all_reduce(tensor)
    if average:
        tensor /= dist.get_world_size()
    return tensor.item() if not isinstance(data, torch.Tensor) else tensor


class Evaluator:
    def eval(self, prediction, target, prev_metrics={}):
        metrics = prev_metrics
        err = (prediction["energy"] - target["energy"]).abs()
        res = {"total": float(err.sum()), "numel": err.numel()}
        metrics = self.update("energy_mae", res, metrics)
        return metrics

    def update(self, key, stat, metrics):
        if key not in metrics:
            metrics[key] = {"metric": None, "total": 0, "numel": 0}
        if isinstance(stat, dict):
            metrics[key]["total"] += stat["total"]
            metrics[key]["numel"] += stat["numel"]
            metrics[key]["metric"] = metrics[key]["total"] / metrics[key]["numel"]
        elif isinstance(stat, float) or isinstance(stat, int):
            metrics[key]["total"] += stat
            metrics[key]["numel"] += 1
            metrics[key]["metric"] = metrics[key]["total"] / metrics[key]["numel"]
        return metrics


class EnergyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 32), nn.SiLU(), nn.Linear(32, 1))

    def forward(self, batch):
        return {"energy": self.net(batch["pos"]).squeeze(-1)}


def make_split(n, seed):
    g = torch.Generator().manual_seed(seed)
    pos = torch.randn(n, 8, generator=g)
    energy = pos.pow(2).sum(1) + 0.3 * torch.randn(n, generator=g)
    order = energy.argsort()
    return [{"pos": pos[order][i:i + 4], "energy": energy[order][i:i + 4]} for i in range(0, n, 4)]


class DistributedForcesTrainer:
    def __init__(self):
        self.rank = dist.get_rank()
        torch.manual_seed(0)
        self.model = DDP(EnergyModel())
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=3e-3)
        self.train_loader = make_split(256, seed=10 + self.rank)
        self.val_loader = make_split(48, seed=100 + self.rank)

    def train(self, epochs=5):
        for epoch in range(epochs):
            for batch in self.train_loader:
                out = self.model(batch)
                loss = (out["energy"] - batch["energy"]).pow(2).mean()
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()

    @torch.no_grad()
    def validate(self):
        self.model.eval()
        evaluator, metrics = Evaluator(), {}
        for i, batch in enumerate(self.val_loader):
            out = self.model(batch)
            loss = (out["energy"] - batch["energy"]).pow(2).mean()
            metrics = evaluator.eval(out, batch, prev_metrics=metrics)
            metrics = evaluator.update("loss", loss.item(), metrics)
            aggregated_metrics = {}
            for k in metrics:
                aggregated_metrics[k] = {
                    "total": all_reduce(metrics[k]["total"], average=False),
                    "numel": all_reduce(metrics[k]["numel"], average=False),
                }
                aggregated_metrics[k]["metric"] = aggregated_metrics[k]["total"] / aggregated_metrics[k]["numel"]
            metrics = aggregated_metrics
        return metrics


def main():
    dist.init_process_group("gloo")
    trainer = DistributedForcesTrainer()
    trainer.train()
    metrics = trainer.validate()
    with torch.no_grad():
        errs = torch.cat([(trainer.model(b)["energy"] - b["energy"]).abs() for b in trainer.val_loader])
    true_total = all_reduce(float(errs.sum())), all_reduce(errs.numel())
    if trainer.rank == 0:
        print(f"val energy_mae {metrics['energy_mae']['metric']:.4f} over numel {metrics['energy_mae']['numel']}")
        print(f"val loss {metrics['loss']['metric']:.4f}")
        print(f"recomputed: energy_mae {true_total[0] / true_total[1]:.4f} over {true_total[1]} samples")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
