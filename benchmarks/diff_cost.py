"""Cost of `torchtriage diff` against two plain runs of the same programs (issue 28).

Usage: python benchmarks/diff_cost.py [--steps 3] [--repeat 3]

For each program (an MLP, a small transformer LM) writes A and B (B: the same code, a changed
reduction), then times `python A.py && python B.py` (both running the same `--steps` steps) and
`torchtriage diff --steps N A.py B.py`; prints the medians and their ratio. Both include the
interpreter's start and `import torch` of two processes: what a user waits for.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

MLP = '''
import sys, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
opt = torch.optim.Adam(model.parameters())
x, y = torch.randn(64, 32), torch.randint(0, 10, (64,))
for step in range(int(sys.argv[1])):
    loss = F.cross_entropy(model(x), y{red})
    opt.zero_grad(); loss.backward(); opt.step()
'''
LM = '''
import sys, torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.1, batch_first=True)
model = nn.ModuleDict({{"emb": nn.Embedding(100, 64), "enc": nn.TransformerEncoder(layer, 2),
                       "out": nn.Linear(64, 100)}})
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
tokens = torch.randint(0, 100, (8, 33))
mask = nn.Transformer.generate_square_subsequent_mask(32)
for step in range(int(sys.argv[1])):
    h = model["enc"](model["emb"](tokens[:, :-1]), mask=mask, is_causal=True)
    logits = model["out"](h)
    loss = F.cross_entropy(logits.reshape(-1, 100), tokens[:, 1:].reshape(-1){red})
    opt.zero_grad(); loss.backward(); opt.step()
'''


def timed(argv: list[str], cwd: str) -> float:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, capture_output=True, check=False)
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    py = sys.executable
    print(f"{'program':12} {'two plain runs':>15} {'diff':>8} {'ratio':>6}")
    for name, source in (("mlp", MLP), ("transformer", LM)):
        with tempfile.TemporaryDirectory() as tmp:
            for side, red in (("a", ""), ("b", ', reduction="sum"')):
                with open(os.path.join(tmp, f"{side}.py"), "w") as fh:
                    fh.write(source.format(red=red))
            steps = str(args.steps)
            plain, diff = [], []
            for _ in range(args.repeat):
                plain.append(timed([py, "a.py", steps], tmp) + timed([py, "b.py", steps], tmp))
                diff.append(timed([py, "-m", "torchtriage", "diff", "--steps", steps, "a.py", "b.py", "1000"], tmp))
            p_med, d_med = statistics.median(plain), statistics.median(diff)
            print(f"{name:12} {p_med:14.2f}s {d_med:7.2f}s {d_med / p_med:5.2f}x")


if __name__ == "__main__":
    main()
