# Source: openai/parameter-golf, prepare_caseops_data.py (--val-docs default, train shards start) and the record training script's val-loss evaluation
# Report: https://github.com/openai/parameter-golf/issues/2127
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 32
DOC_LEN = 24
NUM_DOCS = 600
CANONICAL_VAL_DOCS = 250      # the validation stream is always the first 250 canonical documents
SHARD_TOKENS = 2400


def canonical_stream(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (DOC_LEN,), generator=g) for _ in range(NUM_DOCS)]


def prepare_caseops_data(docs, args):
    val_tokens = torch.cat(docs[:CANONICAL_VAL_DOCS])
    train_tokens = torch.cat(docs[args.val_docs:])
    shards = [s for s in torch.split(train_tokens, SHARD_TOKENS) if len(s) == SHARD_TOKENS]
    return shards, val_tokens


class BigramMLP(nn.Module):
    def __init__(self, ctx=4, d=32, hidden=512):
        super().__init__()
        self.ctx = ctx
        self.emb = nn.Embedding(VOCAB, d)
        self.mlp = nn.Sequential(nn.Linear(ctx * d, hidden), nn.ReLU(), nn.Linear(hidden, VOCAB))

    def forward(self, tokens):
        windows = tokens.unfold(0, self.ctx + 1, 1)
        x, y = windows[:, :-1], windows[:, -1]
        return F.cross_entropy(self.mlp(self.emb(x).flatten(1)), y)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--val-docs", type=int, default=50)
    parser.add_argument("--iterations", type=int, default=300)
    args = parser.parse_args()
    torch.manual_seed(0)
    shards, val_tokens = prepare_caseops_data(canonical_stream(), args)
    print(f"{len(shards)} train shards, {sum(len(s) for s in shards)} train tokens, {len(val_tokens)} val tokens; "
          f"uniform loss {torch.log(torch.tensor(float(VOCAB))):.3f}")
    model = BigramMLP()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(1)
    for step in range(args.iterations + 1):
        shard = shards[int(torch.randint(0, len(shards), (1,), generator=g))]
        start = int(torch.randint(0, len(shard) - 1025, (1,), generator=g))
        loss = model(shard[start:start + 1025])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0:
            with torch.no_grad():
                val_loss = model(val_tokens).item()
            print(f"step:{step}/{args.iterations} train_loss:{loss.item():.4f} val_loss:{val_loss:.4f}")


if __name__ == "__main__":
    main()
