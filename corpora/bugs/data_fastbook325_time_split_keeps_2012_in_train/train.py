# Source: fastai/fastbook, 09_tabular.ipynb (bulldozers: train/valid split by sale date, tabular neural net)
# Report: https://github.com/fastai/fastbook/issues/325
import numpy as np
import pandas as pd
import torch
import torch.nn as nn


def make_bulldozers(n=6000, seed=0):
    rng = np.random.default_rng(seed)
    months = pd.period_range("2008-01", "2012-04", freq="M")
    saledate = months[rng.integers(0, len(months), n)].to_timestamp()
    df = pd.DataFrame({"saledate": saledate})
    df["YearMade"] = rng.integers(1960, 2011, n)
    df["MachineHoursCurrentMeter"] = rng.gamma(2.0, 2000.0, n)
    df["ProductSize"] = rng.integers(0, 6, n)
    df["Enclosure"] = rng.integers(0, 3, n)
    t = (df.saledate.dt.year - 2008) * 12 + df.saledate.dt.month
    market = np.where(t > 40, 0.4 * np.sin((t - 40) / 5.0), 0.0)
    df["SalePrice"] = np.exp(
        10.0 + 0.02 * (df.YearMade - 1990) - 0.00003 * df.MachineHoursCurrentMeter
        + 0.15 * df.ProductSize + 0.1 * df.Enclosure + 0.004 * t + market
        + rng.normal(0, 0.1, n))
    return df


df = make_bulldozers()
dep_var = 'SalePrice'
df[dep_var] = np.log(df[dep_var])

df['saleYear'] = df.saledate.dt.year
df['saleMonth'] = df.saledate.dt.month
df['saleElapsed'] = (df.saledate - pd.Timestamp('2008-01-01')).dt.days

cond = (df.saleYear<2011) | (df.saleMonth<10)
train_idx = np.where( cond)[0]
valid_idx = np.where(~cond)[0]

splits = (list(train_idx),list(valid_idx))
print('train rows', len(train_idx), 'valid rows', len(valid_idx))
print('train sales', df.saledate.iloc[train_idx].min().date(), '..', df.saledate.iloc[train_idx].max().date(),
      '| valid sales', df.saledate.iloc[valid_idx].min().date(), '..', df.saledate.iloc[valid_idx].max().date())
print('train rows sold after the first validation sale:',
      int((df.saledate.iloc[train_idx] > df.saledate.iloc[valid_idx].min()).sum()))

cont = ['YearMade', 'MachineHoursCurrentMeter', 'saleYear', 'saleMonth', 'saleElapsed']
cat = ['ProductSize', 'Enclosure']
xs = df[cont].astype('float32').values
means, stds = xs[splits[0]].mean(0), xs[splits[0]].std(0)
xs = (xs - means) / stds
cats = df[cat].values
y = df[dep_var].values.astype('float32')


class TabularModel(nn.Module):
    def __init__(self, emb_szs, n_cont, layers):
        super().__init__()
        self.embeds = nn.ModuleList([nn.Embedding(ni, nf) for ni, nf in emb_szs])
        self.bn_cont = nn.BatchNorm1d(n_cont)
        sizes = [sum(nf for _, nf in emb_szs) + n_cont] + layers
        mods = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            mods += [nn.Linear(a, b), nn.ReLU(), nn.BatchNorm1d(b)]
        mods.append(nn.Linear(sizes[-1], 1))
        self.layers = nn.Sequential(*mods)

    def forward(self, x_cat, x_cont):
        x = torch.cat([e(x_cat[:, i]) for i, e in enumerate(self.embeds)], 1)
        x = torch.cat([x, self.bn_cont(x_cont)], 1)
        return self.layers(x).squeeze(1)


def r_mse(pred, y):
    return round(float(((pred - y) ** 2).mean().sqrt()), 4)


def fit():
    torch.manual_seed(0)
    Xc, Xn, Y = torch.tensor(cats), torch.tensor(xs, dtype=torch.float32), torch.tensor(y)
    tr, va = torch.tensor(splits[0]), torch.tensor(splits[1])
    y_range = (Y[tr].min().item() * 0.9, Y[tr].max().item() * 1.1)
    learn = TabularModel([(6, 4), (3, 3)], len(cont), [200, 100])
    opt = torch.optim.Adam(learn.parameters(), lr=1e-3)
    for epoch in range(12):
        learn.train()
        perm = tr[torch.randperm(len(tr))]
        for i in range(0, len(perm), 256):
            b = perm[i:i + 256]
            pred = torch.sigmoid(learn(Xc[b], Xn[b])) * (y_range[1] - y_range[0]) + y_range[0]
            loss = nn.functional.mse_loss(pred, Y[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
        learn.eval()
        with torch.no_grad():
            pv = torch.sigmoid(learn(Xc[va], Xn[va])) * (y_range[1] - y_range[0]) + y_range[0]
        if epoch % 3 == 2:
            print('epoch', epoch, 'train loss', round(loss.item(), 4), 'valid r_mse', r_mse(pv, Y[va]))


if __name__ == "__main__":
    fit()
