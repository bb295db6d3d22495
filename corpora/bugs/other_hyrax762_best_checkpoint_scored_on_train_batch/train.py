# Source: lincc-frameworks/hyrax, src/hyrax/pytorch_ignite.py (create_trainer, create_validator, fixup_engine/HYRAX_EPOCH_COMPLETED), src/hyrax/verbs/train.py, commit 5a4aea26b73da7925b69e3a5b91b08cf8eb32ab7
# Report: https://github.com/lincc-frameworks/hyrax/issues/762
# hyrax's training verb: a trainer engine runs model.train_batch over the training loader, a
# validator engine runs model.validate_batch after every training epoch, and two checkpoint
# handlers are attached to the trainer's end-of-epoch event: the latest checkpoint and a
# "best" checkpoint scored with -engine.state.output["loss"]. pytorch-ignite's Engine, Checkpoint
# and DiskSaver are replaced by minimal stand-ins with the same call pattern (ignite is not a
# dependency here); tensorboard/mlflow logging is removed. The model is a small autoencoder on
# synthetic 64-d "cutout" vectors with few training samples, so it overfits after a few epochs.
import os
import tempfile
from collections import defaultdict

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

HYRAX_EPOCH_COMPLETED = "HyraxEpochCompleted"
COMPLETED = "Completed"


class State:
    def __init__(self):
        self.epoch = 0
        self.output = None


class Engine:
    """Minimal stand-in for ignite.engine.Engine: process_function per batch, event handlers."""
    def __init__(self, process_function):
        self._process_function = process_function
        self._handlers = defaultdict(list)
        self.state = State()

    def add_event_handler(self, event, handler, *args):
        self._handlers[event].append((handler, args))

    def on(self, event):
        def decorator(f):
            self.add_event_handler(event, f)
            return f
        return decorator

    def fire_event(self, event):
        for handler, args in self._handlers[event]:
            handler(self, *args)

    def run(self, data, max_epochs=1):
        for _ in range(max_epochs):
            self.state.epoch += 1
            batches = list(data)
            for i, batch in enumerate(batches):
                self.state.output = self._process_function(self, batch)
                if i == len(batches) - 1:
                    self.fire_event(HYRAX_EPOCH_COMPLETED)
        self.fire_event(COMPLETED)
        return self.state


class Checkpoint:
    """Minimal stand-in for ignite.handlers.Checkpoint with DiskSaver, n_saved=1."""
    def __init__(self, to_save, dirname, global_step_transform, score_name=None, score_function=None,
                 filename_pattern=None):
        self.to_save, self.dirname = to_save, dirname
        self.global_step_transform = global_step_transform
        self.score_name, self.score_function = score_name, score_function
        self.best_score, self.last_checkpoint = None, None

    def __call__(self, engine):
        step = self.global_step_transform(engine)
        if self.score_function is not None:
            score = self.score_function(engine)
            if self.best_score is not None and score < self.best_score:
                return
            self.best_score = score
            name = f"checkpoint_{step}_{self.score_name}={score:.4f}.pt"
        else:
            name = f"checkpoint_epoch_{step}.pt"
        if self.last_checkpoint is not None and os.path.exists(self.last_checkpoint):
            os.remove(self.last_checkpoint)
        self.last_checkpoint = os.path.join(self.dirname, name)
        torch.save({k: v.state_dict() for k, v in self.to_save.items()}, self.last_checkpoint)


def global_step_from_engine(engine):
    return lambda _: engine.state.epoch


class CutoutAutoencoder(nn.Module):
    def __init__(self, dim=64, latent=8):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(dim, 128), nn.ReLU(), nn.Linear(128, latent))
        self.decoder = nn.Sequential(nn.Linear(latent, 128), nn.ReLU(), nn.Linear(128, dim))
        self.criterion = nn.MSELoss()
        self.optimizer = torch.optim.Adam(self.parameters(), lr=3e-3)
        self.scheduler = None

    def forward(self, x):
        return self.decoder(self.encoder(x))

    def train_batch(self, batch):
        x = batch[0]
        self.optimizer.zero_grad()
        loss = self.criterion(self(x), x)
        loss.backward()
        self.optimizer.step()
        return {"loss": loss.item()}

    def validate_batch(self, batch):
        x = batch[0]
        loss = self.criterion(self(x), x)
        return {"loss": loss.item()}


def create_trainer(model, results_directory):
    model.train()
    trainer = Engine(lambda engine, batch: model.train_batch(batch))

    to_save = {
        "model": model,
        "optimizer": model.optimizer,
    }

    latest_checkpoint = Checkpoint(
        to_save,
        results_directory,
        global_step_transform=global_step_from_engine(trainer),
        filename_pattern="{name}_epoch_{global_step}.{ext}",
    )

    def neg_loss_score(engine):
        return -engine.state.output["loss"]

    best_checkpoint = Checkpoint(
        to_save,
        results_directory,
        global_step_transform=global_step_from_engine(trainer),
        score_name="loss",
        score_function=neg_loss_score,
    )

    trainer.add_event_handler(HYRAX_EPOCH_COMPLETED, latest_checkpoint)
    trainer.add_event_handler(HYRAX_EPOCH_COMPLETED, best_checkpoint)
    trainer.best_checkpoint = best_checkpoint
    return trainer


def create_validator(model, validation_data_loader, trainer):
    validator = Engine(lambda engine, batch: model.validate_batch(batch))
    history = {}

    @trainer.on(HYRAX_EPOCH_COMPLETED)
    def run_validation(trainer):
        model.eval()
        with torch.no_grad():
            validator.state.epoch = 0
            validator.run(validation_data_loader)
        model.train()
        history[trainer.state.epoch] = validator.state.output["loss"]
        print(f"epoch {trainer.state.epoch}: last train batch loss {trainer.state.output['loss']:.4f} "
              f"validation loss {validator.state.output['loss']:.4f}")

    validator.history = history
    return validator


def make_cutouts(n, rng, dim=64):
    basis = np.random.RandomState(42).normal(0, 1, size=(4, dim))
    coeff = rng.normal(0, 1, size=(n, 4))
    return torch.from_numpy((coeff @ basis + rng.normal(0, 0.8, size=(n, dim))).astype(np.float32))


def main():
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    train_x, val_x = make_cutouts(96, rng), make_cutouts(256, rng)
    train_loader = DataLoader(TensorDataset(train_x), batch_size=16, shuffle=True)
    val_loader = DataLoader(TensorDataset(val_x), batch_size=256)
    model = CutoutAutoencoder()
    with tempfile.TemporaryDirectory() as results_directory:
        trainer = create_trainer(model, results_directory)
        validator = create_validator(model, val_loader, trainer)
        trainer.run(train_loader, max_epochs=30)
        best_path = trainer.best_checkpoint.last_checkpoint
        model.load_state_dict(torch.load(best_path)["model"])
        model.eval()
        with torch.no_grad():
            val_loss = model.criterion(model(val_x), val_x).item()
        best_epoch = min(validator.history, key=validator.history.get)
        print(f"best checkpoint file: {os.path.basename(best_path)} -> validation loss {val_loss:.4f}; "
              f"lowest validation loss seen: {validator.history[best_epoch]:.4f} at epoch {best_epoch}")


if __name__ == "__main__":
    main()
