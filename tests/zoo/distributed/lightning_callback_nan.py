# Lightning's DDP strategy under torchrun (gloo, CPU) with torchtriage's callback instead of
# `torchtriage run`: lightning_ddp_nan.py's module (rank 1's training_step makes a NaN at batch 2),
# with `callbacks=[TriageCallback(...)]`. argv: the JSON report path.
import sys

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

from lightning_ddp_nan import Classifier
from torchtriage.integrations.lightning import TriageCallback

if __name__ == "__main__":
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(48, 6), torch.randint(0, 3, (48,)))
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[TriageCallback(json=sys.argv[1])])
    trainer.fit(Classifier(), DataLoader(data, batch_size=8))
