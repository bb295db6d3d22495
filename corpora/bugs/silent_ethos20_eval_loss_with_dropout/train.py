# Source: ipolharvard/ethos-ares, src/ethos/train/run_training.py + src/ethos/train/metrics.py, commit 3df4fc4e67255c98eed3ec859e6d2b2336fc0953
# Report: https://github.com/ipolharvard/ethos-ares/issues/20
# ETHOS training loop (nanoGPT-style, GPT2 from transformers with resid/embd/attn dropout,
# get_lr warmup + cosine, grad clipping, GradScaler no-op in fp32) and estimate_loss() which
# picks best_model.pt by validation loss. Patient timelines (MEDS tokens) are replaced by a
# synthetic Markov token stream; hydra config by a Namespace; checkpoint writing by prints.
import math
from argparse import Namespace

import torch as th
from torch.utils.data import DataLoader, Dataset
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.utils import logging as hf_logging


class TimelineDataset(Dataset):
    def __init__(self, tokens, n_positions):
        self.tokens, self.n_positions = tokens, n_positions

    def __len__(self):
        return len(self.tokens) - self.n_positions - 1

    def __getitem__(self, idx):
        x = self.tokens[idx: idx + self.n_positions]
        return x, self.tokens[idx + 1: idx + 1 + self.n_positions]


def make_timeline(n, vocab, seed):
    g = th.Generator().manual_seed(seed)
    trans = th.softmax(th.randn(vocab, vocab, generator=th.Generator().manual_seed(0)) * 3.0, -1)
    toks = [0]
    for _ in range(n - 1):
        toks.append(int(th.multinomial(trans[toks[-1]], 1, generator=g)))
    return th.tensor(toks)


@th.inference_mode()
def estimate_loss(model, ctx, train_dataset, val_dataset, cfg) -> dict:
    train_dataloader, val_dataloader = (
        DataLoader(dataset, batch_size=cfg.batch_size, shuffle=True)
        for dataset in [train_dataset, val_dataset]
    )

    eval_iters = len(val_dataset) // (cfg.batch_size * cfg.n_positions) + 1

    out = {}
    for split, dataloader in [("train", train_dataloader), ("val", val_dataloader)]:
        losses = th.empty(eval_iters, device=model.device)
        for i, (X, Y) in zip(range(eval_iters), dataloader):
            with ctx:
                output = model(input_ids=X, labels=Y)
                loss = output.loss
            losses[i] = loss.item()

        out[f"loss/{split}"] = losses.mean().item()
    return out


def get_lr(it, cfg):
    if it < cfg.warmup_iters:
        return cfg.lr * it / cfg.warmup_iters
    if it > cfg.lr_decay_iters:
        return cfg.min_lr
    decay_ratio = (it - cfg.warmup_iters) / (cfg.lr_decay_iters - cfg.warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return cfg.min_lr + coeff * (cfg.lr - cfg.min_lr)


def make_infinite_loader(dataloader):
    while True:
        yield from dataloader


def main():
    hf_logging.set_verbosity_error()
    th.manual_seed(42)
    cfg = Namespace(batch_size=16, n_positions=32, n_embd=64, n_layer=2, n_head=4, dropout=0.3, lr=3e-3,
                    min_lr=3e-4, warmup_iters=20, lr_decay_iters=300, max_iters=300, eval_interval=60,
                    grad_clip=1.0, weight_decay=0.1, beta1=0.9, beta2=0.95, gradient_accumulation_steps=1)
    ctx = th.autocast("cpu", enabled=False)
    vocab_size = 64
    train_dataset = TimelineDataset(make_timeline(6000, vocab_size, 1), cfg.n_positions)
    val_dataset = TimelineDataset(make_timeline(3000, vocab_size, 2), cfg.n_positions)
    train_dataloader = make_infinite_loader(DataLoader(train_dataset, batch_size=cfg.batch_size, shuffle=True))

    config = GPT2Config(vocab_size=vocab_size, n_positions=cfg.n_positions, n_embd=cfg.n_embd,
                        n_layer=cfg.n_layer, n_head=cfg.n_head, n_inner=None,
                        resid_pdrop=cfg.dropout, embd_pdrop=cfg.dropout, attn_pdrop=cfg.dropout)
    model = GPT2LMHeadModel(config)
    scaler = th.amp.GradScaler(enabled=False)
    optimizer = th.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2),
                               weight_decay=cfg.weight_decay)

    iter_num, best_val_loss = 0, 1e9
    X, Y = next(train_dataloader)
    while True:
        lr = get_lr(iter_num, cfg)
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr

        if iter_num % cfg.eval_interval == 0:
            losses = estimate_loss(model, ctx, train_dataset, val_dataset, cfg)
            print("step {}: train loss {:.4f}, val loss {:.4f}".format(
                iter_num, losses["loss/train"], losses["loss/val"]))
            if losses["loss/val"] < best_val_loss:
                best_val_loss = losses["loss/val"]
                print(f"Saved the best model: val loss {best_val_loss:.4f}")

        for micro_step in range(cfg.gradient_accumulation_steps):
            with ctx:
                output = model(input_ids=X, labels=Y)
                loss = output.loss
                loss = loss / cfg.gradient_accumulation_steps
            X, Y = next(train_dataloader)
            scaler.scale(loss).backward()
        if cfg.grad_clip != 0.0:
            scaler.unscale_(optimizer)
            th.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)

        iter_num += 1
        if iter_num > cfg.max_iters:
            break
    print(f"best val loss {best_val_loss:.4f}")


if __name__ == "__main__":
    main()
