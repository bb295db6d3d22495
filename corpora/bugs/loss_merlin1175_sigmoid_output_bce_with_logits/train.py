# Source: NVIDIA-Merlin/models, merlin/models/torch/outputs/classification.py + merlin/models/torch/models/base.py, commit bb8b7bd87fac0984dee14814f475e19fea33a4f4
# Report: https://github.com/NVIDIA-Merlin/models/pull/1175
# Merlin Models (torch) click-through-rate model: an MLP over embedded categorical features
# followed by BinaryOutput (LazyLinear(1) + Sigmoid, default loss and torchmetrics binary
# metrics), trained through compute_loss(). Merlin's Block / schema machinery is reduced to
# nn.Sequential subclasses; the dataloader to synthetic click logs.
from typing import Optional, Sequence

import torch
from torch import nn
from torchmetrics import AUROC, Accuracy, Metric, Precision, Recall


class ModelOutput(nn.Module):
    def __init__(self, *module: nn.Module, loss: Optional[nn.Module] = None, metrics: Sequence[Metric] = ()):
        super().__init__()
        self.block = nn.Sequential(*module)
        self.loss = loss
        self.metrics = metrics

    def forward(self, inputs):
        return self.block(inputs)


class BinaryOutput(ModelOutput):
    """A prediction block for binary classification."""

    DEFAULT_LOSS_CLS = nn.BCEWithLogitsLoss
    DEFAULT_METRICS_CLS = (Accuracy, AUROC, Precision, Recall)

    def __init__(
        self,
        loss: Optional[nn.Module] = None,
        metrics: Sequence[Metric] = (),
    ):
        """Initializes a BinaryOutput object."""
        super().__init__(
            nn.LazyLinear(1),
            nn.Sigmoid(),
            loss=loss or self.DEFAULT_LOSS_CLS(),
            metrics=metrics or [m(task="binary") for m in self.DEFAULT_METRICS_CLS],
        )


def compute_loss(predictions, targets, model_outputs, compute_metrics=True):
    if len(model_outputs) < 1:
        raise RuntimeError("No model outputs found.")
    results = {"loss": torch.tensor(0.0)}
    for model_out in model_outputs:
        _targets = targets.view_as(predictions)
        results["loss"] = results["loss"] + model_out.loss(predictions, _targets) / len(model_outputs)
        if compute_metrics:
            for metric in model_out.metrics:
                metric_name = "binary_" + type(metric).__name__.lower().replace("binary", "")
                results[metric_name] = metric(predictions, _targets.int())
    return results


class CTRModel(nn.Module):
    def __init__(self, cardinalities, dim=16):
        super().__init__()
        self.embeddings = nn.ModuleList([nn.Embedding(c, dim) for c in cardinalities])
        self.mlp = nn.Sequential(nn.Linear(dim * len(cardinalities), 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU())
        self.output = BinaryOutput()

    def forward(self, x):
        emb = torch.cat([e(x[:, i]) for i, e in enumerate(self.embeddings)], 1)
        return self.output(self.mlp(emb))


def make_clicks(n, cardinalities, g):
    x = torch.stack([torch.randint(0, c, (n,), generator=g) for c in cardinalities], 1)
    w = [torch.randn(c, generator=torch.Generator().manual_seed(10 + i)) for i, c in enumerate(cardinalities)]
    logit = sum(w[i][x[:, i]] for i in range(len(cardinalities))) - 1.0
    y = (torch.rand(n, generator=g) < torch.sigmoid(2.0 * logit)).float().unsqueeze(1)
    return x, y


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    cards = [20, 50, 10, 30]
    x_train, y_train = make_clicks(8000, cards, g)
    x_val, y_val = make_clicks(2000, cards, g)
    model = CTRModel(cards)
    model(x_train[:2])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(5):
        model.train()
        perm = torch.randperm(len(x_train), generator=g)
        for i in range(0, len(x_train), 256):
            idx = perm[i:i + 256]
            predictions = model(x_train[idx])
            results = compute_loss(predictions, y_train[idx], [model.output], compute_metrics=False)
            optimizer.zero_grad()
            results["loss"].backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            preds = model(x_val)
            res = compute_loss(preds, y_val, [model.output])
            true_bce = nn.functional.binary_cross_entropy(preds, y_val).item()
        print(f"epoch {epoch} val loss {res['loss'].item():.4f} binary_auroc {res['binary_auroc'].item():.4f} "
              f"binary_accuracy {res['binary_accuracy'].item():.4f} log-loss of predicted probabilities {true_bce:.4f} "
              f"mean prediction {preds.mean().item():.3f} (click rate {y_val.mean().item():.3f})")


if __name__ == "__main__":
    main()
