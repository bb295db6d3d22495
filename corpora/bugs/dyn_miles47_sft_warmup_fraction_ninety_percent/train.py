# Source: radixark/miles, scripts/run-qwen3-4B-base-sft.sh (SFT_ARGS, OPTIMIZER_ARGS), miles/backends/megatron_utils/model.py (get_optimizer_param_scheduler), Megatron-LM megatron/core/optimizer_param_scheduler.py (OptimizerParamScheduler.get_lr / step, as used by miles), commit 871d816403fa40e750dd98e8b8c10ae22b9d975e
# Report: https://github.com/radixark/miles/pull/47
# miles SFT recipe: the launch script's argument groups are parsed as the trainer parses them;
# train_iters = num_rollout * rollout_batch_size * n_samples_per_prompt // global_batch_size,
# the Megatron OptimizerParamScheduler is built from lr / min_lr / warmup / cosine decay
# (counted in samples) and stepped by global_batch_size after every optimizer step; Adam with
# the script's betas and weight decay; the loss is the per-token SFT loss on response tokens.
# Qwen3-4B / Megatron / Ray are replaced by a one-layer causal transformer, OpenHermes by a
# synthetic prompt -> response task (the response is the prompt sorted), and the lr is scaled
# up (1e-5 -> 2e-3, min 2e-4) for the toy model.
import argparse
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SFT_ARGS = [
    "--num-epoch", "3",
    "--rollout-batch-size", "32",
    "--global-batch-size", "32",
    "--n-samples-per-prompt", "1",
]

OPTIMIZER_ARGS = [
    "--optimizer", "adam",
    "--lr", "2e-3",
    "--lr-warmup-iters", "4",
    "--lr-decay-style", "cosine",
    "--min-lr", "2e-4",
    "--lr-warmup-fraction", "0.9",
    "--weight-decay", "0.1",
    "--adam-beta1", "0.9",
    "--adam-beta2", "0.95",
]


def parse_args(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--num-epoch", type=int)
    p.add_argument("--rollout-batch-size", type=int)
    p.add_argument("--global-batch-size", type=int)
    p.add_argument("--n-samples-per-prompt", type=int, default=1)
    p.add_argument("--optimizer", default="adam")
    p.add_argument("--lr", type=float)
    p.add_argument("--min-lr", type=float, default=0.0)
    p.add_argument("--lr-warmup-iters", type=int, default=0)
    p.add_argument("--lr-warmup-fraction", type=float, default=None)
    p.add_argument("--lr-warmup-init", type=float, default=0.0)
    p.add_argument("--lr-decay-iters", type=int, default=None)
    p.add_argument("--lr-decay-style", default="linear")
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--adam-beta1", type=float, default=0.9)
    p.add_argument("--adam-beta2", type=float, default=0.999)
    return p.parse_args(argv)


class OptimizerParamScheduler:
    def __init__(self, optimizer, init_lr, max_lr, min_lr, lr_warmup_steps, lr_decay_steps, lr_decay_style):
        self.optimizer = optimizer
        self.init_lr = init_lr
        self.max_lr = float(max_lr)
        self.min_lr = min_lr
        self.lr_warmup_steps = lr_warmup_steps
        self.num_steps = 0
        self.lr_decay_steps = lr_decay_steps
        self.lr_decay_style = lr_decay_style
        self.step(0)

    def get_lr(self, param_group):
        max_lr = param_group.get('max_lr', self.max_lr)
        min_lr = param_group.get('min_lr', self.min_lr)
        if self.lr_warmup_steps > 0 and self.num_steps <= self.lr_warmup_steps:
            return self.init_lr + ((max_lr - self.init_lr) * float(self.num_steps) / float(self.lr_warmup_steps))
        if self.lr_decay_style == 'constant':
            return max_lr
        if self.num_steps > self.lr_decay_steps:
            return min_lr
        num_steps_ = self.num_steps - self.lr_warmup_steps
        decay_steps_ = self.lr_decay_steps - self.lr_warmup_steps
        decay_ratio = float(num_steps_) / float(decay_steps_)
        delta_lr = max_lr - min_lr
        if self.lr_decay_style == 'linear':
            coeff = 1.0 - decay_ratio
        elif self.lr_decay_style == 'cosine':
            coeff = 0.5 * (math.cos(math.pi * decay_ratio) + 1.0)
        else:
            raise Exception(f'{self.lr_decay_style} decay style is not supported.')
        return min_lr + coeff * delta_lr

    def step(self, increment):
        self.num_steps += increment
        for param_group in self.optimizer.param_groups:
            param_group['lr'] = self.get_lr(param_group) * param_group.get('lr_mult', 1.0)


def get_optimizer_param_scheduler(args, optimizer):
    args.train_iters = args.num_rollout * args.rollout_batch_size * args.n_samples_per_prompt // args.global_batch_size
    if args.lr_decay_iters is None:
        args.lr_decay_iters = args.train_iters
    lr_decay_steps = args.lr_decay_iters * args.global_batch_size
    if args.lr_warmup_fraction is not None:
        lr_warmup_steps = args.lr_warmup_fraction * lr_decay_steps
    else:
        lr_warmup_steps = args.lr_warmup_iters * args.global_batch_size
    return OptimizerParamScheduler(optimizer, init_lr=args.lr_warmup_init, max_lr=args.lr, min_lr=args.min_lr,
                                   lr_warmup_steps=lr_warmup_steps, lr_decay_steps=lr_decay_steps,
                                   lr_decay_style=args.lr_decay_style)


class TinyCausalLM(nn.Module):
    def __init__(self, vocab=32, dim=64, heads=4, max_len=24):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_len, dim)
        self.block = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True, norm_first=True)
        self.norm = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab)

    def forward(self, tokens):
        T = tokens.size(1)
        h = self.tok(tokens) + self.pos(torch.arange(T))
        mask = torch.triu(torch.full((T, T), float('-inf')), diagonal=1)
        return self.lm_head(self.norm(self.block(h, src_mask=mask)))


def make_sft_data(n, rng, plen=8):
    prompts = rng.randint(3, 32, size=(n, plen))
    responses = np.sort(prompts, axis=1)
    tokens = np.concatenate([prompts, np.full((n, 1), 2), responses], 1)
    loss_mask = np.zeros_like(tokens)
    loss_mask[:, plen + 1:] = 1
    return torch.from_numpy(tokens), torch.from_numpy(loss_mask).float()


def sft_loss(logits, tokens, loss_mask):
    logp = F.log_softmax(logits[:, :-1], -1).gather(-1, tokens[:, 1:].unsqueeze(-1)).squeeze(-1)
    mask = loss_mask[:, 1:]
    return -(logp * mask).sum() / mask.sum()


def main():
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    args = parse_args(SFT_ARGS + OPTIMIZER_ARGS)
    train_tokens, train_mask = make_sft_data(512, rng)
    eval_tokens, eval_mask = make_sft_data(256, rng)
    args.num_rollout = args.num_epoch * len(train_tokens) // args.rollout_batch_size

    model = TinyCausalLM()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, betas=(args.adam_beta1, args.adam_beta2),
                                 weight_decay=args.weight_decay)
    opt_param_scheduler = get_optimizer_param_scheduler(args, optimizer)
    print(f"train_iters {args.train_iters}, lr_warmup_steps {opt_param_scheduler.lr_warmup_steps:.0f} samples, "
          f"lr_decay_steps {opt_param_scheduler.lr_decay_steps} samples")

    iteration = 0
    for rollout_id in range(args.num_rollout):
        if rollout_id % (len(train_tokens) // args.rollout_batch_size) == 0:
            order = torch.from_numpy(rng.permutation(len(train_tokens)))
        start = (rollout_id % (len(train_tokens) // args.rollout_batch_size)) * args.rollout_batch_size
        idx = order[start:start + args.rollout_batch_size]
        model.train()
        optimizer.zero_grad()
        loss = sft_loss(model(train_tokens[idx]), train_tokens[idx], train_mask[idx])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        lr = optimizer.param_groups[0]['lr']
        optimizer.step()
        opt_param_scheduler.step(increment=args.global_batch_size)
        iteration += 1
        if iteration % 6 == 0:
            model.eval()
            with torch.no_grad():
                eval_loss = sft_loss(model(eval_tokens), eval_tokens, eval_mask).item()
            print(f"iter {iteration:3d} lr {lr:.2e} train loss {loss.item():.4f} eval loss {eval_loss:.4f}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
