"""Lightning classifier around a separate backbone module (save_hyperparameters(ignore=["backbone"])),
F.cross_entropy on the logits, Adam, validation and test loops run by the Trainer, then
trainer.predict.

Source: Lightning-AI/pytorch-lightning, examples/pytorch/basics/backbone_image_classifier.py,
commit 7f0c3436cd3f6ad3753125672024fc415cbcb414.
Reduced: the Backbone's two Linear layers at 64 -> 16 -> 10, random 8x8 images, 3 train batches,
1 val / test / predict batch.
"""

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

NEEDS = ("lightning",)


class Backbone(torch.nn.Module):
    def __init__(self, hidden_dim=16):
        super().__init__()
        self.l1 = torch.nn.Linear(8 * 8, hidden_dim)
        self.l2 = torch.nn.Linear(hidden_dim, 10)

    def forward(self, x):
        x = x.view(x.size(0), -1)
        x = torch.relu(self.l1(x))
        return torch.relu(self.l2(x))


def build():
    from lightning.pytorch import LightningModule

    from corpus._pl import trainer

    class LitClassifier(LightningModule):
        def __init__(self, backbone=None, learning_rate=0.0001):
            super().__init__()
            self.save_hyperparameters(ignore=["backbone"])
            self.backbone = backbone if backbone is not None else Backbone()

        def forward(self, x):
            return self.backbone(x)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = F.cross_entropy(self(x), y)
            self.log("train_loss", loss, on_epoch=True)
            return loss

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("valid_loss", F.cross_entropy(self(x), y), on_step=True)

        def test_step(self, batch, batch_idx):
            x, y = batch
            self.log("test_loss", F.cross_entropy(self(x), y))

        def predict_step(self, batch, batch_idx, dataloader_idx=None):
            x, _ = batch
            return self(x)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=self.hparams.learning_rate)

    torch.manual_seed(0)
    ds = TensorDataset(torch.rand(32, 1, 8, 8), torch.randint(0, 10, (32,)))
    model = LitClassifier(Backbone())

    def train():
        t = trainer(limit_test_batches=1, limit_predict_batches=1)
        t.fit(model, DataLoader(ds, batch_size=8), DataLoader(ds, batch_size=8))
        t.test(model, DataLoader(ds, batch_size=8))
        return t.predict(model, DataLoader(ds, batch_size=8))

    return [model], [], train


if __name__ == "__main__":
    build()[2]()
