"""Lightning autoencoder: encoder / decoder Sequentials, F.mse_loss(x, self(x)) in a shared
_common_step logged with self.log, Adam from configure_optimizers, train + validation loops run by
the Trainer (which switches eval() / no_grad for validation itself).

Source: Lightning-AI/pytorch-lightning, examples/pytorch/basics/autoencoder.py, commit 7f0c3436cd3f6ad3753125672024fc415cbcb414.
Reduced: 8x8 inputs, hidden 16, random tensors instead of MNIST, 3 train batches, 1 val batch.

Mutation: per-batch standardization `(x - x.mean(0)) / x.std(0)` added to `_prepare_batch`; the images' border pixels are always 0 (as in MNIST), so 0 / 0 = NaN.
Expected: error numerical.nonfinite_data (0 / 0 in aten::div), at the standardization line in `_prepare_batch`.
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

NEEDS = ("lightning",)


def build():
    from lightning.pytorch import LightningModule

    from corpus._pl import trainer

    class LitAutoEncoder(LightningModule):
        def __init__(self, hidden_dim: int = 16, learning_rate=10e-3):
            super().__init__()
            self.save_hyperparameters()
            self.encoder = nn.Sequential(nn.Linear(8 * 8, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, 3))
            self.decoder = nn.Sequential(nn.Linear(3, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, 8 * 8))

        def forward(self, x):
            return self.decoder(self.encoder(x))

        def training_step(self, batch, batch_idx):
            return self._common_step(batch, batch_idx, "train")

        def validation_step(self, batch, batch_idx):
            self._common_step(batch, batch_idx, "val")

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=self.hparams.learning_rate)

        def _prepare_batch(self, batch):
            x, _ = batch
            x = x.view(x.size(0), -1)
            return (x - x.mean(0)) / x.std(0)  # <- bug

        def _common_step(self, batch, batch_idx, stage):
            x = self._prepare_batch(batch)
            loss = F.mse_loss(x, self(x))
            self.log(f"{stage}_loss", loss, on_step=True)
            return loss

    torch.manual_seed(42)
    images = torch.zeros(32, 1, 8, 8)
    images[:, :, 1:-1, 1:-1] = torch.rand(32, 1, 6, 6)  # MNIST-like: an empty border
    ds = TensorDataset(images, torch.zeros(32))
    model = LitAutoEncoder()

    def train():
        trainer().fit(model, DataLoader(ds, batch_size=8), DataLoader(ds, batch_size=8))

    return [model], [], train


if __name__ == "__main__":
    build()[2]()
