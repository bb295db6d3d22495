# Source: georghess/neurad-studio, nerfstudio/engine/trainer.py (MetricTrackerConfig, MetricTracker, TrainerConfig, Trainer.train, _load_checkpoint, save_checkpoint, train_iteration, eval_iteration), commit e4d415bfb466ca10f51b56331e0737bfcf257222
# Report: https://github.com/georghess/neurad-studio/pull/74
# neurad-studio's nerfstudio Trainer: training iterations with per-group optimizers, periodic
# evaluation that feeds the checkpoint-saving and early-stopping MetricTrackers, a checkpoint every
# steps_per_save steps and at the end of training (only the latest kept), and resuming from the
# latest checkpoint in load_dir. The NeRF pipeline is replaced by a Fourier-feature MLP fitting a
# synthetic 32x32 RGB image (rays -> pixels), the viewer, writer and callbacks are removed, and the
# run is: train 300 iterations with the default trackers (no metric), then resume from load_dir for
# 100 more.
import functools
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Optional

import numpy as np
import torch
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)


def step_check(step, step_size, run_at_zero=False) -> bool:
    """Returns true based on current step and step interval."""
    if step_size == 0:
        return False
    return (run_at_zero or step != 0) and step % step_size == 0


@dataclass
class MetricTrackerConfig:
    """Configuration for the metric tracker, used for early stopping and checkpoint saving."""

    metric: Optional[str] = None
    """The metric to track for early stopping and checkpoint saving. None means no metric tracking."""
    higher_is_better: bool = True
    """Whether a higher value of the metric is better."""
    margin: float = 0.0
    """Margin for comparison (0.1 = 10%). Set to <0 to disable margin."""

    def setup(self):
        return MetricTracker(self)


class MetricTracker:
    """Class to track a metric to detect degradation."""

    def __init__(self, config: MetricTrackerConfig) -> None:
        self.config = config
        self.best, self.latest = None, None

    def did_degrade(self, fallback: bool = False) -> bool:
        if (self.latest is None) or (self.best is None) or self.config.margin < 0:
            return fallback  # we can't tell
        # apply margin to the best value (to be robust to noise in the metric)
        best = self.best * (1 + (-self.config.margin if self.config.higher_is_better else self.config.margin))
        return not self._is_new_better(best, self.latest)

    def reset_latest(self) -> None:
        self.latest = None

    def update(self, metrics: Dict[str, float]) -> None:
        self.latest = metrics.get(self.config.metric, None) if self.config.metric else None
        if isinstance(self.latest, torch.Tensor):
            self.latest = self.latest.item()
        if self.latest is None:
            return
        if self.best is None:
            self.best = self.latest
        elif self._is_new_better(self.best, self.latest):
            self.best = self.latest

    def _is_new_better(self, old: float, new: float) -> bool:
        """Check if new is better than old."""
        return new >= old if self.config.higher_is_better else new <= old


@dataclass
class TrainerConfig:
    """Configuration for training regimen"""

    steps_per_save: int = 100
    """Number of steps between saves."""
    steps_per_eval_all_images: int = 100
    """Number of steps between eval all images."""
    max_num_iterations: int = 300
    """Maximum number of iterations to run."""
    save_only_latest_checkpoint: bool = True
    """Whether to only save the latest checkpoint or all checkpoints."""
    checkpoint_saving_tracker: MetricTrackerConfig = field(default_factory=lambda: MetricTrackerConfig(margin=0.05))
    """Configuration for the metric tracker."""
    early_stopping_tracker: MetricTrackerConfig = field(default_factory=lambda: MetricTrackerConfig(margin=0.1))
    """Configuration for the metric tracker."""
    load_dir: Optional[Path] = None
    """Optionally specify a pre-trained model directory to load from."""
    load_step: Optional[int] = None
    """Optionally specify model step to load from; if none, will find most recent model in load_dir."""
    load_optimizer: bool = True


def make_image(n=32):
    ys, xs = torch.meshgrid(torch.linspace(-1, 1, n), torch.linspace(-1, 1, n), indexing="ij")
    r = 0.5 + 0.5 * torch.sin(5 * xs + 3 * ys)
    g = 0.5 + 0.5 * torch.cos(7 * xs * ys)
    b = (xs ** 2 + ys ** 2 < 0.5).float()
    return torch.stack([xs, ys], -1).reshape(-1, 2), torch.stack([r, g, b], -1).reshape(-1, 3)


class Pipeline(torch.nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.register_buffer("B", torch.randn(2, 64, generator=g) * 4.0)
        self.field = torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.ReLU(), torch.nn.Linear(128, 3))
        self.coords, self.rgb = make_image()
        self.gen = torch.Generator().manual_seed(5)

    def forward(self, x):
        z = x @ self.B
        return torch.sigmoid(self.field(torch.cat([torch.sin(z), torch.cos(z)], -1)))

    def get_train_loss_dict(self, step):
        idx = torch.randint(0, len(self.coords), (256,), generator=self.gen)
        pred = self(self.coords[idx])
        return None, {"rgb_loss": F.mse_loss(pred, self.rgb[idx])}, {}

    @torch.no_grad()
    def get_average_eval_image_metrics(self, step=None):
        mse = F.mse_loss(self(self.coords), self.rgb).item()
        return {"psnr": -10 * math.log10(mse)}

    def load_pipeline(self, loaded_state, step):
        self.load_state_dict(loaded_state)


class Trainer:
    def __init__(self, config: TrainerConfig, checkpoint_dir: Path) -> None:
        self.config = config
        self.checkpoint_dir = checkpoint_dir
        self.pipeline = Pipeline()
        self.optimizers = {"fields": torch.optim.Adam(self.pipeline.field.parameters(), lr=5e-3)}
        self.checkpoint_saving_tracker = config.checkpoint_saving_tracker.setup()
        self.early_stopping_tracker = config.early_stopping_tracker.setup()
        self._start_step = 0
        self._load_checkpoint()

    def _load_checkpoint(self) -> None:
        """Helper function to load pipeline and optimizer from prespecified checkpoint"""
        load_dir = self.config.load_dir
        if load_dir is not None:
            load_step = self.config.load_step
            if load_step is None:
                print("Loading latest Nerfstudio checkpoint from load_dir...")
                # NOTE: this is specific to the checkpoint name format
                load_step = sorted(int(x[x.find("-") + 1 : x.find(".")]) for x in os.listdir(load_dir))[-1]
            load_path: Path = load_dir / f"step-{load_step:09d}.ckpt"
            assert load_path.exists(), f"Checkpoint {load_path} does not exist"
            loaded_state = torch.load(load_path, map_location="cpu")
            self._start_step = loaded_state["step"] + 1
            # load the checkpoints for pipeline, optimizers, and gradient scalar
            self.pipeline.load_pipeline(loaded_state["pipeline"], loaded_state["step"])
            if self.config.load_optimizer:
                for k, v in loaded_state["optimizers"].items():
                    self.optimizers[k].load_state_dict(v)
            print(f"Done loading Nerfstudio checkpoint from {load_path.name}")
        else:
            print("No Nerfstudio checkpoint to load, so training from scratch.")

    def train(self) -> None:
        """Train the model."""
        num_iterations = self.config.max_num_iterations
        step = 0
        for step in range(self._start_step, self._start_step + num_iterations):
            loss, loss_dict, metrics_dict = self.train_iteration(step)

            self.eval_iteration(step)

            if self.early_stopping_tracker.did_degrade():
                print("Early stopping due to degradation")
                break

            if step_check(step, self.config.steps_per_save):
                self.save_checkpoint(step)

        # save checkpoint at the end of training
        self.save_checkpoint(step)
        print(f"Training Finished at step {step}: psnr {self.pipeline.get_average_eval_image_metrics()['psnr']:.2f}, "
              f"checkpoint directory: {sorted(os.listdir(self.checkpoint_dir))}")

    def save_checkpoint(self, step: int) -> None:
        """Save the model and optimizers

        Args:
            step: number of steps in training for given checkpoint
        """
        # possibly make the checkpoint directory
        if not self.checkpoint_dir.exists():
            self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        if self.checkpoint_saving_tracker.did_degrade(fallback=True):
            return
        self.checkpoint_saving_tracker.reset_latest()  # we only want to save the best once
        # save the checkpoint
        ckpt_path: Path = self.checkpoint_dir / f"step-{step:09d}.ckpt"
        torch.save(
            {
                "step": step,
                "pipeline": self.pipeline.state_dict(),
                "optimizers": {k: v.state_dict() for (k, v) in self.optimizers.items()},
            },
            ckpt_path,
        )
        # possibly delete old checkpoints
        if self.config.save_only_latest_checkpoint:
            # delete everything else in the checkpoint folder
            for f in self.checkpoint_dir.glob("*"):
                if f != ckpt_path:
                    f.unlink()

    def train_iteration(self, step: int):
        for opt in self.optimizers.values():
            opt.zero_grad()
        _, loss_dict, metrics_dict = self.pipeline.get_train_loss_dict(step=step)
        loss = functools.reduce(torch.add, loss_dict.values())
        loss.backward()
        for opt in self.optimizers.values():
            opt.step()
        return loss, loss_dict, metrics_dict

    def eval_iteration(self, step: int) -> None:
        # all eval images
        if step_check(step, self.config.steps_per_eval_all_images):
            metrics_dict = self.pipeline.get_average_eval_image_metrics(step=step)
            self.early_stopping_tracker.update(metrics_dict)
            self.checkpoint_saving_tracker.update(metrics_dict)
            print(f"step {step}: eval psnr {metrics_dict['psnr']:.2f}")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as out:
        ckpt_dir = Path(out) / "nerfstudio_models"
        Trainer(TrainerConfig(), ckpt_dir).train()
        print("resuming from the latest checkpoint")
        Trainer(TrainerConfig(max_num_iterations=100, load_dir=ckpt_dir), ckpt_dir).train()
