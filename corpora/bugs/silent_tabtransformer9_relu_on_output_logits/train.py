# Source: lucidrains/tab-transformer-pytorch, tab_transformer_pytorch/tab_transformer_pytorch.py (Residual, PreNorm, GEGLU, FeedForward, Attention, Transformer, MLP, TabTransformer), commit bead3698feab028518709c30a5438be548db3391
# Report: https://github.com/lucidrains/tab-transformer-pytorch/issues/9
# TabTransformer for binary classification on a tabular dataset: categorical columns are embedded
# (with per-column offsets into one table) and contextualised by a transformer, continuous columns
# are standardised with continuous_mean_std and layer-normed, and an MLP maps the concatenation to
# one logit trained with BCEWithLogitsLoss and Adam; test loss, accuracy and AUC are printed each
# epoch. einops.rearrange is written out with reshape / transpose; the data set is synthetic
# (5 categorical + 6 continuous columns with a logistic ground truth).
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn, einsum

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)


def exists(val):
    return val is not None


def default(val, d):
    return val if exists(val) else d


class Residual(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x, **kwargs):
        return self.fn(x, **kwargs) + x


class PreNorm(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fn = fn

    def forward(self, x, **kwargs):
        return self.fn(self.norm(x), **kwargs)


class GEGLU(nn.Module):
    def forward(self, x):
        x, gates = x.chunk(2, dim=-1)
        return x * F.gelu(gates)


class FeedForward(nn.Module):
    def __init__(self, dim, mult=4, dropout=0.):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(dim, dim * mult * 2),
            GEGLU(),
            nn.Dropout(dropout),
            nn.Linear(dim * mult, dim)
        )

    def forward(self, x, **kwargs):
        return self.net(x)


class Attention(nn.Module):
    def __init__(self, dim, heads=8, dim_head=16, dropout=0.):
        super().__init__()
        inner_dim = dim_head * heads
        self.heads = heads
        self.scale = dim_head ** -0.5
        self.to_qkv = nn.Linear(dim, inner_dim * 3, bias=False)
        self.to_out = nn.Linear(inner_dim, dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        h = self.heads
        q, k, v = self.to_qkv(x).chunk(3, dim=-1)
        q, k, v = map(lambda t: t.reshape(t.shape[0], t.shape[1], h, -1).transpose(1, 2), (q, k, v))
        sim = einsum('b h i d, b h j d -> b h i j', q, k) * self.scale
        attn = sim.softmax(dim=-1)
        attn = self.dropout(attn)
        out = einsum('b h i j, b h j d -> b h i d', attn, v)
        out = out.transpose(1, 2).reshape(out.shape[0], out.shape[2], -1)
        return self.to_out(out)


class Transformer(nn.Module):
    def __init__(self, num_tokens, dim, depth, heads, dim_head, attn_dropout, ff_dropout):
        super().__init__()
        self.embeds = nn.Embedding(num_tokens, dim)
        self.layers = nn.ModuleList([])
        for _ in range(depth):
            self.layers.append(nn.ModuleList([
                Residual(PreNorm(dim, Attention(dim, heads=heads, dim_head=dim_head, dropout=attn_dropout))),
                Residual(PreNorm(dim, FeedForward(dim, dropout=ff_dropout))),
            ]))

    def forward(self, x):
        x = self.embeds(x)
        for attn, ff in self.layers:
            x = attn(x)
            x = ff(x)
        return x


class MLP(nn.Module):
    def __init__(self, dims, act=None):
        super().__init__()
        dims_pairs = list(zip(dims[:-1], dims[1:]))
        layers = []
        for ind, (dim_in, dim_out) in enumerate(dims_pairs):
            is_last = ind >= (len(dims) - 1)
            linear = nn.Linear(dim_in, dim_out)
            layers.append(linear)
            if is_last:
                continue
            act = default(act, nn.ReLU())
            layers.append(act)
        self.mlp = nn.Sequential(*layers)

    def forward(self, x):
        return self.mlp(x)


class TabTransformer(nn.Module):
    def __init__(self, *, categories, num_continuous, dim, depth, heads, dim_head=16, dim_out=1,
                 mlp_hidden_mults=(4, 2), mlp_act=None, num_special_tokens=2, continuous_mean_std=None,
                 attn_dropout=0., ff_dropout=0.):
        super().__init__()
        assert all(map(lambda n: n > 0, categories)), 'number of each category must be positive'
        self.num_categories = len(categories)
        self.num_unique_categories = sum(categories)
        self.num_special_tokens = num_special_tokens
        total_tokens = self.num_unique_categories + num_special_tokens
        categories_offset = F.pad(torch.tensor(list(categories)), (1, 0), value=num_special_tokens)
        categories_offset = categories_offset.cumsum(dim=-1)[:-1]
        self.register_buffer('categories_offset', categories_offset)
        if exists(continuous_mean_std):
            assert continuous_mean_std.shape == (num_continuous, 2), f'continuous_mean_std must have a shape of ({num_continuous}, 2) where the last dimension contains the mean and variance respectively'
        self.register_buffer('continuous_mean_std', continuous_mean_std)
        self.norm = nn.LayerNorm(num_continuous)
        self.num_continuous = num_continuous
        self.transformer = Transformer(num_tokens=total_tokens, dim=dim, depth=depth, heads=heads,
                                       dim_head=dim_head, attn_dropout=attn_dropout, ff_dropout=ff_dropout)
        input_size = (dim * self.num_categories) + num_continuous
        l = input_size // 8
        hidden_dimensions = list(map(lambda t: l * t, mlp_hidden_mults))
        all_dimensions = [input_size, *hidden_dimensions, dim_out]
        self.mlp = MLP(all_dimensions, act=mlp_act)

    def forward(self, x_categ, x_cont):
        assert x_categ.shape[-1] == self.num_categories, f'you must pass in {self.num_categories} values for your categories input'
        x_categ += self.categories_offset
        x = self.transformer(x_categ)
        flat_categ = x.flatten(1)
        assert x_cont.shape[1] == self.num_continuous, f'you must pass in {self.num_continuous} values for your continuous input'
        if exists(self.continuous_mean_std):
            mean, std = self.continuous_mean_std.unbind(dim=-1)
            x_cont = (x_cont - mean) / std
        normed_cont = self.norm(x_cont)
        x = torch.cat((flat_categ, normed_cont), dim=-1)
        return self.mlp(x)


def make_data(n, categories, rng):
    x_categ = np.stack([rng.integers(0, c, n) for c in categories], 1)
    x_cont = rng.normal(2.0, 3.0, (n, 6))
    cat_effects = [rng.normal(0, 1.2, c) for c in categories]
    logit = sum(e[x_categ[:, j]] for j, e in enumerate(cat_effects)) + (x_cont - 2.0) @ rng.normal(0, 0.5, 6) - 0.3
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.float32)
    return torch.from_numpy(x_categ), torch.from_numpy(x_cont).float(), torch.from_numpy(y)


def auc(scores, labels):
    order = np.argsort(scores)
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    pos = labels == 1
    return (ranks[pos].sum() - pos.sum() * (pos.sum() + 1) / 2) / (pos.sum() * (~pos).sum())


def main():
    categories = (10, 5, 6, 5, 8)
    full = make_data(4000, categories, np.random.default_rng(0))
    tr = tuple(t[:3000] for t in full)
    te = tuple(t[3000:] for t in full)
    cont_mean_std = torch.stack([tr[1].mean(0), tr[1].std(0)], dim=-1)
    model = TabTransformer(categories=categories, num_continuous=6, dim=16, dim_out=1, depth=2, heads=4,
                           attn_dropout=0.1, ff_dropout=0.1, mlp_hidden_mults=(4, 2), mlp_act=nn.ReLU(),
                           continuous_mean_std=cont_mean_std)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.BCEWithLogitsLoss()
    for epoch in range(6):
        model.train()
        perm = torch.randperm(len(tr[2]))
        for b in range(0, len(perm), 128):
            idx = perm[b:b + 128]
            logits = model(tr[0][idx].clone(), tr[1][idx]).squeeze(-1)
            loss = loss_fn(logits, tr[2][idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            logits = model(te[0].clone(), te[1]).squeeze(-1)
            test_loss = loss_fn(logits, te[2]).item()
            acc = ((logits > 0).float() == te[2]).float().mean().item()
            frac_zero = (logits == 0).float().mean().item()
        print('epoch %d  train loss %.4f  test loss %.4f  acc %.4f  auc %.4f  logits==0: %.3f' % (
            epoch, loss.item(), test_loss, acc, auc(logits.numpy(), te[2].numpy()), frac_zero))


if __name__ == '__main__':
    main()
