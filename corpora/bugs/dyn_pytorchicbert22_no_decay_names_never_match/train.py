# Source: dhlee347/pytorchic-bert, optim.py (BertAdam, optim4GPU), models.py, train.py (Trainer), classify.py, commit fefcbd988bc3bcdd2cd67072101a3d94ef362f7e
# Report: https://github.com/dhlee347/pytorchic-bert/pull/22
# Fine-tuning a small BERT-style Transformer classifier on a sentence-pair task (MRPC-like)
# with BertAdam and the repository's two parameter groups. The GLUE files and the tokenizer
# are replaced by synthetic token-id pairs, the model is reduced to dim 32 / 2 layers.
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim import Optimizer
from torch.nn.utils import clip_grad_norm_
from torch.utils.data import DataLoader, TensorDataset
from typing import NamedTuple


def warmup_linear(x, warmup=0.002):
    if x < warmup:
        return x/warmup
    return 1.0 - x


SCHEDULES = {'warmup_linear': warmup_linear}


class BertAdam(Optimizer):
    def __init__(self, params, lr, warmup=-1, t_total=-1, schedule='warmup_linear',
                 b1=0.9, b2=0.999, e=1e-6, weight_decay_rate=0.01,
                 max_grad_norm=1.0):
        defaults = dict(lr=lr, schedule=schedule, warmup=warmup, t_total=t_total,
                        b1=b1, b2=b2, e=e, weight_decay_rate=weight_decay_rate,
                        max_grad_norm=max_grad_norm)
        super(BertAdam, self).__init__(params, defaults)

    def step(self, closure=None):
        loss = None
        if closure is not None:
            loss = closure()

        for group in self.param_groups:
            for p in group['params']:
                if p.grad is None:
                    continue
                grad = p.grad.data
                state = self.state[p]

                if not state:
                    state['step'] = 0
                    state['next_m'] = torch.zeros_like(p.data)
                    state['next_v'] = torch.zeros_like(p.data)

                next_m, next_v = state['next_m'], state['next_v']
                beta1, beta2 = group['b1'], group['b2']

                if group['max_grad_norm'] > 0:
                    clip_grad_norm_(p, group['max_grad_norm'])

                next_m.mul_(beta1).add_(grad, alpha=1 - beta1)
                next_v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                update = next_m / (next_v.sqrt() + group['e'])

                if group['weight_decay_rate'] > 0.0:
                    update += group['weight_decay_rate'] * p.data

                if group['t_total'] != -1:
                    schedule_fct = SCHEDULES[group['schedule']]
                    lr_scheduled = group['lr'] * schedule_fct(state['step']/group['t_total'], group['warmup'])
                else:
                    lr_scheduled = group['lr']

                update_with_lr = lr_scheduled * update
                p.data.add_(-update_with_lr)

                state['step'] += 1

        return loss


def optim4GPU(cfg, model):
    """ optimizer for GPU training """
    param_optimizer = list(model.named_parameters())
    no_decay = ['bias', 'gamma', 'beta']
    optimizer_grouped_parameters = [
        {'params': [p for n, p in param_optimizer if n not in no_decay], 'weight_decay_rate': 0.01},
        {'params': [p for n, p in param_optimizer if n in no_decay], 'weight_decay_rate': 0.0}]
    return BertAdam(optimizer_grouped_parameters,
                    lr=cfg.lr,
                    warmup=cfg.warmup,
                    t_total=cfg.total_steps)


class ModelConfig(NamedTuple):
    vocab_size: int = 64
    dim: int = 32
    n_layers: int = 2
    n_heads: int = 4
    dim_ff: int = 64
    p_drop_hidden: float = 0.1
    p_drop_attn: float = 0.1
    max_len: int = 24
    n_segments: int = 2


class TrainConfig(NamedTuple):
    seed: int = 3431
    batch_size: int = 32
    lr: float = 1e-3
    n_epochs: int = 6
    warmup: float = 0.1
    total_steps: int = 6 * 16


def gelu(x):
    return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


def split_last(x, shape):
    shape = list(shape)
    assert shape.count(-1) <= 1
    if -1 in shape:
        shape[shape.index(-1)] = int(x.size(-1) / -np.prod(shape))
    return x.view(*x.size()[:-1], *shape)


def merge_last(x, n_dims):
    s = x.size()
    return x.view(*s[:-n_dims], -1)


class LayerNorm(nn.Module):
    def __init__(self, cfg, variance_epsilon=1e-12):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(cfg.dim))
        self.beta = nn.Parameter(torch.zeros(cfg.dim))
        self.variance_epsilon = variance_epsilon

    def forward(self, x):
        u = x.mean(-1, keepdim=True)
        s = (x - u).pow(2).mean(-1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.variance_epsilon)
        return self.gamma * x + self.beta


class Embeddings(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.tok_embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.pos_embed = nn.Embedding(cfg.max_len, cfg.dim)
        self.seg_embed = nn.Embedding(cfg.n_segments, cfg.dim)
        self.norm = LayerNorm(cfg)
        self.drop = nn.Dropout(cfg.p_drop_hidden)

    def forward(self, x, seg):
        seq_len = x.size(1)
        pos = torch.arange(seq_len, dtype=torch.long, device=x.device)
        pos = pos.unsqueeze(0).expand_as(x)
        e = self.tok_embed(x) + self.pos_embed(pos) + self.seg_embed(seg)
        return self.drop(self.norm(e))


class MultiHeadedSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.proj_q = nn.Linear(cfg.dim, cfg.dim)
        self.proj_k = nn.Linear(cfg.dim, cfg.dim)
        self.proj_v = nn.Linear(cfg.dim, cfg.dim)
        self.drop = nn.Dropout(cfg.p_drop_attn)
        self.n_heads = cfg.n_heads

    def forward(self, x, mask):
        q, k, v = self.proj_q(x), self.proj_k(x), self.proj_v(x)
        q, k, v = (split_last(x, (self.n_heads, -1)).transpose(1, 2)
                   for x in [q, k, v])
        scores = q @ k.transpose(-2, -1) / np.sqrt(k.size(-1))
        if mask is not None:
            mask = mask[:, None, None, :].float()
            scores -= 10000.0 * (1.0 - mask)
        scores = self.drop(F.softmax(scores, dim=-1))
        h = (scores @ v).transpose(1, 2).contiguous()
        return merge_last(h, 2)


class PositionWiseFeedForward(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.fc1 = nn.Linear(cfg.dim, cfg.dim_ff)
        self.fc2 = nn.Linear(cfg.dim_ff, cfg.dim)

    def forward(self, x):
        return self.fc2(gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attn = MultiHeadedSelfAttention(cfg)
        self.proj = nn.Linear(cfg.dim, cfg.dim)
        self.norm1 = LayerNorm(cfg)
        self.pwff = PositionWiseFeedForward(cfg)
        self.norm2 = LayerNorm(cfg)
        self.drop = nn.Dropout(cfg.p_drop_hidden)

    def forward(self, x, mask):
        h = self.attn(x, mask)
        h = self.norm1(x + self.drop(self.proj(h)))
        h = self.norm2(h + self.drop(self.pwff(h)))
        return h


class Transformer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed = Embeddings(cfg)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layers)])

    def forward(self, x, seg, mask):
        h = self.embed(x, seg)
        for block in self.blocks:
            h = block(h, mask)
        return h


class Classifier(nn.Module):
    def __init__(self, cfg, n_labels):
        super().__init__()
        self.transformer = Transformer(cfg)
        self.fc = nn.Linear(cfg.dim, cfg.dim)
        self.activ = nn.Tanh()
        self.drop = nn.Dropout(cfg.p_drop_hidden)
        self.classifier = nn.Linear(cfg.dim, n_labels)

    def forward(self, input_ids, segment_ids, input_mask):
        h = self.transformer(input_ids, segment_ids, input_mask)
        pooled_h = self.activ(self.fc(h[:, 0]))
        logits = self.classifier(self.drop(pooled_h))
        return logits


def make_pairs(n, cfg, rng):
    """[CLS] a [SEP] b [SEP] + padding; label 1 when b paraphrases a (shares its tokens)."""
    ids = np.zeros((n, cfg.max_len), dtype=np.int64)
    seg = np.zeros((n, cfg.max_len), dtype=np.int64)
    mask = np.zeros((n, cfg.max_len), dtype=np.int64)
    labels = rng.randint(0, 2, size=n)
    for i in range(n):
        la, lb = rng.randint(4, 9), rng.randint(4, 9)
        a = rng.randint(4, cfg.vocab_size, size=la)
        b = rng.permutation(a)[:lb] if labels[i] else rng.randint(4, cfg.vocab_size, size=lb)
        toks = [1] + list(a) + [2] + list(b) + [2]
        ids[i, :len(toks)] = toks
        seg[i, la + 2:len(toks)] = 1
        mask[i, :len(toks)] = 1
    return [torch.from_numpy(x) for x in (ids, seg, mask, labels.astype(np.int64))]


class Trainer(object):
    def __init__(self, cfg, model, data_iter, optimizer):
        self.cfg = cfg
        self.model = model
        self.data_iter = data_iter
        self.optimizer = optimizer

    def train(self, get_loss):
        self.model.train()
        model = self.model
        global_step = 0
        for e in range(self.cfg.n_epochs):
            loss_sum = 0.
            for i, batch in enumerate(self.data_iter):
                self.optimizer.zero_grad()
                loss = get_loss(model, batch, global_step).mean()
                loss.backward()
                self.optimizer.step()

                global_step += 1
                loss_sum += loss.item()
            print('Epoch %d/%d : Average Loss %5.3f' % (e+1, self.cfg.n_epochs, loss_sum/(i+1)))


def main():
    cfg = TrainConfig()
    model_cfg = ModelConfig()
    torch.manual_seed(cfg.seed)
    rng = np.random.RandomState(cfg.seed)

    dataset = TensorDataset(*make_pairs(512, model_cfg, rng))
    data_iter = DataLoader(dataset, batch_size=cfg.batch_size, shuffle=True)

    model = Classifier(model_cfg, 2)
    criterion = nn.CrossEntropyLoss()
    optimizer = optim4GPU(cfg, model)
    for k, group in enumerate(optimizer.param_groups):
        print('param group %d: weight_decay_rate %.2f, %d tensors, %d values' % (
            k, group['weight_decay_rate'], len(group['params']), sum(p.numel() for p in group['params'])))

    trainer = Trainer(cfg, model, data_iter, optimizer)

    def get_loss(model, batch, global_step):
        input_ids, segment_ids, input_mask, label_id = batch
        logits = model(input_ids, segment_ids, input_mask)
        loss = criterion(logits, label_id)
        return loss

    trainer.train(get_loss)

    gammas = torch.cat([m.gamma.detach() for m in model.modules() if isinstance(m, LayerNorm)])
    print('LayerNorm gamma mean %.4f min %.4f' % (gammas.mean().item(), gammas.min().item()))


if __name__ == '__main__':
    main()
