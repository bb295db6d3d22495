# Source: iarai/NeurIPS2022-traffic4cast, t4c22/dataloading/t4c22_dataset.py (+ cc baseline notebook training loop), commit 10406242bc88151dcf1e40b83183ba68e38812b8
# Report: https://github.com/iarai/NeurIPS2022-traffic4cast/pull/22
# Traffic4cast 2022 core competition (congestion classes): each item is (day, t) with loop counter
# inputs on the nodes at t-4..t-1 and congestion classes on the edges at t, "i.e. overlapping
# sampling". Synthetic city: 20 loop counter nodes, 30 road edges, 3 congestion classes, 12 training
# days plus 3 later days kept as the test set.
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

NUM_NODES = 20
NUM_EDGES = 30


def make_city(num_days, seed):
    rng = np.random.default_rng(seed)
    mix = rng.normal(size=(NUM_NODES, NUM_EDGES)) / np.sqrt(NUM_NODES)
    days = []
    for _ in range(num_days):
        # a day-specific traffic state drifting slowly over the 96 15-minute bins
        state = np.cumsum(rng.normal(scale=0.35, size=(96, NUM_NODES)), axis=0)
        counts = state + rng.normal(scale=0.1, size=state.shape)
        incident = np.cumsum(rng.normal(scale=0.35, size=(96, NUM_EDGES)), axis=0)
        score = 0.3 * state @ mix + incident
        cc = np.digitize(score, [-0.6, 0.6])
        days.append((counts.astype(np.float32), cc.astype(np.int64)))
    return days


class T4c22Dataset(torch.utils.data.Dataset):
    def __init__(self, days, limit: int = None):
        super().__init__()
        self.days = days
        self.limit = limit
        self.day_t = [(day, t) for day in range(len(days)) for t in range(4, 96)]

    def __len__(self) -> int:
        if self.limit is not None:
            return min(self.limit, len(self.day_t))
        return len(self.day_t)

    def __getitem__(self, idx: int):
        if idx > self.__len__():
            raise IndexError("Index out of bounds")
        day, t = self.day_t[idx]
        counts, cc = self.days[day]
        # x: 4 time steps of loop counters on nodes
        x = torch.from_numpy(counts[t - 4:t].T.copy())
        # y: congestion classes on edges
        y = torch.from_numpy(cc[t])
        return x, y


class CongestioNN(nn.Module):
    def __init__(self, hidden=256):
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(), nn.Linear(NUM_NODES * 4, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, NUM_EDGES * 3))

    def forward(self, x):
        return self.net(x).view(-1, 3, NUM_EDGES)


@torch.no_grad()
def evaluate(model, loader):
    losses = []
    for x, y in loader:
        losses.append(F.cross_entropy(model(x), y).item())
    return float(np.mean(losses))


def main():
    torch.manual_seed(0)
    city = make_city(15, seed=1)
    dataset = T4c22Dataset(city[:12])
    test_dataset = T4c22Dataset(city[12:])

    spl = int(((0.8 * len(dataset)) // 2) * 2)
    train_dataset, val_dataset = torch.utils.data.random_split(dataset, [spl, len(dataset) - spl])

    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=32, shuffle=True)
    val_loader = torch.utils.data.DataLoader(val_dataset, batch_size=256)
    test_loader = torch.utils.data.DataLoader(test_dataset, batch_size=256)

    model = CongestioNN()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.001)
    for epoch in range(20):
        model.train()
        losses = []
        for x, y in train_loader:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        model.eval()
        if epoch % 4 == 3 or epoch == 0:
            print(f"epoch {epoch} train loss {np.mean(losses):.4f} val loss {evaluate(model, val_loader):.4f} "
                  f"test loss (unseen days) {evaluate(model, test_loader):.4f}")


if __name__ == "__main__":
    main()
