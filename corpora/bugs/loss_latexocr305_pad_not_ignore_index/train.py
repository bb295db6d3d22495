# Source: lukas-blecher/LaTeX-OCR, pix2tex/models (decoder = AutoregressiveWrapper(TransformerWrapper(...), pad_value=args.pad_token)) with x-transformers 0.15.0 AutoregressiveWrapper
# Report: https://github.com/lukas-blecher/LaTeX-OCR/issues/305
import torch
import torch.nn as nn
import torch.nn.functional as F


class TransformerWrapper(nn.Module):
    def __init__(self, num_tokens, max_seq_len, dim=64):
        super().__init__()
        self.max_seq_len = max_seq_len
        self.token_emb = nn.Embedding(num_tokens, dim)
        self.pos_emb = nn.Embedding(max_seq_len, dim)
        layer = nn.TransformerEncoderLayer(dim, 4, dim * 2, dropout=0.0, batch_first=True, norm_first=True)
        self.attn_layers = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        self.to_logits = nn.Linear(dim, num_tokens)

    def forward(self, x, context=None, mask=None):
        n = x.shape[1]
        h = self.token_emb(x) + self.pos_emb(torch.arange(n)) + context[:, None, :]
        causal = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
        h = self.attn_layers(h, mask=causal)
        return self.to_logits(h)


class AutoregressiveWrapper(nn.Module):
    def __init__(self, net, ignore_index=-100, pad_value=0):
        super().__init__()
        self.pad_value = pad_value
        self.ignore_index = ignore_index
        self.net = net
        self.max_seq_len = net.max_seq_len

    def forward(self, x, **kwargs):
        xi = x[:, :-1]
        xo = x[:, 1:]
        # help auto-solve a frequent area of confusion around input masks in auto-regressive
        # if user supplies a mask that is only off by one from the source sequence, resolve it for them
        mask = kwargs.get('mask', None)
        if mask is not None and mask.shape[1] == x.shape[1]:
            mask = mask[:, :-1]
            kwargs['mask'] = mask
        out = self.net(xi, **kwargs)
        loss = F.cross_entropy(out.transpose(1, 2), xo, ignore_index=self.ignore_index)
        return loss


class Model(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(args.patch_dim, 64), nn.ReLU(), nn.Linear(64, 64))
        self.decoder = AutoregressiveWrapper(TransformerWrapper(num_tokens=args.num_tokens, max_seq_len=args.max_seq_len),
                                             pad_value=args.pad_token)

    def forward(self, im, tgt_seq, **kwargs):
        return self.decoder(tgt_seq, context=self.encoder(im), **kwargs)


class Args:
    num_tokens = 40
    max_seq_len = 20
    pad_token = 0
    bos_token = 1
    eos_token = 2
    patch_dim = 32


def make_batch(args, n, g):
    lengths = torch.randint(3, 8, (n,), generator=g)
    formula = torch.randint(3, args.num_tokens, (n, args.max_seq_len), generator=g)
    im = torch.zeros(n, args.patch_dim)
    seq = torch.full((n, args.max_seq_len), args.pad_token)
    for i in range(n):
        L = int(lengths[i])
        seq[i, 0] = args.bos_token
        seq[i, 1:L + 1] = formula[i, :L]
        seq[i, L + 1] = args.eos_token
        im[i, :L] = formula[i, :L].float() / args.num_tokens
    mask = seq != args.pad_token
    return im, seq, mask


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    args = Args()
    model = Model(args)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    val_im, val_seq, val_mask = make_batch(args, 256, g)
    for i in range(201):
        im, seq, mask = make_batch(args, 32, g)
        loss = model(im, seq, mask=mask)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if i % 50 == 0:
            with torch.no_grad():
                logits = model.decoder.net(val_seq[:, :-1], context=model.encoder(val_im))
                tok = F.cross_entropy(logits.transpose(1, 2), val_seq[:, 1:], reduction='none')
                real = val_seq[:, 1:] != args.pad_token
            print(f"step {i} loss {loss.item():.4f} | val loss on formula tokens {tok[real].mean().item():.4f} "
                  f"| on [PAD] {tok[~real].mean().item():.4f} | [PAD] share of targets {(~real).float().mean().item():.2f}")


if __name__ == "__main__":
    main()
