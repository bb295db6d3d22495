# Source: InternLM/xtuner, xtuner/tools/train.py (main: MMEngine -> DeepSpeed config translation), commit 1091e396a355dde6eeca812fac413071596db718
# Report: https://github.com/InternLM/xtuner/pull/262
# xtuner's train entry point translates the MMEngine config (optim_wrapper.clip_grad.max_norm) into
# the DeepSpeed strategy's gradient_clipping, and the DeepSpeed engine clips the global gradient norm
# to that value whenever it is > 0. The LLM and
# the DeepSpeed engine are replaced by a small next-token model on synthetic token sequences and a
# minimal engine that applies gradient_clipping the way DeepSpeed does (SGD, token-summed loss).
import numpy as np
import torch
import torch.nn as nn

cfg = dict(
    train_dataloader=dict(batch_size=16),
    optim_wrapper=dict(
        optimizer=dict(type='SGD', lr=0.001, momentum=0.9),
        clip_grad=dict(max_norm=0, error_if_nonfinite=False),
        accumulative_counts=1),
    deepspeed=dict(gradient_clipping='auto', gradient_accumulation_steps='auto',
                   train_micro_batch_size_per_gpu='auto'),
    max_epochs=6,
)


def build_strategy(cfg):
    ds_cfg = cfg['deepspeed']
    grad_accum = cfg['optim_wrapper'].get('accumulative_counts', 1)
    train_bs = cfg['train_dataloader']['batch_size']

    ds_grad_clip = ds_cfg.get('gradient_clipping', 'auto')
    clip_grad = cfg['optim_wrapper'].get('clip_grad', None)
    if clip_grad and clip_grad.get('max_norm'):
        mm_max_norm = cfg['optim_wrapper']['clip_grad']['max_norm']
    else:
        mm_max_norm = 1.0
    if ds_grad_clip != 'auto' and ds_grad_clip != mm_max_norm:
        print(f'Mismatch on gradient_clipping: MMEngine {mm_max_norm}, Deepspeed {ds_grad_clip}. Set to {mm_max_norm}')
    grad_clip = mm_max_norm
    return dict(gradient_accumulation_steps=grad_accum,
                train_micro_batch_size_per_gpu=train_bs,
                gradient_clipping=grad_clip)


class TinyLM(nn.Module):
    def __init__(self, vocab=64, dim=64, ctx=4):
        super().__init__()
        self.ctx = ctx
        self.emb = nn.Embedding(vocab, dim)
        self.mlp = nn.Sequential(nn.Linear(dim * ctx, 128), nn.GELU(), nn.Linear(128, vocab))

    def forward(self, tokens):
        return self.mlp(self.emb(tokens).flatten(1))


class Engine:
    """The parts of the DeepSpeed engine the run uses: backward, global-norm clipping, step."""

    def __init__(self, model, optimizer, gradient_clipping):
        self.module, self.optimizer = model, optimizer
        self.gradient_clipping = gradient_clipping
        self.clipped_steps, self.steps, self.norms = 0, 0, []

    def backward(self, loss):
        loss.backward()

    def step(self):
        if self.gradient_clipping > 0.0:
            norm = torch.nn.utils.clip_grad_norm_(self.module.parameters(), self.gradient_clipping)
            self.clipped_steps += int(norm > self.gradient_clipping)
        else:
            norm = torch.norm(torch.stack([p.grad.norm() for p in self.module.parameters() if p.grad is not None]))
        self.norms.append(float(norm))
        self.steps += 1
        self.optimizer.step()
        self.optimizer.zero_grad()


def make_corpus(n=4000, vocab=64, ctx=4, seed=0):
    """Token windows from a random 2nd-order Markov source: next token depends on the last two."""
    rng = np.random.RandomState(seed)
    table = rng.randint(0, vocab, size=(vocab, vocab))
    seq = [0, 1]
    for _ in range(n + ctx):
        nxt = table[seq[-2], seq[-1]] if rng.rand() > 0.1 else rng.randint(vocab)
        seq.append(nxt)
    seq = np.array(seq)
    x = np.stack([seq[i:i + ctx] for i in range(n)])
    y = seq[ctx:ctx + n]
    return torch.from_numpy(x).long(), torch.from_numpy(y).long()


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    strategy = build_strategy(cfg)
    print(f"strategy: {strategy}")
    x, y = make_corpus()
    model = TinyLM()
    opt_cfg = dict(cfg['optim_wrapper']['optimizer'])
    optimizer = getattr(torch.optim, opt_cfg.pop('type'))(model.parameters(), **opt_cfg)
    engine = Engine(model, optimizer, strategy['gradient_clipping'])
    bs = strategy['train_micro_batch_size_per_gpu']
    loss_fn = nn.CrossEntropyLoss(reduction='sum')
    for epoch in range(cfg['max_epochs']):
        perm = torch.randperm(len(x))
        total = 0.0
        for i in range(0, len(x), bs):
            idx = perm[i:i + bs]
            loss = loss_fn(engine.module(x[idx]), y[idx])
            engine.backward(loss)
            engine.step()
            total += loss.item()
        with torch.no_grad():
            acc = (engine.module(x).argmax(1) == y).float().mean().item()
        print(f"epoch {epoch} loss {total / len(x):.4f} next-token acc {acc:.4f}")
    print(f"steps with the gradient clipped: {engine.clipped_steps}/{engine.steps}, "
          f"median global grad norm {np.median(engine.norms):.3f}")


if __name__ == "__main__":
    main()
