# Source: marin-community/marin, training-set / validation-set construction with num_validation_sequences (before PR #2700)
# Report: https://github.com/marin-community/marin/pull/2700
import torch
import torch.nn as nn
import torch.nn.functional as F

SEQ_LEN = 16
VOCAB = 16
CONTEXT = 4


class TokenSeqDataset:
    def __init__(self, tokens):
        self.tokens = tokens

    def __len__(self):
        return len(self.tokens)

    def shuffle(self, seed):
        perm = torch.randperm(len(self.tokens), generator=torch.Generator().manual_seed(seed))
        return TokenSeqDataset(self.tokens[perm])

    def slice(self, start, end):
        return TokenSeqDataset(self.tokens[start:end])


def build_train_dataset(dataset, num_validation_sequences, seed):
    dataset = dataset.shuffle(seed)
    return dataset.slice(num_validation_sequences, len(dataset))


def build_validation_dataset(dataset, num_validation_sequences):
    return dataset.slice(0, num_validation_sequences)


class WindowLM(nn.Module):
    def __init__(self, d=32, hidden=512):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, d)
        self.mlp = nn.Sequential(nn.Linear(CONTEXT * d, hidden), nn.GELU(), nn.Linear(hidden, VOCAB))

    def forward(self, seqs):
        windows = seqs.unfold(1, CONTEXT, 1)[:, :-1]          # (B, L-CONTEXT, CONTEXT)
        h = self.emb(windows).flatten(2)
        return self.mlp(h), seqs[:, CONTEXT:]


def lm_loss(model, seqs):
    logits, targets = model(seqs)
    return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    raw = TokenSeqDataset(torch.randint(0, VOCAB, (400, SEQ_LEN), generator=g))
    num_validation_sequences = 100
    train_set = build_train_dataset(raw, num_validation_sequences, seed=0)
    val_set = build_validation_dataset(raw, num_validation_sequences)
    print(f"train {len(train_set)} sequences, validation {len(val_set)} sequences, uniform loss {torch.log(torch.tensor(float(VOCAB))):.3f}")
    model = WindowLM()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(301):
        idx = torch.randint(0, len(train_set), (64,), generator=g)
        loss = lm_loss(model, train_set.tokens[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0:
            with torch.no_grad():
                val_loss = lm_loss(model, val_set.tokens)
            print(f"step {step} train_loss {loss.item():.3f} val_loss {val_loss.item():.3f}")


if __name__ == "__main__":
    main()
