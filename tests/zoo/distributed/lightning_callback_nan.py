# Lightning's DDP strategy under torchrun (gloo, CPU) with torchtriage's callback instead of
# `torchtriage run`: rank 1's training_step makes a NaN at batch 2; Lightning wraps the
# LightningModule in DDP and redirects DDP's forward to it. argv: the JSON report path.
import sys

import lightning as L
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from torchtriage.integrations.lightning import TriageCallback


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))

    def training_step(self, batch, batch_idx):
        x, y = batch
        if self.global_rank == 1 and batch_idx == 2:
            x = x.clone()
            x[0, 0] = float("nan")
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


if __name__ == "__main__":
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(48, 6), torch.randint(0, 3, (48,)))
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[TriageCallback(json=sys.argv[1])])
    trainer.fit(Classifier(), DataLoader(data, batch_size=8))
