# Source: mindee/doctr, references/recognition/train_pytorch.py (fit_one_epoch, evaluate, main), references/recognition/utils.py (EarlyStopper), doctr/models/recognition/crnn/pytorch.py (CRNN, CTC loss and greedy decoding), commit f1a4bbe286375383aaea58a2eccb66fa353d1143
# Report: https://github.com/mindee/doctr/pull/1961
# docTR text-recognition reference training: a CRNN (conv features -> BiLSTM -> CTC) trained with
# AdamW, a per-iteration cosine schedule and gradient clipping at 5; after every epoch the
# validation loss and exact-match rate are computed and the state dict is saved when the
# validation loss improves. Word images are synthetic: 1-5 digit strings rendered as 8-pixel-high
# column patterns with noise; the real vocab/fonts/augmentations, W&B/ClearML logging and DDP
# are removed. The saved checkpoint is reloaded and evaluated at the end.
import os
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import CosineAnnealingLR

VOCAB = "0123456789"


class CRNN(nn.Module):
    def __init__(self, vocab, rnn_units=32):
        super().__init__()
        self.vocab = vocab
        self.feat_extractor = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.MaxPool2d((2, 1)))
        self.decoder = nn.GRU(input_size=32 * 4, hidden_size=rnn_units, batch_first=True, bidirectional=True)
        self.linear = nn.Linear(2 * rnn_units, len(vocab) + 1)

    def compute_loss(self, model_output, target):
        gt = torch.tensor([VOCAB.index(c) for word in target for c in word], dtype=torch.long)
        seq_len = torch.tensor([len(word) for word in target], dtype=torch.long)
        batch_len = model_output.shape[0]
        input_length = model_output.shape[1] * torch.ones(size=(batch_len,), dtype=torch.int32)
        probs = model_output.permute(1, 0, 2)
        return F.ctc_loss(probs.log_softmax(-1), gt, input_length, seq_len, len(self.vocab),
                          zero_infinity=True)

    def decode(self, logits):
        best = logits.argmax(-1)
        words = []
        for seq in best.tolist():
            out, prev = [], None
            for k in seq:
                if k != prev and k != len(self.vocab):
                    out.append(self.vocab[k])
                prev = k
            words.append(("".join(out), 1.0))
        return words

    def forward(self, x, target=None, return_preds=False):
        features = self.feat_extractor(x)
        c, h, w = features.shape[1], features.shape[2], features.shape[3]
        features_seq = features.permute(0, 3, 1, 2).reshape(x.shape[0], w, c * h)
        logits, _ = self.decoder(features_seq)
        logits = self.linear(logits)
        out = {}
        if return_preds:
            out["preds"] = self.decode(logits.detach())
        if target is not None:
            out["loss"] = self.compute_loss(logits, target)
        return out


class EarlyStopper:
    def __init__(self, patience: int = 5, min_delta: float = 0.01):
        self.patience = patience
        self.min_delta = min_delta
        self.counter = 0
        self.min_validation_loss = float("inf")

    def early_stop(self, validation_loss: float) -> bool:
        if validation_loss < self.min_validation_loss:
            self.min_validation_loss = validation_loss
            self.counter = 0
        elif validation_loss > (self.min_validation_loss + self.min_delta):
            self.counter += 1
            if self.counter >= self.patience:
                return True
        return False


class TextMatch:
    def reset(self):
        self.raw, self.total = 0, 0

    def update(self, gts, preds):
        self.raw += sum(int(g == p) for g, p in zip(gts, preds))
        self.total += len(gts)

    def summary(self):
        return {"raw": self.raw / max(self.total, 1), "unicase": self.raw / max(self.total, 1)}


def render_words(n, rng, patterns, width=32):
    images = np.zeros((n, 1, 8, width), np.float32)
    words = []
    for i in range(n):
        word = "".join(rng.choice(list(VOCAB), size=rng.randint(1, 5)))
        col = 1
        for ch in word:
            images[i, 0, :, col:col + 3] = patterns[VOCAB.index(ch)]
            col += 4
        images[i] += rng.normal(0, 0.8, size=images[i].shape)
        words.append(word)
    return torch.from_numpy(images), words


def batches(images, words, batch_size, shuffle, rng):
    order = rng.permutation(len(words)) if shuffle else np.arange(len(words))
    for s in range(0, len(order), batch_size):
        idx = order[s:s + batch_size]
        yield images[idx], [words[k] for k in idx]


def fit_one_epoch(model, train_data, optimizer, scheduler, rng):
    model.train()
    epoch_train_loss, batch_cnt = 0, 0
    for images, targets in batches(*train_data, 8, True, rng):
        optimizer.zero_grad()
        train_loss = model(images, targets)["loss"]
        train_loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5)
        optimizer.step()
        scheduler.step()
        last_lr = scheduler.get_last_lr()[0]
        epoch_train_loss += train_loss.item()
        batch_cnt += 1
    epoch_train_loss /= batch_cnt
    return epoch_train_loss, last_lr


@torch.no_grad()
def evaluate(model, val_data, val_metric, rng):
    model.eval()
    val_metric.reset()
    val_loss, batch_cnt = 0, 0
    for images, targets in batches(*val_data, 32, False, rng):
        out = model(images, targets, return_preds=True)
        if len(out["preds"]):
            words, _ = zip(*out["preds"])
        else:
            words = []
        val_metric.update(targets, words)
        val_loss += out["loss"].item()
        batch_cnt += 1
    val_loss /= batch_cnt
    result = val_metric.summary()
    return val_loss, result["raw"], result["unicase"]


def main(args):
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    patterns = np.sign(rng.normal(0, 1, size=(len(VOCAB), 8, 3))).astype(np.float32)
    train_data = render_words(48, rng, patterns)
    val_data = render_words(24, rng, patterns)
    model = CRNN(VOCAB)
    optimizer = torch.optim.AdamW(model.parameters(), args["lr"], betas=(0.95, 0.999), eps=1e-6,
                                  weight_decay=args["weight_decay"])
    n_batches = (len(train_data[1]) + 7) // 8
    scheduler = CosineAnnealingLR(optimizer, args["epochs"] * n_batches, eta_min=args["lr"] / 25e4)
    val_metric = TextMatch()
    exp_name = "crnn_synthetic"
    min_loss = np.inf
    if args["early_stop"]:
        early_stopper = EarlyStopper(patience=args["early_stop_epochs"], min_delta=args["early_stop_delta"])
    for epoch in range(args["epochs"]):
        train_loss, actual_lr = fit_one_epoch(model, train_data, optimizer, scheduler, rng)
        print(f"Epoch {epoch + 1}/{args['epochs']} - Training loss: {train_loss:.6} | LR: {actual_lr:.6}")
        val_loss, exact_match, partial_match = evaluate(model, val_data, val_metric, rng)
        if val_loss < min_loss:
            print(f"Validation loss decreased {min_loss:.6} --> {val_loss:.6}: saving state...")
            params = model.module if hasattr(model, "module") else model

            torch.save(params.state_dict(), Path(args["output_dir"]) / f"{exp_name}.pt")
        min_loss = val_loss
        print(f"Epoch {epoch + 1}/{args['epochs']} - Validation loss: {val_loss:.6} "
              f"(Exact: {exact_match:.2%} | Partial: {partial_match:.2%})")
        if args["early_stop"] and early_stopper.early_stop(val_loss):
            print("Training halted early due to reaching patience limit.")
            break

    model.load_state_dict(torch.load(Path(args["output_dir"]) / f"{exp_name}.pt"))
    val_loss, exact_match, _ = evaluate(model, val_data, val_metric, rng)
    print(f"Saved checkpoint: validation loss {val_loss:.6} (Exact: {exact_match:.2%})")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        main({"lr": 1e-2, "weight_decay": 0.0, "epochs": 12, "early_stop": False, "early_stop_epochs": 5,
              "early_stop_delta": 0.01, "output_dir": tmp})
    assert os.path.exists(os.getcwd())
