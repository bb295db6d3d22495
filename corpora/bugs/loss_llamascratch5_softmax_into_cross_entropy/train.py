# Source: bkitano/llama-from-scratch, llama.ipynb (MASTER_CONFIG, get_batches, the first simple model, train), commit ce3e52f4f154ce16345927c4f2c5082b5ecfea13
# Report: https://github.com/bkitano/llama-from-scratch/issues/5
import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F

MASTER_CONFIG = {
    "vocab_size": 65,
    "batch_size": 32,
    "context_window": 16,
    "d_model": 128,
    "epochs": 300,
    "log_interval": 50,
}


def make_text(n_words=6000, seed=0):
    rng = np.random.default_rng(seed)
    lexicon = ["the", "king", "queen", "lord", "thou", "art", "what", "shall", "speak", "love", "good", "night", "my", "sweet"]
    return " ".join(rng.choice(lexicon, n_words)) + "\n"


text = make_text()
chars = sorted(set(text)) + [chr(c) for c in range(65, 65 + 65)]
vocab = sorted(set(chars))[:MASTER_CONFIG["vocab_size"]]
stoi = {ch: i for i, ch in enumerate(vocab)}
dataset = torch.tensor([stoi[c] for c in text], dtype=torch.int8)


def get_batches(data, split, batch_size, context_window, config=MASTER_CONFIG):
    train = data[:int(.8 * len(data))]
    val = data[int(.8 * len(data)): int(.9 * len(data))]
    test = data[int(.9 * len(data)):]
    batch_data = train
    if split == 'val':
        batch_data = val
    if split == 'test':
        batch_data = test
    ix = torch.randint(0, batch_data.size(0) - context_window - 1, (batch_size,))
    x = torch.stack([batch_data[i:i + context_window] for i in ix]).long()
    y = torch.stack([batch_data[i + 1:i + context_window + 1] for i in ix]).long()
    return x, y


@torch.no_grad()
def evaluate_loss(model, config=MASTER_CONFIG):
    out = {}
    model.eval()
    for split in ["train", "val"]:
        losses = []
        for _ in range(5):
            xb, yb = get_batches(dataset, split, config['batch_size'], config['context_window'])
            _, loss = model(xb, yb)
            losses.append(loss.item())
        out[split] = np.mean(losses)
    model.train()
    return out


class SimpleModel(nn.Module):
    def __init__(self, config=MASTER_CONFIG):
        super().__init__()
        self.config = config
        self.embedding = nn.Embedding(config['vocab_size'], config['d_model'])
        self.linear = nn.Sequential(
            nn.Linear(config['d_model'], config['d_model']),
            nn.ReLU(),
            nn.Linear(config['d_model'], config['vocab_size']),
        )
        print("model params:", sum([m.numel() for m in self.parameters()]))

    def forward(self, idx, targets=None):
        x = self.embedding(idx)
        a = self.linear(x)
        logits = F.softmax(a, dim=-1)

        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, self.config['vocab_size']), targets.view(-1))
            return logits, loss
        else:
            return logits


def train(model, optimizer, scheduler=None, config=MASTER_CONFIG, print_logs=False):
    losses = []
    for epoch in range(config['epochs']):
        optimizer.zero_grad()
        xs, ys = get_batches(dataset, 'train', config['batch_size'], config['context_window'])
        logits, loss = model(xs, targets=ys)
        loss.backward()
        optimizer.step()
        if scheduler:
            scheduler.step()
        if epoch % config['log_interval'] == 0 or epoch == config['epochs'] - 1:
            x = evaluate_loss(model)
            losses += [x]
            if print_logs:
                print(f"Epoch {epoch} | train loss {x['train']:.3f} | val loss {x['val']:.3f}")
    print("validation loss: ", losses[-1]['val'])


def main():
    torch.manual_seed(0)
    model = SimpleModel(MASTER_CONFIG)
    optimizer = torch.optim.Adam(model.parameters())
    train(model, optimizer, print_logs=True)


if __name__ == "__main__":
    main()
