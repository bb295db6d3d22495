# Source: daikichiba9511/my-kaggle-template, src/exp/exp000/train.py (train_one_epoch, valid_one_epoch, main), src/exp/exp000/models.py (get_model), src/engine.py (step), commit 65bba39d48481c95771619ff66ef3df767227b1e
# Report: https://github.com/daikichiba9511/my-kaggle-template/pull/16
# Kaggle training template: a model and its timm ModelEmaV3 copy, AdamW + cosine schedule with
# warmup stepped per batch, engine.step (backward, clip, optimizer step, EMA update, scheduler
# step), per-epoch validation of the online model, and the EMA module saved as the fold's model.
# timm's ModelEmaV3 is inlined (the parts used here), polars / wandb / tqdm / AMP are removed,
# the CSV is replaced by a synthetic tabular regression, 2 folds instead of 5.
import copy
import math

import numpy as np
import torch
import torch.nn as nn
import torch.utils.data as torch_data


class ModelEmaV3(nn.Module):
    """timm.utils.model_ema.ModelEmaV3 (decay, update_after_step, warmup, lerp update of the state_dict)."""

    def __init__(self, model, decay=0.9999, min_decay=0.0, update_after_step=0, use_warmup=False,
                 warmup_gamma=1.0, warmup_power=2 / 3):
        super().__init__()
        self.module = copy.deepcopy(model)
        self.module.eval()
        self.decay = decay
        self.min_decay = min_decay
        self.update_after_step = update_after_step
        self.use_warmup = use_warmup
        self.warmup_gamma = warmup_gamma
        self.warmup_power = warmup_power

    def get_decay(self, step=None):
        if step is None:
            return self.decay
        step = max(0, step - self.update_after_step - 1)
        if step <= 0:
            return 0.0
        if self.use_warmup:
            decay = 1 - (1 + step / self.warmup_gamma) ** -self.warmup_power
            decay = max(min(decay, self.decay), self.min_decay)
        else:
            decay = self.decay
        return decay

    @torch.no_grad()
    def update(self, model, step=None):
        decay = self.get_decay(step)
        for ema_v, model_v in zip(self.module.state_dict().values(), model.state_dict().values()):
            if ema_v.is_floating_point():
                ema_v.lerp_(model_v, weight=1. - decay)
            else:
                ema_v.copy_(model_v)

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)


class CustomModel(nn.Module):
    def __init__(self, in_features=16, hidden=64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(in_features, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(),
                                 nn.Linear(hidden, 1))

    def forward(self, x):
        return self.net(x).squeeze(-1)


def get_model(model_name, model_params):
    if model_name == "SimpleNN":
        model = CustomModel(**model_params)
        ema_model = ModelEmaV3(model, decay=0.9998)
        return model, ema_model
    raise ValueError(f"Unknown model name: {model_name}")


def get_cosine_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps, num_cycles=0.5, last_epoch=-1):
    def lr_lambda(current_step):
        if current_step < num_warmup_steps:
            return float(current_step) / float(max(1, num_warmup_steps))
        progress = float(current_step - num_warmup_steps) / float(max(1, num_training_steps - num_warmup_steps))
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress)))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda, last_epoch)


class AverageMeter:
    def __init__(self, name):
        self.name, self.sum, self.count, self.avg = name, 0.0, 0, 0.0

    def update(self, val, n=1):
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def step(step, model, optimizer, loss, max_norm, ema_model=None, scheduler=None, grad_accum_steps=1):
    """engine.step without the GradScaler branch."""
    norm = torch.tensor(0.0)
    loss.backward()
    if step % grad_accum_steps == 0:
        norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm=max_norm)
        optimizer.step()
        if ema_model is not None:
            ema_model.update(model)
        if scheduler is not None:
            scheduler.step()
        optimizer.zero_grad()
    return norm


def train_one_epoch(epoch, model, ema_model, optimizer, scheduler, criterion, loader, max_norm=1000.0,
                    grad_accum_steps=1):
    lr = scheduler.get_last_lr()[0]
    model = model.train()
    loss_meter = AverageMeter("train/loss")
    for batch_idx, batch in enumerate(loader):
        _sample_id, x, y = batch
        output = model(x)
        y_pred = output
        loss = criterion(y_pred, y)

        # --- Update
        grad_norm = step(
            step=batch_idx,
            model=model,
            optimizer=optimizer,
            loss=loss,
            max_norm=max_norm,
            ema_model=ema_model,
            scheduler=scheduler,
            grad_accum_steps=grad_accum_steps,
        )
        loss_meter.update(loss.detach().cpu().item())
    return loss_meter.avg, lr


def score(y_true, y_pred):
    return float(np.sqrt(np.mean((y_true - y_pred) ** 2)))


def valid_one_epoch(model, loader, criterion):
    model = model.eval()
    loss_meter = AverageMeter("valid/loss")
    ys, preds = [], []
    for batch_idx, batch in enumerate(loader):
        sample_id, x, y = batch
        with torch.inference_mode():
            output = model(x)
        y_pred = output
        loss = criterion(y_pred.detach().cpu(), y)
        loss_meter.update(loss.item())
        ys.append(y.numpy())
        preds.append(y_pred.numpy())
    valid_score = score(np.concatenate(ys), np.concatenate(preds))
    return loss_meter.avg, valid_score


def make_data(n=1280, d=16, seed=42):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    w = rng.normal(size=d).astype(np.float32)
    y = (x @ w / 2 + 0.5 * np.tanh(x[:, 0] * x[:, 1]) + rng.normal(scale=0.1, size=n)).astype(np.float32)
    return torch.arange(n), torch.from_numpy(x), torch.from_numpy(y)


def main(seed=42):
    cfg = {"train_batch_size": 32, "train_n_epochs": 10, "lr": 1e-3, "weight_decay": 1e-2, "num_warmup_steps": 1,
           "n_folds": 2, "train_max_norm": 1000.0, "train_grad_accum_steps": 1}
    torch.manual_seed(seed)
    sample_id, x, y = make_data(seed=seed)
    folds = np.arange(len(y)) % cfg["n_folds"]
    for fold in range(cfg["n_folds"]):
        tr, va = folds != fold, folds == fold
        train_loader = torch_data.DataLoader(torch_data.TensorDataset(sample_id[tr], x[tr], y[tr]),
                                             batch_size=cfg["train_batch_size"], shuffle=True)
        valid_loader = torch_data.DataLoader(torch_data.TensorDataset(sample_id[va], x[va], y[va]),
                                             batch_size=cfg["train_batch_size"])
        model, ema_model = get_model("SimpleNN", {})
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"], eps=1e-8)
        scheduler = get_cosine_schedule_with_warmup(optimizer, num_warmup_steps=cfg["num_warmup_steps"],
                                                    num_training_steps=len(train_loader) * cfg["train_n_epochs"])
        criterion = nn.MSELoss(reduction="mean")
        for epoch in range(cfg["train_n_epochs"]):
            train_loss_avg, lr = train_one_epoch(epoch=epoch, model=model, ema_model=ema_model, optimizer=optimizer,
                                                 scheduler=scheduler, criterion=criterion, loader=train_loader,
                                                 max_norm=cfg["train_max_norm"],
                                                 grad_accum_steps=cfg["train_grad_accum_steps"])
            valid_loss_avg, valid_score = valid_one_epoch(model=model, loader=valid_loader, criterion=criterion)
            if epoch % 3 == 0 or epoch == cfg["train_n_epochs"] - 1:
                print(f"fold {fold} epoch {epoch}: train/loss {train_loss_avg:.4f} lr {lr:.2e} "
                      f"valid/loss {valid_loss_avg:.4f} valid/score {valid_score:.4f}")

        # -- Save Results
        model_state = copy.deepcopy(ema_model.module.state_dict())
        saved = CustomModel()
        saved.load_state_dict(model_state)
        _, saved_score = valid_one_epoch(model=saved, loader=valid_loader, criterion=criterion)
        print(f"fold {fold}: saved last_model_{fold} valid/score {saved_score:.4f}")


if __name__ == "__main__":
    main()
