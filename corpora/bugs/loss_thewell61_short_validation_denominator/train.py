# Source: PolymathicAI/the_well, the_well/benchmark/trainer/training.py (Trainer.validation_loop, train_one_epoch, train, split_up_losses), commit 82a5991c96202f548f82a63f71e15b9aa6738c15
# Report: https://github.com/PolymathicAI/the_well/pull/61
# The Well benchmark trainer: a surrogate model predicts the next frame of a physical
# simulation; every epoch runs a "short" validation over at most short_validation_length
# batches and the final epoch runs the full validation; the loss per field is accumulated
# in loss_dict and the best checkpoint is chosen by the validation loss.
# The datasets (HDF5 simulations) are synthetic 2-field diffusion on a 16x16 periodic grid,
# the FNO / U-Net is a small conv net, wandb / videos / rollout validation are dropped.
import logging

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

logger = logging.getLogger(__name__)


class DiffusionDataset(Dataset):
    field_names = ["density", "temperature"]
    dataset_name = "diffusion_2d"

    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(n, 2, 16, 16, generator=g)
        for _ in range(3):
            x = self.step(x)
        self.x, self.y = x, self.step(x)

    @staticmethod
    def step(u):
        lap = u.roll(1, -1) + u.roll(-1, -1) + u.roll(1, -2) + u.roll(-1, -2) - 4 * u
        return u + 0.2 * lap

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_fields": self.x[i], "output_fields": self.y[i]}


class MSE(nn.Module):
    def forward(self, x, y, meta):
        # mean over space, keep batch and field dims
        return ((x - y) ** 2).mean(dim=(-2, -1))


class Trainer:
    def __init__(self, model, train_set, val_set, optimizer, loss_fn, epochs, val_frequency,
                 short_validation_length, lr_scheduler=None, device=torch.device("cpu")):
        self.model = model
        self.train_set, self.val_set = train_set, val_set
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        self.validation_suite = [loss_fn]
        self.max_epoch = epochs
        self.val_frequency = val_frequency
        self.short_validation_length = short_validation_length
        self.lr_scheduler = lr_scheduler
        self.device = device
        self.dset_metadata = val_set
        self.best_val_loss = None
        self.best_epoch = None

    def rollout_model(self, model, batch, train=True):
        return model(batch["input_fields"]), batch["output_fields"]

    def split_up_losses(self, loss_values, loss_name, dset_name, field_names):
        new_losses = {}
        for i, fname in enumerate(field_names):
            new_losses[f"{dset_name}/{fname}_{loss_name}_T=all"] = loss_values[i]
        new_losses[f"{dset_name}/full_{loss_name}_T=all"] = loss_values.mean()
        return new_losses

    @torch.inference_mode()
    def validation_loop(self, dataloader, valid_or_test="valid", full=False, epoch=0):
        """Run validation by looping over the dataloader."""
        self.model.eval()
        validation_loss = 0.0
        field_names = self.dset_metadata.field_names
        dset_name = self.dset_metadata.dataset_name
        loss_dict = {}
        count = 0
        denom = len(dataloader) if full else self.short_validation_length
        for i, batch in enumerate(dataloader):
            y_pred, y_ref = self.rollout_model(self.model, batch, train=False)
            assert y_ref.shape == y_pred.shape
            for loss_fn in self.validation_suite:
                # Mean over batch and time per field
                loss = loss_fn(y_pred, y_ref, self.dset_metadata)
                if not isinstance(loss, dict):
                    loss = {loss_fn.__class__.__name__: loss}
                for k, v in loss.items():
                    sub_loss = v.mean(0)
                    new_losses = self.split_up_losses(sub_loss, k, dset_name, field_names)
                    for loss_name, loss_value in new_losses.items():
                        loss_dict[loss_name] = (
                            loss_dict.get(loss_name, 0.0) + loss_value / denom
                        )
            count += 1
            if not full and count >= self.short_validation_length:
                break

        validation_loss = loss_dict[
            f"{dset_name}/full_{self.loss_fn.__class__.__name__}_T=all"
        ].item()
        loss_dict = {f"{valid_or_test}_{k}": v.item() for k, v in loss_dict.items()}
        return validation_loss, loss_dict

    def train_one_epoch(self, epoch, dataloader):
        self.model.train()
        epoch_loss = 0.0
        for i, batch in enumerate(dataloader):
            y_pred, y_ref = self.rollout_model(self.model, batch)
            loss = self.loss_fn(y_pred, y_ref, self.dset_metadata).mean()
            loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad()
            epoch_loss += loss.item() / len(dataloader)
        if self.lr_scheduler:
            self.lr_scheduler.step()
        return epoch_loss

    def train(self):
        train_dataloader = DataLoader(self.train_set, batch_size=8, shuffle=True,
                                      generator=torch.Generator().manual_seed(0))
        val_dataloder = DataLoader(self.val_set, batch_size=8)
        for epoch in range(1, self.max_epoch + 1):
            train_loss = self.train_one_epoch(epoch, train_dataloader)
            if epoch % self.val_frequency == 0 or (epoch == self.max_epoch):
                val_loss, val_loss_dict = self.validation_loop(
                    val_dataloder, full=epoch == self.max_epoch, epoch=epoch
                )
                print(f"Epoch {epoch}/{self.max_epoch}: train loss {train_loss:.5f} "
                      f"{'full' if epoch == self.max_epoch else 'short'} validation loss {val_loss:.5f}")
                if self.best_val_loss is None or val_loss < self.best_val_loss:
                    self.best_val_loss = val_loss
                    self.best_epoch = epoch
        print(f"best checkpoint: epoch {self.best_epoch} (val loss {self.best_val_loss:.5f})")


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(2, 32, 3, padding=1, padding_mode="circular"), nn.GELU(),
                          nn.Conv2d(32, 2, 3, padding=1, padding_mode="circular"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=10)
    trainer = Trainer(model, DiffusionDataset(256, 0), DiffusionDataset(40, 1), optimizer, MSE(),
                      epochs=10, val_frequency=1, short_validation_length=20, lr_scheduler=scheduler)
    trainer.train()


if __name__ == "__main__":
    main()
