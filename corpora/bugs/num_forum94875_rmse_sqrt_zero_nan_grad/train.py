# Report: https://discuss.pytorch.org/t/function-mselossbackward-returned-nan-values-in-its-0th-output/94875
# AutoRec-style recommender trained with an RMSE loss, torch.sqrt(nn.MSELoss()(...)), on the
# observed entries of a user x item rating matrix. Synthetic ratings: 600 users x 100 items with a
# rank-4 taste structure; the last 40 users signed up after the snapshot and have no ratings yet.
import numpy as np
import torch
import torch.nn as nn


class AutoRec(nn.Module):
    def __init__(self, num_items, hidden=64):
        super().__init__()
        self.encoder = nn.Linear(num_items, hidden)
        self.decoder = nn.Linear(hidden, num_items)

    def forward(self, r):
        return self.decoder(torch.sigmoid(self.encoder(r)))


def make_ratings(num_users=600, num_items=100, new_users=40, seed=0):
    rng = np.random.default_rng(seed)
    u = rng.normal(size=(num_users, 4))
    v = rng.normal(size=(num_items, 4))
    ratings = np.clip(np.round(3 + u @ v.T / 2), 1, 5).astype(np.float32)
    mask = (rng.random((num_users, num_items)) < 0.2).astype(np.float32)
    mask[num_users - new_users:] = 0.0
    return torch.from_numpy(ratings * mask), torch.from_numpy(mask)


def main():
    torch.manual_seed(0)
    ratings, mask = make_ratings()
    dataset = torch.utils.data.TensorDataset(ratings, mask)
    loader = torch.utils.data.DataLoader(dataset, batch_size=40, shuffle=False)
    model = AutoRec(ratings.shape[1])
    criterion = nn.MSELoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-5)
    for epoch in range(15):
        losses = []
        for r, m in loader:
            pred = model(r)
            loss = torch.sqrt(criterion(pred * m, r * m))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        with torch.no_grad():
            pred = model(ratings)
            rmse = torch.sqrt(((pred - ratings) ** 2 * mask).sum() / mask.sum()).item()
        print(f"epoch {epoch} mean batch loss {np.mean(losses):.4f} train RMSE on observed ratings {rmse:.4f}")


if __name__ == "__main__":
    main()
