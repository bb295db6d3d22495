# Report: https://github.com/DaoyuanLi2816/Molecule-Generator/pull/21
import torch
import torch.nn as nn
import torch.nn.functional as F

PAD_IDX = 0
VOCAB = ["<pad>", "C", "c", "O", "N", "(", ")", "=", "1", "2", "Cl", "F", "#", "[", "]", "S"]
MAX_LEN = 48


def make_smiles_tensor(n, seed):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(6, 18, (n,), generator=g)
    x = torch.full((n, MAX_LEN), PAD_IDX)
    for i, L in enumerate(lengths.tolist()):
        x[i, :L] = torch.randint(1, len(VOCAB), (L,), generator=g)
    return x


class SmilesAutoencoder(nn.Module):
    def __init__(self, vocab_size=len(VOCAB), emb=32, hidden=64, latent=8):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb, padding_idx=PAD_IDX)
        self.encoder = nn.GRU(emb, hidden, batch_first=True)
        self.to_latent = nn.Linear(hidden, latent)
        self.from_latent = nn.Linear(latent, hidden)
        self.decoder = nn.GRU(emb, hidden, batch_first=True)
        self.out = nn.Linear(hidden, vocab_size)

    def forward(self, x):
        _, h = self.encoder(self.embedding(x))
        z = self.to_latent(h[-1])
        h0 = torch.tanh(self.from_latent(z)).unsqueeze(0)
        dec_in = F.pad(x[:, :-1], (1, 0), value=PAD_IDX)
        y, _ = self.decoder(self.embedding(dec_in), h0)
        return self.out(y)


def train(model, loader, optimizer):
    model.train()
    for x in loader:
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), x.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


@torch.no_grad()
def test(model, loader):
    model.eval()
    correct = total = 0
    for x in loader:
        preds = model(x).argmax(-1)
        correct += (preds == x).sum().item()
        total += x.numel()
    return correct / total


def main():
    torch.manual_seed(0)
    train_x, test_x = make_smiles_tensor(512, 0), make_smiles_tensor(128, 1)
    train_loader = torch.utils.data.DataLoader(train_x, batch_size=32, shuffle=True)
    test_loader = torch.utils.data.DataLoader(test_x, batch_size=64)
    model = SmilesAutoencoder()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    for epoch in range(4):
        loss = train(model, train_loader, optimizer)
        acc = test(model, test_loader)
        print(f"epoch {epoch} train_loss {loss:.4f} test reconstruction accuracy {acc:.3f}")
    print(f"padding share of test positions {(test_x == PAD_IDX).float().mean().item():.3f}")


if __name__ == "__main__":
    main()
