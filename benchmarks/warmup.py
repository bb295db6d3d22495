"""Per-step overhead of ALL default checks, warm-up steps (0-3) apart from the steady state.

Two identical copies of a model train side by side in one process: copy A bare, copy B inside
`torchtriage.watch(...)`. Steps alternate A, B, A, B, ... so that machine noise hits both
alike; while A steps, the session's global hooks and patches are taken out (they would
otherwise tax A too) and put back for B. Steps 0-3 are reported on their own (some checks do
extra work on the first steps only); the steady-state figure is the median of the per-pair
ratios over the remaining steps.

    python benchmarks/warmup.py                       # transformer LM and CNN, 4 + 20 steps
    python benchmarks/warmup.py --model lm --steps 30 --threads 2
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class LM(nn.Module):
    def __init__(self, vocab: int, d: int, layers: int, seq: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(1, seq, d))
        layer = nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.1, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq), persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        T = ids.shape[1]
        h = self.blocks(self.embed(ids) + self.pos[:, :T], mask=self.mask[:T, :T], is_causal=True)
        return self.head(self.norm(h))


class CNN(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        def block(i: int, o: int) -> nn.Sequential:
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU())
        self.features = nn.Sequential(block(3, 32), block(32, 32), nn.MaxPool2d(2), block(32, 64), block(64, 64),
                                      nn.MaxPool2d(2), block(64, 128), nn.AdaptiveAvgPool2d(1))
        self.fc = nn.Linear(128, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.features(x), 1))


def lm_setup(steps: int):
    vocab, d, layers, seq, batch = 2000, 256, 4, 128, 16
    model = LM(vocab, d, layers, seq)
    data = torch.randint(0, vocab, (steps, batch, seq + 1))

    def loss_fn(m: nn.Module, i: int) -> torch.Tensor:
        ids = data[i]
        logits = m(ids[:, :-1])
        return F.cross_entropy(logits.reshape(-1, vocab), ids[:, 1:].reshape(-1))

    return model, lambda m: torch.optim.AdamW(m.parameters(), lr=3e-4, weight_decay=0.1), loss_fn, \
        "transformer LM (4 layers, d=256, seq 128, batch 16, AdamW)"


def cnn_setup(steps: int):
    model = CNN()
    x, y = torch.randn(steps, 32, 3, 32, 32), torch.randint(0, 10, (steps, 32))

    def loss_fn(m: nn.Module, i: int) -> torch.Tensor:
        return F.cross_entropy(m(x[i]), y[i])

    return model, lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9), loss_fn, \
        "CNN (5 conv+BN blocks, 32x32, batch 32, SGD momentum)"


@contextlib.contextmanager
def suspended(session):
    """Take the session's global hooks and patches out for a baseline step (benchmark only)."""
    from torchtriage import _session

    session._uninstall()
    try:
        yield
    finally:
        with _session._lock:
            _session._active.append(session)
        session._install()


def step(model: nn.Module, opt: torch.optim.Optimizer, loss_fn, i: int) -> float:
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model, i)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return time.perf_counter() - t0


def measure(setup, steps: int, warm: int = 4) -> None:
    import torchtriage

    total = warm + steps
    base_model, make_opt, loss_fn, title = setup(total)
    watched_model = copy.deepcopy(base_model)
    base_opt, watched_opt = make_opt(base_model), make_opt(watched_model)
    for _ in range(2):  # warm the allocator and kernels for both copies, outside any session
        step(base_model, base_opt, loss_fn, 0)
    base, watched = [], []
    with torchtriage.watch(watched_model, watched_opt, on_anomaly="record", report=False) as s:
        for i in range(total):
            with suspended(s):
                base.append(step(base_model, base_opt, loss_fn, i))
            watched.append(step(watched_model, watched_opt, loss_fn, i))
    assert s.report.ok, str(s.report)
    print(f"\n{title}; checks: {[c.name for c in s.checkers]}")
    print(f"{'step':>6} {'baseline ms':>12} {'watched ms':>11} {'overhead':>9}")
    for i in range(warm):
        print(f"{i:>6} {base[i] * 1e3:12.1f} {watched[i] * 1e3:11.1f} {watched[i] / base[i] - 1:+9.1%}")
    b, w = base[warm:], watched[warm:]
    ratios = [wi / bi - 1 for wi, bi in zip(w, b)]
    print(f"{f'{warm}-{total - 1}':>6} {statistics.median(b) * 1e3:12.1f} {statistics.median(w) * 1e3:11.1f} "
          f"{statistics.median(ratios):+9.1%}   (medians over {len(b)} steps; median of per-pair ratios)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=("lm", "cnn", "both"), default="both")
    ap.add_argument("--steps", type=int, default=20, help="steps after the 4 first ones")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.model in ("lm", "both"):
        measure(lm_setup, args.steps)
    if args.model in ("cnn", "both"):
        measure(cnn_setup, args.steps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
