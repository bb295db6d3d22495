# Source: cybertronai/transformer-xl, train.py (evaluate_and_log, train loop), eval.py (evaluate), data_utils.py (LMOrderedIterator, get_dist_iterator, chunk), util.py, commit 240cfe73c54078ece212779f944719deb1a9b4f2
# Report: https://github.com/cybertronai/transformer-xl/issues/14
# Run: torchrun --nproc-per-node 2 train.py
# Distributed Transformer-XL language-model training: every process reads its own chunk of the
# train and valid token streams. The MemTransformerLM is replaced by a one-layer causal
# transformer without memory; the corpus by a synthetic token stream whose valid file is made of
# two different "documents" (a repetitive one first, a noisier one second).
import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def chunk(a, n):
    """Split `a` into `n` chunks, with the last bucket taking the remaining."""
    k, m = divmod(len(a), n)
    return (a[i * k + min(i, m):(i + 1) * k + min(i + 1, m)] for i in range(n))


def get_global_rank() -> int:
    return int(os.environ.get('RANK', 0))


class LMOrderedIterator:
    def __init__(self, data, bsz: int, bptt: int, offset: int = 0, device: str = 'cpu', ext_len=None):
        self.offset = offset
        self.bsz = bsz
        self.bptt = bptt
        self.ext_len = ext_len if ext_len is not None else 0
        self.device = device
        self.n_step = data.size(0) // bsz
        data = data.narrow(0, 0, self.n_step * bsz)
        self.data = data.view(bsz, -1).t().contiguous().to(device)
        self.n_batch = (self.n_step + self.bptt - 1) // self.bptt

    def get_batch(self, i: int):
        seq_len = min(self.bptt, self.data.size(0) - 1 - i)
        end_idx = i + seq_len
        beg_idx = max(0, i - self.ext_len)
        data = self.data[beg_idx: end_idx]
        target = self.data[i + 1:i + 1 + seq_len]
        return data, target, seq_len

    def __iter__(self):
        while self.offset >= self.data.size(0) - 1:
            self.offset -= self.data.size(0) - 1
        for i in range(self.offset, self.data.size(0) - 1, self.bptt):
            self.offset = i + self.bptt
            yield self.get_batch(i)


class Corpus:
    def __init__(self, train, valid):
        self.train, self.valid = train, valid

    def get_dist_iterator(self, split, *args, rank=0, max_rank=1, **kwargs):
        data = self.train if split == 'train' else self.valid
        subset = list(chunk(data, max_rank))[rank]
        return LMOrderedIterator(subset, *args, **kwargs)


class MemTransformerLM(nn.Module):
    def __init__(self, n_token, d_model=64, n_head=4, d_inner=128, tgt_len=32):
        super().__init__()
        self.word_emb = nn.Embedding(n_token, d_model)
        self.pos_emb = nn.Parameter(torch.zeros(tgt_len, 1, d_model))
        self.layer = nn.TransformerEncoderLayer(d_model, n_head, d_inner, dropout=0.1)
        self.crit = nn.Linear(d_model, n_token)

    def forward(self, data, target, *mems):
        qlen = data.size(0)
        mask = torch.triu(torch.full((qlen, qlen), float('-inf')), diagonal=1)
        h = self.layer(self.word_emb(data) + self.pos_emb[:qlen], src_mask=mask)
        logits = self.crit(h)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), target.reshape(-1), reduction='none').view(qlen, -1)
        return (loss,)


def evaluate(model, eval_iter, label: str, max_eval_steps: int = 0):
    model.eval()
    total_len, total_loss = 0, 0.
    with torch.no_grad():
        mems = tuple()
        for i, (data, target, seq_len) in enumerate(eval_iter):
            if max_eval_steps > 0 and i >= max_eval_steps:
                break
            ret = model(data, target, *mems)
            loss, mems = ret[0], ret[1:]
            loss = loss.mean()
            total_loss += seq_len * loss.item()
            total_len += seq_len
    return total_loss, total_len


class State:
    best_val_loss = None
    train_step = 0


def evaluate_and_log(model, eval_iter, split, state, log):
    eval_start_time = time.time()
    total_loss, total_len = evaluate(model, eval_iter, split)
    model.train()

    mean_loss = total_loss / total_len
    log_str = (f'| Eval at step {state.train_step:>8d} | time: {time.time() - eval_start_time:5.2f}s '
               f'| {split} loss {mean_loss:5.2f} | {split} ppl {math.exp(mean_loss):9.3f}')
    log(log_str)

    if split == 'val' and (not state.best_val_loss or mean_loss < state.best_val_loss):
        log('Saving checkpoint for new best loss')
        state.best_val_loss = mean_loss


def make_stream(gen, n, n_token, concentration):
    trans = torch.distributions.Dirichlet(torch.full((n_token,), concentration)).sample((n_token,))
    out = torch.empty(n, dtype=torch.long)
    out[0] = 0
    for i in range(1, n):
        out[i] = torch.multinomial(trans[out[i - 1]], 1, generator=gen)
    return out


def main():
    dist.init_process_group('gloo')
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    n_token = 32
    doc_a = make_stream(gen, 6000, n_token, 0.05)
    doc_b = make_stream(gen, 6000, n_token, 1.0)
    train = torch.cat([doc_a[:4000], doc_b[:4000]])
    train = train.view(-1, 100)[torch.randperm(80, generator=gen)].reshape(-1)
    valid = torch.cat([doc_a[4000:], doc_b[4000:]])
    corpus = Corpus(train, valid)

    tgt_len, batch_size = 32, 8
    tr_iter = corpus.get_dist_iterator('train', batch_size, tgt_len, rank=get_global_rank(), max_rank=world)
    va_iter = corpus.get_dist_iterator('valid', batch_size * 2, tgt_len, rank=get_global_rank(), max_rank=world)

    model = nn.parallel.DistributedDataParallel(MemTransformerLM(n_token, tgt_len=tgt_len))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    state = State()
    log = print if rank == 0 else (lambda *a: None)
    eval_interval = 16
    for epoch in range(6):
        accumulated_loss = 0.
        for batch, (data, target, seq_len) in enumerate(tr_iter):
            model.zero_grad()
            ret = model(data, target)
            loss = ret[0].float().mean()
            loss.backward()
            accumulated_loss += loss.item()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
            optimizer.step()
            state.train_step += 1
            if state.train_step % eval_interval == 0:
                evaluate_and_log(model, va_iter, 'val', state, log)
        log(f'| epoch {epoch:3d} step {state.train_step:>8d} | loss {accumulated_loss / (batch + 1):5.2f}')

    total_loss, total_len = evaluate(model, va_iter, 'val')
    t = torch.tensor([total_loss, float(total_len)])
    dist.all_reduce(t)
    log(f'| valid loss over the whole valid set (all ranks): {t[0].item() / t[1].item():5.2f}')
    dist.destroy_process_group()


if __name__ == '__main__':
    main()
