# Source: joeynmt/joeynmt, joeynmt/training.py (TrainManager: __init__, save_checkpoint, load_checkpoint, train_and_validate, _train_batch; train), joeynmt/prediction.py (validate_on_data), commit 969157ca56e94975af5118e61ff1b1b493b25378
# Report: https://github.com/joeynmt/joeynmt/pull/15
# JoeyNMT training: an attentional GRU encoder-decoder trained with Adam and a plateau
# scheduler; every validation_freq steps the dev set is decoded greedily, a checkpoint is
# written when the checkpoint metric improves ("Hooray! New best validation result"), and after
# training the test set is decoded and its score reported. Data are a synthetic translation
# task (target = source reversed and mapped through a fixed token table) with a small, noisy
# training set so the dev score peaks and then degrades; BLEU is replaced by token accuracy,
# torchtext iterators by plain batching, attention plots and file reports are removed.
import logging
import os
import random
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, BOS, EOS = 0, 1, 2
VOCAB = 24


class Batch:
    def __init__(self, src, trg):
        self.src = src
        self.trg_input = trg[:, :-1]
        self.trg = trg[:, 1:]
        self.nseqs = src.size(0)
        self.ntokens = (self.trg != PAD).sum().item()


class Model(nn.Module):
    def __init__(self, emb=32, hidden=48):
        super().__init__()
        self.pad_index, self.bos_index = PAD, BOS
        self.src_embed = nn.Embedding(VOCAB, emb, padding_idx=PAD)
        self.trg_embed = nn.Embedding(VOCAB, emb, padding_idx=PAD)
        self.encoder = nn.GRU(emb, hidden, batch_first=True, bidirectional=True)
        self.bridge = nn.Linear(2 * hidden, hidden)
        self.decoder = nn.GRU(emb + 2 * hidden, hidden, batch_first=True)
        self.att_key = nn.Linear(2 * hidden, hidden, bias=False)
        self.output_layer = nn.Linear(hidden + 2 * hidden, VOCAB)

    def encode(self, src):
        enc, _ = self.encoder(self.src_embed(src))
        mask = (src != PAD)
        init = torch.tanh(self.bridge((enc * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True)))
        return enc, mask, init.unsqueeze(0)

    def decode_step(self, prev_emb, hidden, enc, keys, mask, prev_ctx):
        out, hidden = self.decoder(torch.cat([prev_emb, prev_ctx], -1), hidden)
        scores = (keys @ out.transpose(1, 2)).squeeze(-1).masked_fill(~mask, -1e9)
        ctx = (F.softmax(scores, -1).unsqueeze(1) @ enc)
        return F.log_softmax(self.output_layer(torch.cat([out, ctx], -1)), -1), hidden, ctx

    def forward(self, src, trg_input):
        enc, mask, hidden = self.encode(src)
        keys = self.att_key(enc)
        ctx = torch.zeros(src.size(0), 1, enc.size(-1))
        outs = []
        for t in range(trg_input.size(1)):
            lp, hidden, ctx = self.decode_step(self.trg_embed(trg_input[:, t:t + 1]), hidden, enc, keys, mask, ctx)
            outs.append(lp)
        return torch.cat(outs, 1)

    def get_loss_for_batch(self, batch, criterion):
        log_probs = self.forward(batch.src, batch.trg_input)
        return criterion(log_probs.reshape(-1, VOCAB), batch.trg.reshape(-1))

    def greedy(self, src, max_len):
        enc, mask, hidden = self.encode(src)
        keys = self.att_key(enc)
        ctx = torch.zeros(src.size(0), 1, enc.size(-1))
        prev = torch.full((src.size(0), 1), BOS, dtype=torch.long)
        outs = []
        for _ in range(max_len):
            lp, hidden, ctx = self.decode_step(self.trg_embed(prev), hidden, enc, keys, mask, ctx)
            prev = lp.argmax(-1)
            outs.append(prev)
        return torch.cat(outs, 1)


def make_data(n, rng, table, noise=0.0):
    src = np.zeros((n, 10), np.int64)
    trg = np.zeros((n, 12), np.int64)
    for i in range(n):
        L = rng.randint(4, 9)
        s = rng.randint(3, VOCAB, size=L)
        t = table[s[::-1]]
        if noise:
            flip = rng.rand(L) < noise
            t = np.where(flip, rng.randint(3, VOCAB, size=L), t)
        src[i, :L] = s
        trg[i, 0], trg[i, 1:L + 1], trg[i, L + 1] = BOS, t, EOS
    return torch.from_numpy(src), torch.from_numpy(trg)


def make_data_iter(data, batch_size, shuffle):
    n = len(data[0])
    order = np.random.permutation(n) if shuffle else np.arange(n)
    for s in range(0, n, batch_size):
        idx = torch.from_numpy(order[s:s + batch_size])
        yield Batch(data[0][idx], data[1][idx])


def validate_on_data(model, data, batch_size, max_output_length, criterion=None):
    model.eval()
    correct = total = 0
    total_loss, total_tokens = 0.0, 0
    with torch.no_grad():
        for batch in make_data_iter(data, batch_size, shuffle=False):
            if criterion is not None:
                total_loss += model.get_loss_for_batch(batch, criterion).item()
                total_tokens += batch.ntokens
            hyp = model.greedy(batch.src, batch.trg.size(1))
            ref_mask = batch.trg != PAD
            correct += ((hyp == batch.trg) & ref_mask).sum().item()
            total += ref_mask.sum().item()
    valid_loss = total_loss
    valid_ppl = float(np.exp(total_loss / max(total_tokens, 1)))
    return 100.0 * correct / total, valid_loss, valid_ppl


class TrainManager:
    def __init__(self, model, config):
        train_config = config["training"]
        self.model = model
        self.pad_index = self.model.pad_index
        self.criterion = nn.NLLLoss(ignore_index=self.pad_index, reduction='sum')
        self.learning_rate_min = train_config.get("learning_rate_min", 1.0e-8)
        self.optimizer = torch.optim.Adam(model.parameters(), weight_decay=train_config.get("weight_decay", 0),
                                          lr=train_config.get("learning_rate", 3.0e-4))
        self.schedule_metric = train_config.get("schedule_metric", "eval_metric")
        self.ckpt_metric = train_config.get("ckpt_metric", "eval_metric")
        self.best_ckpt_iteration = 0
        scheduler_mode = "max" if self.schedule_metric == "eval_metric" else "min"
        if self.ckpt_metric == "eval_metric":
            self.best_ckpt_score = -np.inf
            self.is_best = lambda x: x > self.best_ckpt_score
        else:
            self.best_ckpt_score = np.inf
            self.is_best = lambda x: x < self.best_ckpt_score
        self.scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer=self.optimizer, mode=scheduler_mode, threshold_mode='abs',
            factor=train_config.get("decrease_factor", 0.1), patience=train_config.get("patience", 10))
        self.epochs = train_config["epochs"]
        self.batch_size = train_config["batch_size"]
        self.normalization = train_config.get("normalization", "batch")
        self.steps = 0
        self.stop = False
        self.total_tokens = 0
        self.max_output_length = train_config.get("max_output_length", None)
        self.model_dir = train_config["model_dir"]
        self.logger = logging.getLogger("joeynmt")
        self.validation_freq = train_config.get("validation_freq", 1000)
        self.logging_freq = train_config.get("logging_freq", 100)
        max_norm = train_config["clip_grad_norm"]
        self.clip_grad_fun = lambda params: nn.utils.clip_grad_norm_(parameters=params, max_norm=max_norm)

    def save_checkpoint(self):
        model_path = "{}/{}.ckpt".format(self.model_dir, self.steps)
        state = {
            "steps": self.steps,
            "total_tokens": self.total_tokens,
            "best_ckpt_score": self.best_ckpt_score,
            "best_ckpt_iteration": self.best_ckpt_iteration,
            "model_state": self.model.state_dict(),
            "optimizer_state": self.optimizer.state_dict(),
            "scheduler_state": self.scheduler.state_dict() if self.scheduler is not None else None,
        }
        torch.save(state, model_path)

    def load_checkpoint(self, path):
        model_checkpoint = torch.load(path, weights_only=False)
        self.model.load_state_dict(model_checkpoint["model_state"])
        self.optimizer.load_state_dict(model_checkpoint["optimizer_state"])
        if model_checkpoint["scheduler_state"] is not None:
            self.scheduler.load_state_dict(model_checkpoint["scheduler_state"])
        self.steps = model_checkpoint["steps"]
        self.total_tokens = model_checkpoint["total_tokens"]
        self.best_ckpt_score = model_checkpoint["best_ckpt_score"]
        self.best_ckpt_iteration = model_checkpoint["best_ckpt_iteration"]

    def train_and_validate(self, train_data, valid_data):
        for epoch_no in range(self.epochs):
            self.model.train()
            for batch in make_data_iter(train_data, self.batch_size, shuffle=True):
                self.model.train()
                batch_loss = self._train_batch(batch)
                if self.steps % self.validation_freq == 0:
                    valid_score, valid_loss, valid_ppl = validate_on_data(
                        model=self.model, data=valid_data, batch_size=self.batch_size,
                        max_output_length=self.max_output_length, criterion=self.criterion)
                    ckpt_score = valid_loss if self.ckpt_metric == "loss" else valid_score
                    new_best = False
                    if self.is_best(ckpt_score):
                        self.best_ckpt_score = ckpt_score
                        self.best_ckpt_iteration = self.steps
                        new_best = True
                        self.save_checkpoint()
                    schedule_score = valid_loss if self.schedule_metric == "loss" else valid_score
                    self.scheduler.step(schedule_score)
                    self.logger.info('Validation result at epoch %d, step %d: token_acc: %.2f, loss: %.2f, '
                                     'ppl: %.3f, train loss %.3f %s', epoch_no + 1, self.steps, valid_score,
                                     valid_loss, valid_ppl, batch_loss.item(), "*" if new_best else "")
        self.logger.info('Training ended after %d epochs.', epoch_no + 1)
        self.logger.info('Best validation result at step %d: %.2f %s.', self.best_ckpt_iteration,
                         self.best_ckpt_score, self.ckpt_metric)

    def _train_batch(self, batch, update=True):
        batch_loss = self.model.get_loss_for_batch(batch=batch, criterion=self.criterion)
        normalizer = batch.nseqs if self.normalization == "batch" else batch.ntokens
        norm_batch_loss = batch_loss.sum() / normalizer
        norm_batch_loss.backward()
        if self.clip_grad_fun is not None:
            self.clip_grad_fun(params=self.model.parameters())
        if update:
            self.optimizer.step()
            self.optimizer.zero_grad()
            self.steps += 1
        self.total_tokens += batch.ntokens
        return norm_batch_loss


def train(cfg):
    seed = cfg["training"].get("random_seed", 42)
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    rng = np.random.RandomState(seed)
    table = rng.permutation(np.arange(3, VOCAB))
    table = np.concatenate([np.arange(3), table])
    train_data = make_data(160, rng, table, noise=0.25)
    dev_data = make_data(100, rng, table)
    test_data = make_data(200, rng, table)

    model = Model()
    trainer = TrainManager(model=model, config=cfg)
    trainer.train_and_validate(train_data=train_data, valid_data=dev_data)

    if test_data is not None:
        score, loss, ppl = validate_on_data(
            data=test_data, batch_size=trainer.batch_size, max_output_length=trainer.max_output_length,
            model=model, criterion=None)
        trainer.logger.info("%4s: %.2f token_acc [Greedy decoding]", "Test data result", score)


if __name__ == "__main__":
    torch.set_num_threads(1)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with tempfile.TemporaryDirectory() as tmp:
        train({"training": {"random_seed": 42, "learning_rate": 5e-3, "batch_size": 16, "epochs": 30,
                            "validation_freq": 20, "clip_grad_norm": 1.0, "patience": 50,
                            "model_dir": tmp, "max_output_length": 12}})
