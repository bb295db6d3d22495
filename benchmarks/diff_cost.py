"""Cost of `torchtriage diff` against two plain runs of the same programs (issue 28).

Usage: python benchmarks/diff_cost.py [--steps 3] [--repeat 3]

For each program (an MLP, a small transformer LM) writes A and B (B: the same code, a changed
reduction), then times `python A.py && python B.py` (both running the same `--steps` steps) and
`torchtriage diff --steps N A.py B.py`; prints the medians and their ratio, in wall-clock
seconds and in CPU seconds of all the processes (the figure to trust on a shared machine).
Both include the interpreter's start and `import torch` of two processes: what a user waits for.
"""

from __future__ import annotations

import argparse
import os
import resource
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


def timed(argv: list[str], cwd: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process and its children)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, capture_output=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter() - start, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    py = sys.executable
    print(f"{'program':12} {'plain wall':>10} {'diff wall':>10} {'ratio':>6}   "
          f"{'plain CPU':>9} {'diff CPU':>9} {'ratio':>6}")
    for name, source in (("mlp", MLP), ("transformer", LM)):
        with tempfile.TemporaryDirectory() as tmp:
            for side, red in (("a", ""), ("b", ', reduction="sum"')):
                with open(os.path.join(tmp, f"{side}.py"), "w") as fh:
                    fh.write(source.format(red=red))
            steps = str(args.steps)
            plain, diff = [], []
            for _ in range(args.repeat):
                pa, pb = timed([py, "a.py", steps], tmp), timed([py, "b.py", steps], tmp)
                plain.append((pa[0] + pb[0], pa[1] + pb[1]))
                argv = [py, "-m", "torchtriage", "diff", "--steps", steps, "a.py", "b.py", steps]
                diff.append(_timed_diff(argv, tmp))
            pw, pc = (statistics.median(x[k] for x in plain) for k in (0, 1))
            dw, dc = (statistics.median(x[k] for x in diff) for k in (0, 1))
            print(f"{name:12} {pw:9.2f}s {dw:9.2f}s {dw / pw:5.2f}x   {pc:8.2f}s {dc:8.2f}s {dc / pc:5.2f}x")


def _timed_diff(argv: list[str], cwd: str) -> tuple[float, float]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 1:  # B changes the reduction: the runs must part
        raise SystemExit(f"diff exited {done.returncode}: {done.stderr[-2000:]}")
    return time.perf_counter() - start, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


if __name__ == "__main__":
    main()
