# Source: NVIDIA/physicsnemo, physicsnemo/active_learning/loop.py (DefaultTrainingLoop) + physicsnemo/utils/capture.py (_StaticCapture, StaticCaptureTraining), commit 043f63bc70dd3d9a491d611b5e27d41af10647b6
# Report: https://github.com/NVIDIA/physicsnemo/issues/1911
# Active-learning training loop of PhysicsNeMo: DefaultTrainingLoop wraps the user's training
# step in StaticCaptureTraining (AMP autocast + GradScaler + optional CUDA graphs; the wrapper runs
# backward and steps the optimizer through its grad scaler), logs the minibatch loss, steps the
# LR scheduler per minibatch and validates every epoch. Reduced to the CPU code path (no CUDA
# graphs, scaler disabled, no autocast); the surrogate model is an MLP regressing a synthetic
# 2-D field; LaunchLogger, tqdm bars and checkpointing are replaced by prints.
import functools
import time
from contextlib import nullcontext

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)


class _StaticCapture:
    """CPU path of physicsnemo.utils.capture._StaticCapture (no CUDA graphs, scaler disabled)."""

    def __init__(self, model, optim=None, use_autocast=False, gradient_clip_norm=None):
        self.model = model
        self.optim = optim
        self.eval = False
        self.no_grad = False
        self.gradient_clip_norm = gradient_clip_norm
        self.cuda_graphs_enabled = False
        self.use_autocast = use_autocast
        self.amp_device = "cpu"
        self.amp_dtype = torch.bfloat16
        self.scaler = torch.amp.GradScaler("cuda", enabled=False)
        self.output = None
        self.iteration = 0

    def __call__(self, fn):
        self.function = fn

        @functools.wraps(fn)
        def decorated(*args, **kwds):
            """Training step decorator function"""
            with torch.no_grad() if self.no_grad else nullcontext():
                self._zero_grads()
                self.output = self._amp_forward(*args, **kwds)

                if not self.eval:
                    self.scaler.step(self.optim)
                    self.scaler.update()

            return self.output

        return decorated

    def _zero_grads(self):
        if self.no_grad:
            return
        try:
            self.optim.zero_grad(set_to_none=True)
        except Exception:
            if self.optim:
                self.optim.zero_grad()
            self.model.zero_grad(set_to_none=True)

    def _amp_forward(self, *args, **kwargs):
        with torch.autocast(self.amp_device, enabled=self.use_autocast, dtype=self.amp_dtype):
            output = self.function(*args, **kwargs)

        if not self.eval:
            self.scaler.scale(output).backward()
            if self.gradient_clip_norm is not None:
                self.scaler.unscale_(self.optim)
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.gradient_clip_norm)

        return output


class StaticCaptureTraining(_StaticCapture):
    pass


class StaticCaptureEvaluateNoGrad(_StaticCapture):
    def __init__(self, model, **kwargs):
        super().__init__(model, optim=None, **kwargs)
        self.eval = True
        self.no_grad = True


class DefaultTrainingLoop:
    def __init__(self, train_step_fn=None, validate_step_fn=None, enable_static_capture=True, **capture_kwargs):
        self.train_step_fn = train_step_fn
        self.validate_step_fn = validate_step_fn
        self.enable_static_capture = enable_static_capture
        self.capture_kwargs = capture_kwargs
        self.capture_functions = {}

    def _create_capture_functions(self, model, optimizer, train_step_fn=None, validate_step_fn=None):
        if not train_step_fn:
            train_step_fn = self.train_step_fn
        train_func_id = id(train_step_fn)
        if train_func_id not in self.capture_functions:
            train_step_fn = StaticCaptureTraining(model=model, optim=optimizer, **self.capture_kwargs)(train_step_fn)
            self.capture_functions[train_func_id] = train_step_fn
        else:
            train_step_fn = self.capture_functions[train_func_id]
        if not validate_step_fn:
            validate_step_fn = self.validate_step_fn
        if validate_step_fn:
            val_func_id = id(validate_step_fn)
            if val_func_id not in self.capture_functions:
                validate_step_fn = StaticCaptureEvaluateNoGrad(model=model, **self.capture_kwargs)(validate_step_fn)
                self.capture_functions[val_func_id] = validate_step_fn
            else:
                validate_step_fn = self.capture_functions[val_func_id]
        return train_step_fn, validate_step_fn

    def __call__(self, model, optimizer, train_dataloader, max_epochs, validation_dataloader=None,
                 train_step_fn=None, validate_step_fn=None, lr_scheduler=None):
        if self.enable_static_capture:
            train_step_fn, validate_step_fn = self._create_capture_functions(
                model, optimizer, train_step_fn, validate_step_fn
            )
        for epoch in range(1, max_epochs + 1):
            model.train()
            ########### TRAINING STEP LOOP ###########
            losses = []
            for batch in train_dataloader:
                model.zero_grad(set_to_none=True)
                loss = train_step_fn(model, batch)
                losses.append(loss.detach().item())
                # normally, static capture will call backward because of AMP
                if not self.enable_static_capture:
                    loss.backward()
                optimizer.step()
                if lr_scheduler:
                    lr_scheduler.step()
            ########### VALIDATION STEP LOOP ###########
            if validate_step_fn and validation_dataloader:
                model.eval()
                val = [validate_step_fn(model, batch).item() for batch in validation_dataloader]
                steps = max(s["step"] for s in optimizer.state.values()).item()
                print(f"epoch {epoch:2d} | train_loss {sum(losses) / len(losses):.5f} | "
                      f"val_mse {sum(val) / len(val):.5f} | minibatches {epoch * len(train_dataloader)} "
                      f"| optimizer steps {int(steps)}")


def field(x):
    return torch.sin(1.5 * x[:, :1]) * torch.cos(x[:, 1:]) + 0.5 * x[:, :1]


def training_step(model, batch):
    x, y = batch
    return nn.functional.mse_loss(model(x), y)


def validation_step(model, batch):
    x, y = batch
    return nn.functional.mse_loss(model(x), y)


def main():
    t0 = time.time()
    torch.manual_seed(0)
    x_train = torch.rand(1024, 2) * 4 - 2
    x_val = torch.rand(512, 2) * 4 - 2
    train_loader = DataLoader(TensorDataset(x_train, field(x_train)), batch_size=32, shuffle=True)
    val_loader = DataLoader(TensorDataset(x_val, field(x_val)), batch_size=256)

    model = nn.Sequential(nn.Linear(2, 64), nn.SiLU(), nn.Linear(64, 64), nn.SiLU(), nn.Linear(64, 1))
    epochs = 12
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    lr_scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs * len(train_loader))

    loop = DefaultTrainingLoop(training_step, validation_step, enable_static_capture=True)
    loop(model, optimizer, train_loader, epochs, validation_dataloader=val_loader, lr_scheduler=lr_scheduler)
    print(f"done in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
