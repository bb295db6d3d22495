# The Hugging Face Trainer under torchrun on CPU (DDP, gloo) with torchtriage's callback instead of
# `torchtriage run`: hf_trainer_ddp.py's model and data, but sample 37 holds a NaN; the Trainer's
# sampler deals it to rank 1 at step 2. argv: output folder, JSON report path.
import datetime
import sys

import torch.distributed as dist
from transformers import Trainer, TrainingArguments

from hf_trainer_ddp import DS, Net
from torchtriage.integrations.hf import TriageTrainerCallback


class CorruptDS(DS):
    def __init__(self):
        super().__init__()
        self.x[37, 2] = float("nan")  # one corrupt sample


if __name__ == "__main__":
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    args = TrainingArguments(output_dir=sys.argv[1], per_device_train_batch_size=8, num_train_epochs=1,
                             use_cpu=True, report_to=[], save_strategy="no", logging_steps=100, ddp_backend="gloo",
                             disable_tqdm=True)
    trainer = Trainer(model=Net(), args=args, train_dataset=CorruptDS(),
                      callbacks=[TriageTrainerCallback(json=sys.argv[2])])
    trainer.train()
