# Source: YehLi/xmodaler, xmodaler/engine/defaults.py (DefaultTrainer), xmodaler/engine/train_loop.py (TrainerBase), xmodaler/engine/hooks.py (LRScheduler, PeriodicCheckpointer), xmodaler/lr_scheduler/noam_lr.py, commit 0f2e7f00bf5d9c97ef2b5f11ea94526acd3f871b
# Report: https://github.com/YehLi/xmodaler/issues/15
# X-modaler's detectron2-style trainer: hooks step a per-iteration Noam scheduler and save
# periodic checkpoints of the trainer state; a second run
# resumes from the last checkpoint. The COCO caption features are replaced by synthetic
# region features whose caption tokens are a function of the features, the Transformer
# captioner by a small attention-pooled GRU decoder.
import logging
import os
import tempfile
import weakref

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class NoamLR(torch.optim.lr_scheduler._LRScheduler):
    def __init__(self, optimizer, model_size, factor, warmup, last_epoch=-1):
        self.warmup = warmup
        self.factor = factor
        self.model_size = model_size
        super(NoamLR, self).__init__(optimizer, last_epoch)

    def get_lr(self):
        return [
            self.factor *
            (self.model_size ** (-0.5) *
             min((self.last_epoch + 1) ** (-0.5), (self.last_epoch + 1) * self.warmup ** (-1.5)))
            for base_lr in self.base_lrs
        ]


class HookBase:
    def before_train(self):
        pass

    def after_train(self):
        pass

    def before_step(self):
        pass

    def after_step(self):
        pass

    def state_dict(self):
        return {}


class LRScheduler(HookBase):
    def before_train(self):
        self._optimizer = self.trainer.optimizer
        self._scheduler = self.trainer.scheduler

    def after_step(self):
        lr = self._optimizer.param_groups[0]["lr"]
        self.trainer.lrs.append(lr)
        self._scheduler.step()


class PeriodicCheckpointer(HookBase):
    def __init__(self, checkpointer, period):
        self.checkpointer = checkpointer
        self.period = period

    def after_step(self):
        iteration = self.trainer.iter
        if (iteration + 1) % self.period == 0:
            self.checkpointer.save("model_Iter_{:07d}".format(iteration), iteration=iteration)


class Checkpointer:
    def __init__(self, model, save_dir, trainer):
        self.model = model
        self.save_dir = save_dir
        self.trainer = trainer

    def save(self, name, **kwargs):
        data = {"model": self.model.state_dict(), "trainer": self.trainer.state_dict()}
        data.update(kwargs)
        path = os.path.join(self.save_dir, name + ".pth")
        torch.save(data, path)
        with open(os.path.join(self.save_dir, "last_checkpoint"), "w") as f:
            f.write(name + ".pth")

    def has_checkpoint(self):
        return os.path.exists(os.path.join(self.save_dir, "last_checkpoint"))

    def resume_or_load(self, path, resume=True):
        if resume and self.has_checkpoint():
            with open(os.path.join(self.save_dir, "last_checkpoint")) as f:
                path = os.path.join(self.save_dir, f.read().strip())
        if not path:
            return {}
        checkpoint = torch.load(path, weights_only=False)
        self.model.load_state_dict(checkpoint.pop("model"))
        self.trainer.load_state_dict(checkpoint.pop("trainer"))
        return checkpoint


class TrainerBase:
    def __init__(self):
        self._hooks = []
        self.iter = 0
        self.start_iter = 0

    def register_hooks(self, hooks):
        for h in hooks:
            h.trainer = weakref.proxy(self)
        self._hooks.extend(hooks)

    def train(self, start_iter, max_iter):
        logging.getLogger(__name__).info("Starting training from iteration {}".format(start_iter))
        self.iter = self.start_iter = start_iter
        self.max_iter = max_iter
        for h in self._hooks:
            h.before_train()
        for self.iter in range(start_iter, max_iter):
            for h in self._hooks:
                h.before_step()
            self.run_step()
            for h in self._hooks:
                h.after_step()
        self.iter += 1
        for h in self._hooks:
            h.after_train()

    def state_dict(self):
        return {"iteration": self.iter}

    def load_state_dict(self, state_dict):
        self.iter = state_dict["iteration"]


class CaptionModel(nn.Module):
    def __init__(self, feat_dim=16, hidden=64, vocab=20):
        super().__init__()
        self.att_embed = nn.Sequential(nn.Linear(feat_dim, hidden), nn.ReLU())
        self.att = nn.Linear(hidden, 1)
        self.word_embed = nn.Embedding(vocab, hidden)
        self.gru = nn.GRUCell(2 * hidden, hidden)
        self.logit = nn.Linear(hidden, vocab)

    def preprocess_batch(self, data):
        feats, tokens = data
        return {"ATT_FEATS": feats, "G_TOKENS_IDS": tokens[:, :-1], "G_TARGET_IDS": tokens[:, 1:]}

    def forward(self, batched_inputs):
        att = self.att_embed(batched_inputs["ATT_FEATS"])
        w = F.softmax(self.att(att), dim=1)
        ctx = (w * att).sum(1)
        h = ctx
        logits = []
        for t in range(batched_inputs["G_TOKENS_IDS"].size(1)):
            x = torch.cat([self.word_embed(batched_inputs["G_TOKENS_IDS"][:, t]), ctx], dim=-1)
            h = self.gru(x, h)
            logits.append(self.logit(h))
        return {"G_LOGITS": torch.stack(logits, 1), "G_TARGET_IDS": batched_inputs["G_TARGET_IDS"]}


class LabelSmoothing(nn.Module):
    def __init__(self, smoothing=0.1):
        super().__init__()
        self.smoothing = smoothing

    def forward(self, outputs_dict):
        logits = outputs_dict["G_LOGITS"].reshape(-1, outputs_dict["G_LOGITS"].size(-1))
        targets = outputs_dict["G_TARGET_IDS"].reshape(-1)
        logp = F.log_softmax(logits, dim=-1)
        nll = -logp.gather(1, targets[:, None]).squeeze(1)
        smooth = -logp.mean(-1)
        loss = ((1.0 - self.smoothing) * nll + self.smoothing * smooth).mean()
        return {"LabelSmoothing(G) loss": loss}


def build_train_loader(cfg):
    rng = np.random.RandomState(0)
    feats = rng.randn(320, 6, 16).astype(np.float32)
    proj = rng.randn(16, 19).astype(np.float32)
    first = (feats.mean(1) @ proj).argmax(1) + 1
    tokens = np.zeros((320, 8), dtype=np.int64)
    for k in range(1, 8):
        tokens[:, k] = (first + 3 * (k - 1)) % 19 + 1
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.from_numpy(feats), torch.from_numpy(tokens)),
                      batch_size=32, shuffle=True, generator=g)


class DefaultTrainer(TrainerBase):
    def __init__(self, cfg):
        super().__init__()
        torch.manual_seed(cfg["SEED"])
        model = CaptionModel()
        self.optimizer = torch.optim.Adam(model.parameters(), lr=cfg["BASE_LR"], betas=(0.9, 0.999), eps=1e-8)
        self.train_data_loader = build_train_loader(cfg)
        self.iters_per_epoch = len(self.train_data_loader)
        self._train_data_loader_iter = iter(self.train_data_loader)
        self.losses = [LabelSmoothing()]
        self.scheduler = NoamLR(self.optimizer, model_size=cfg["MODEL_SIZE"], factor=cfg["FACTOR"],
                                warmup=cfg["WARMUP"])
        self.model = model
        self.model.train()
        self.checkpointer = Checkpointer(self.model, cfg["OUTPUT_DIR"], trainer=weakref.proxy(self))
        self.cfg = cfg
        self.start_iter = 0
        self.max_iter = cfg["EPOCH"] * self.iters_per_epoch
        self.lrs = []
        self.loss_log = []
        self.register_hooks([LRScheduler(),
                             PeriodicCheckpointer(self.checkpointer, cfg["CHECKPOINT_PERIOD"] * self.iters_per_epoch)])

    def resume_or_load(self, resume=True):
        self.checkpointer.resume_or_load(self.cfg["WEIGHTS"], resume=resume)
        if resume and self.checkpointer.has_checkpoint():
            self.start_iter = self.iter + 1

    def train(self):
        super().train(self.start_iter, self.max_iter)

    def state_dict(self):
        ret = super().state_dict()
        ret["optimizer"] = self.optimizer.state_dict()
        return ret

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)
        self.optimizer.load_state_dict(state_dict["optimizer"])

    def run_step(self):
        assert self.model.training, "[SimpleTrainer] model was changed to eval mode!"
        try:
            data = next(self._train_data_loader_iter)
        except StopIteration:
            self._train_data_loader_iter = iter(self.train_data_loader)
            data = next(self._train_data_loader_iter)

        data = self.model.preprocess_batch(data)
        outputs_dict = self.model(data)

        losses_dict = {}
        for loss in self.losses:
            loss_dict = loss(outputs_dict)
            losses_dict.update(loss_dict)
        losses = sum(losses_dict.values())

        self.optimizer.zero_grad()
        losses.backward()
        torch.nn.utils.clip_grad_value_(self.model.parameters(), 0.1)
        self.optimizer.step()
        self.loss_log.append(losses.item())


def report(trainer, first_epoch):
    ipe = trainer.iters_per_epoch
    n_epochs = len(trainer.lrs) // ipe
    for k in range(n_epochs):
        lrs = trainer.lrs[k * ipe:(k + 1) * ipe]
        losses = trainer.loss_log[k * ipe:(k + 1) * ipe]
        print("epoch %d: lr first %.2e last %.2e, loss %.4f" % (
            first_epoch + k, lrs[0], lrs[-1], sum(losses) / len(losses)))


def main():
    out_dir = tempfile.mkdtemp()
    cfg = {"SEED": 0, "BASE_LR": 0.0005, "MODEL_SIZE": 64, "FACTOR": 0.2, "WARMUP": 40,
           "EPOCH": 4, "CHECKPOINT_PERIOD": 1, "OUTPUT_DIR": out_dir, "WEIGHTS": ""}

    # first run, stopped after 4 of the 8 planned epochs
    trainer = DefaultTrainer(cfg)
    trainer.resume_or_load(resume=False)
    trainer.train()
    report(trainer, 1)

    # the run is restarted with --resume and trains to the end of the schedule
    cfg = dict(cfg, EPOCH=8)
    trainer = DefaultTrainer(cfg)
    trainer.resume_or_load(resume=True)
    print("resumed at iteration %d, scheduler last_epoch %d" % (trainer.start_iter, trainer.scheduler.last_epoch))
    trainer.train()
    report(trainer, 5)


if __name__ == "__main__":
    main()
