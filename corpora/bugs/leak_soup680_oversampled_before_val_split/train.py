# Report: https://github.com/MakazhanAlpamys/Soup/issues/680
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_source(name, n, seed):
    g = torch.Generator().manual_seed(seed)
    return [{"id": f"{name}{i}", "x": torch.randn(24, generator=g), "label": int(torch.randint(0, 6, (1,), generator=g))}
            for i in range(n)]


def _cycle_to(rows, size):
    return [rows[i % len(rows)] for i in range(size)]


def _combine_interleaved(sources, strategy="over"):
    sizes = [len(s) for s in sources]
    target = max(sizes) if strategy == "over" else min(sizes)
    cycled = [_cycle_to(s, target) for s in sources]
    return [row for group in zip(*cycled) for row in group]


def _finalize(formatted, val_split):
    if val_split > 0:
        split_idx = int(len(formatted) * (1 - val_split))
        return {"train": formatted[:split_idx], "val": formatted[split_idx:]}
    return {"train": formatted}


def load_dataset(sources, val_split=0.1):
    formatted = _combine_interleaved(sources, strategy="over")
    return _finalize(formatted, val_split)


def main():
    torch.manual_seed(0)
    source_a, source_b = make_source("A", 300, 0), make_source("B", 40, 1)
    data = load_dataset([source_a, source_b], val_split=0.1)
    train_ids = {r["id"] for r in data["train"]}
    leaked = sum(r["id"] in train_ids for r in data["val"])
    print(f"train rows {len(data['train'])} val rows {len(data['val'])}; val rows also in train: {leaked}/{len(data['val'])}")
    x = torch.stack([r["x"] for r in data["train"]])
    y = torch.tensor([r["label"] for r in data["train"]])
    vx = torch.stack([r["x"] for r in data["val"]])
    vy = torch.tensor([r["label"] for r in data["val"]])
    model = nn.Sequential(nn.Linear(24, 256), nn.ReLU(), nn.Linear(256, 6))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for epoch in range(30):
        perm = torch.randperm(len(x))
        for i in range(0, len(x), 32):
            idx = perm[i:i + 32]
            loss = F.cross_entropy(model(x[idx]), y[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if epoch % 10 == 9:
            with torch.no_grad():
                val_loss = F.cross_entropy(model(vx), vy).item()
            print(f"epoch {epoch} train_loss {loss.item():.3f} val_loss {val_loss:.3f} (labels are random: honest val_loss >= {math.log(6):.3f})")


if __name__ == "__main__":
    main()
