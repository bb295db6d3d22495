# Source: allenai/rslearn, rslearn/train/callbacks/freeze_unfreeze.py (FreezeUnfreeze), rslearn/train/lightning_module.py (RslearnLightningModule: configure_optimizers, training_step, validation_step), commit 2d04b5b6fa8ba5717cf2db5d61d0b95b31cb16ab
# Report: https://github.com/allenai/rslearn/pull/199
# rslearn fine-tuning with the FreezeUnfreeze callback (Lightning BaseFinetuning): the encoder
# is frozen at the start of training and unfrozen at unfreeze_at_epoch with a lower lr
# (unfreeze_lr_factor), AdamW over the trainable parameters. A first job trains 4 epochs and
# saves last.ckpt; the job is then resumed from last.ckpt (ckpt_path) to finish 8 epochs.
# The satellite backbone is reduced to a small CNN, the decoder to a pooling + linear
# classification head, and the rslearn dataset to synthetic 4-band 16x16 patches whose class is
# set by an oriented texture; metrics are plain accuracy.
import logging
import os
import tempfile
import warnings

import lightning as L
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from lightning.pytorch.callbacks import BaseFinetuning, ModelCheckpoint
from torch.optim import AdamW
from torch.optim.optimizer import Optimizer
from torch.utils.data import DataLoader, TensorDataset


class FreezeUnfreeze(BaseFinetuning):
    """Freezes a module and optionally unfreezes it after a number of epochs."""

    def __init__(self, module_selector, unfreeze_at_epoch=None, unfreeze_lr_factor=1):
        super().__init__()
        self.module_selector = module_selector
        self.unfreeze_at_epoch = unfreeze_at_epoch
        self.unfreeze_lr_factor = unfreeze_lr_factor

    def _get_target_module(self, pl_module):
        target_module = pl_module
        for k in self.module_selector:
            if isinstance(k, int):
                target_module = target_module[k]
            else:
                target_module = getattr(target_module, k)
        return target_module

    def freeze_before_training(self, pl_module):
        print(f"freezing model at {self.module_selector}")
        self.freeze(self._get_target_module(pl_module))

    def finetune_function(self, pl_module, current_epoch: int, optimizer: Optimizer) -> None:
        if self.unfreeze_at_epoch is None:
            return
        if current_epoch != self.unfreeze_at_epoch:
            return
        print(f"unfreezing model at {self.module_selector} since we are on epoch {current_epoch}")
        self.unfreeze_and_add_param_group(
            modules=self._get_target_module(pl_module),
            optimizer=optimizer,
            initial_denom_lr=self.unfreeze_lr_factor,
        )


class SingleTaskModel(nn.Module):
    def __init__(self, num_classes=4):
        super().__init__()
        self.encoder = nn.ModuleList([nn.Sequential(
            nn.Conv2d(4, 16, 3, padding=1), nn.ReLU(),
            nn.Conv2d(16, 16, 3, padding=1), nn.ReLU())])
        self.decoder = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, num_classes))

    def forward(self, inputs, targets=None):
        features = self.encoder[0](inputs)
        logits = self.decoder(features)
        loss_dict = {}
        if targets is not None:
            loss_dict["cls"] = F.cross_entropy(logits, targets)
        return logits, loss_dict


class RslearnLightningModule(L.LightningModule):
    def __init__(self, model, lr=1e-3):
        super().__init__()
        self.model = model
        self.lr = lr
        self.schedulers = {}

    def configure_optimizers(self):
        params = [p for p in self.parameters() if p.requires_grad]
        optimizer = AdamW(params, lr=self.lr)
        return dict(optimizer=optimizer)

    def forward(self, *args, **kwargs):
        return self.model(*args, **kwargs)

    def on_train_epoch_start(self):
        n_trainable = sum(p.numel() for p in self.parameters() if p.requires_grad)
        groups = [len(g["params"]) for g in self.trainer.optimizers[0].param_groups]
        self._epoch_start_encoder = [p.detach().clone() for p in self.model.encoder.parameters()]
        print(f"epoch {self.current_epoch}: trainable params {n_trainable}, optimizer param groups {groups}")

    def training_step(self, batch, batch_idx):
        inputs, targets = batch
        _, loss_dict = self(inputs, targets)
        train_loss = sum(loss_dict.values())
        self.log("train_loss", train_loss, batch_size=len(inputs), on_step=False, on_epoch=True)
        return train_loss

    def validation_step(self, batch, batch_idx):
        inputs, targets = batch
        outputs, loss_dict = self(inputs, targets)
        self.log("val_loss", sum(loss_dict.values()), batch_size=len(inputs), on_step=False, on_epoch=True)
        self.log("val_accuracy", (outputs.argmax(1) == targets).float().mean(), batch_size=len(inputs),
                 on_step=False, on_epoch=True)

    def on_train_epoch_end(self):
        moved = max((p.detach() - p0).abs().max().item()
                    for p, p0 in zip(self.model.encoder.parameters(), self._epoch_start_encoder))
        m = self.trainer.callback_metrics
        print(f"  train_loss {m['train_loss']:.4f} val_loss {m['val_loss']:.4f} "
              f"val_accuracy {m['val_accuracy']:.3f} encoder max|dW| {moved:.2e}")


def make_patches(n, rng):
    yy, xx = np.mgrid[0:16, 0:16].astype(np.float32)
    x = rng.normal(0, 1.0, size=(n, 4, 16, 16)).astype(np.float32)
    y = rng.randint(0, 4, size=n)
    for i in range(n):
        ang = y[i] * np.pi / 4
        phase = rng.uniform(0, 2 * np.pi)
        wave = np.sin(1.3 * (np.cos(ang) * xx + np.sin(ang) * yy) + phase)
        x[i] += 0.45 * wave
    return TensorDataset(torch.from_numpy(x), torch.from_numpy(y).long())


def fit(max_epochs, ckpt_dir, ckpt_path=None):
    L.seed_everything(0, verbose=False)
    rng = np.random.RandomState(0)
    train_ds, val_ds = make_patches(384, rng), make_patches(128, rng)
    module = RslearnLightningModule(SingleTaskModel(), lr=1e-2)
    callbacks = [FreezeUnfreeze(module_selector=["model", "encoder", 0], unfreeze_at_epoch=2, unfreeze_lr_factor=3),
                 ModelCheckpoint(dirpath=ckpt_dir, save_last=True, save_top_k=0)]
    trainer = L.Trainer(max_epochs=max_epochs, accelerator="cpu", devices=1, logger=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=callbacks,
                        num_sanity_val_steps=0, deterministic=True)
    trainer.fit(module, DataLoader(train_ds, batch_size=32, shuffle=True),
                DataLoader(val_ds, batch_size=64), ckpt_path=ckpt_path)


if __name__ == "__main__":
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        print("-- job 1: epochs 0-3")
        fit(4, tmp)
        print("-- job 2: resumed from last.ckpt, epochs 4-7")
        fit(8, tmp, ckpt_path=os.path.join(tmp, "last.ckpt"))
