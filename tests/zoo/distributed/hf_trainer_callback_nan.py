# The Hugging Face Trainer under torchrun on CPU (DDP, gloo) with torchtriage's callback instead of
# `torchtriage run`: sample 37 holds a NaN; the Trainer's sampler deals it to rank 1 at step 2.
# argv: output folder, JSON report path.
import datetime
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from transformers import Trainer, TrainingArguments

from torchtriage.integrations.hf import TriageTrainerCallback


class DS(torch.utils.data.Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(64, 6, generator=g)
        self.y = torch.randint(0, 3, (64,), generator=g)
        self.x[37, 2] = float("nan")  # one corrupt sample

    def __len__(self):
        return 64

    def __getitem__(self, i):
        return {"x": self.x[i], "labels": self.y[i]}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))

    def forward(self, x, labels=None):
        logits = self.net(x)
        return {"loss": nn.functional.cross_entropy(logits, labels), "logits": logits}


if __name__ == "__main__":
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    args = TrainingArguments(output_dir=sys.argv[1], per_device_train_batch_size=8, num_train_epochs=1,
                             use_cpu=True, report_to=[], save_strategy="no", logging_steps=100, ddp_backend="gloo",
                             disable_tqdm=True)
    trainer = Trainer(model=Net(), args=args, train_dataset=DS(), callbacks=[TriageTrainerCallback(json=sys.argv[2])])
    trainer.train()
