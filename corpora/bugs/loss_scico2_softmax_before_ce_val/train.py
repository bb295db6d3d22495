# Source: ariecattan/SciCo, models/muticlass.py (MulticlassCrossEncoder), commit 94d6d0ed4edb29d3a8fea1c4bce44720945d2c27
# Report: https://github.com/ariecattan/SciCo/issues/2
import torch
import torch.nn as nn


class MulticlassCrossEncoder(nn.Module):
    '''
    multiclass classification with labels:
    0 not related
    1 coref
    2. hypernym
    3. neutral (hyponym)
    '''

    def __init__(self, vocab_size=300, hidden_size=64, num_classes=4):
        super(MulticlassCrossEncoder, self).__init__()
        self.embed = nn.Embedding(vocab_size, hidden_size)
        self.model = nn.Sequential(nn.Linear(hidden_size, hidden_size), nn.Tanh())
        self.linear = nn.Linear(hidden_size, num_classes)
        self.criterion = torch.nn.CrossEntropyLoss()

    def forward(self, input_ids, attention_mask):
        emb = self.embed(input_ids) * attention_mask[..., None]
        cls_vector = self.model(emb.sum(1) / attention_mask.sum(1, keepdim=True))
        scores = self.linear(cls_vector)
        return scores

    def training_step(self, batch, batch_idx):
        x, y = batch
        input_ids, attention_mask = x
        y_hat = self(input_ids, attention_mask)
        loss = self.criterion(y_hat, y)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        input_ids, attention_mask = x
        y_hat = self(input_ids, attention_mask)
        y_hat = torch.softmax(y_hat, dim=1)
        loss = self.criterion(y_hat, y)
        acc = (y_hat.argmax(1) == y).float().mean()
        return loss, acc

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=3e-3)


def make_pairs(n, g):
    # two mentions <m> a </m> ... <m> b </m>; the relation is a function of the two mention ids
    a = torch.randint(4, 12, (n,), generator=g)
    b = torch.randint(12, 20, (n,), generator=g)
    ctx = torch.randint(20, 300, (n, 6), generator=g)
    input_ids = torch.cat([torch.zeros(n, 1, dtype=torch.long), torch.full((n, 1), 1), a[:, None],
                           torch.full((n, 1), 2), ctx, torch.full((n, 1), 1), b[:, None], torch.full((n, 1), 2)], 1)
    y = ((a % 2) * 2 + (b % 2)).long()
    return (input_ids, torch.ones_like(input_ids)), y


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    train_x, train_y = make_pairs(1024, g)
    val_x, val_y = make_pairs(256, g)
    model = MulticlassCrossEncoder()
    optimizer = model.configure_optimizers()
    for epoch in range(10):
        model.train()
        perm = torch.randperm(len(train_y), generator=g)
        tot = 0.0
        for batch_idx, i in enumerate(range(0, len(perm), 64)):
            idx = perm[i:i + 64]
            batch = ((train_x[0][idx], train_x[1][idx]), train_y[idx])
            loss = model.training_step(batch, batch_idx)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            tot += loss.item()
        model.eval()
        with torch.no_grad():
            val_loss, val_acc = model.validation_step((val_x, val_y), 0)
        print(f"epoch {epoch} train_loss {tot / (batch_idx + 1):.4f} val_loss {val_loss.item():.4f} acc {val_acc.item():.3f}")


if __name__ == "__main__":
    main()
