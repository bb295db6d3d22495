# Source: lucidrains/DALLE-pytorch, dalle_pytorch/dalle_pytorch.py (class DALLE), commit 01062110ac205337b1e076766b6cf67509d00059
# Report: https://github.com/lucidrains/DALLE-pytorch/issues/57
import torch
import torch.nn as nn
import torch.nn.functional as F


def exists(val):
    return val is not None


class Transformer(nn.Module):
    def __init__(self, *, dim, causal, seq_len, depth, heads, dim_head, attn_dropout=0., ff_dropout=0.):
        super().__init__()
        layer = nn.TransformerEncoderLayer(dim, heads, dim * 4, dropout=ff_dropout, batch_first=True, norm_first=True)
        self.layers = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.register_buffer('causal_mask', torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool), 1))

    def forward(self, x, mask=None):
        n = x.shape[1]
        return self.layers(x, mask=self.causal_mask[:n, :n])


class DALLE(nn.Module):
    def __init__(self, *, dim, num_image_tokens, image_fmap_size, num_text_tokens=10000, text_seq_len=256, depth,
                 heads=8, dim_head=64, attn_dropout=0., ff_dropout=0, ignore_index=-100):
        super().__init__()
        image_seq_len = image_fmap_size ** 2
        self.text_emb = nn.Embedding(num_text_tokens, dim)
        self.image_emb = nn.Embedding(num_image_tokens, dim)
        self.text_pos_emb = nn.Embedding(text_seq_len + 1, dim)  # +1 for <bos>
        self.image_pos_emb = nn.Embedding(image_seq_len, dim)
        self.num_text_tokens = num_text_tokens  # for offsetting logits index and calculating cross entropy loss
        self.num_image_tokens = num_image_tokens
        self.text_seq_len = text_seq_len
        self.image_seq_len = image_seq_len
        seq_len = text_seq_len + image_seq_len
        total_tokens = num_text_tokens + num_image_tokens
        self.total_tokens = total_tokens
        self.total_seq_len = seq_len
        self.transformer = Transformer(dim=dim, causal=True, seq_len=seq_len + 1, depth=depth, heads=heads,
                                       dim_head=dim_head, attn_dropout=attn_dropout, ff_dropout=ff_dropout)
        self.to_logits = nn.Sequential(
            nn.LayerNorm(dim),
            nn.Linear(dim, self.total_tokens),
        )
        seq_range = torch.arange(seq_len)[None, :, None]
        logits_range = torch.arange(total_tokens)[None, None, :]
        logits_mask = (
            ((seq_range >= text_seq_len) & (logits_range < num_text_tokens)) |
            ((seq_range < text_seq_len) & (logits_range >= num_text_tokens))
        )
        self.register_buffer('logits_mask', logits_mask)
        self.ignore_index = ignore_index

    def forward(self, text, image=None, mask=None, return_loss=False):
        assert text.shape[-1] == self.text_seq_len
        device, ignore_index, total_seq_len = text.device, self.ignore_index, self.total_seq_len
        text = F.pad(text, (1, 0), value=0)  # use padding as <bos>
        tokens = self.text_emb(text)
        tokens += self.text_pos_emb(torch.arange(text.shape[1], device=device))
        seq_len = tokens.shape[1]
        if exists(image):
            image_len = image.shape[1]
            image_emb = self.image_emb(image)
            image_emb += self.image_pos_emb(torch.arange(image_len, device=device))
            tokens = torch.cat((tokens, image_emb), dim=1)
            seq_len += image_len
        # when training, if the length exceeds the total text + image length
        # remove the last token, since it needs not to be trained
        if tokens.shape[1] > total_seq_len:
            seq_len -= 1
            tokens = tokens[:, :-1]
        out = self.transformer(tokens, mask=mask)
        logits = self.to_logits(out)
        # mask logits to make sure text predicts text (except last token), and image predicts image
        logits_mask = self.logits_mask[:, :seq_len]
        max_neg_value = -torch.finfo(logits.dtype).max
        logits.masked_fill_(logits_mask, max_neg_value)
        if not return_loss:
            return logits
        assert exists(image), 'when training, image must be supplied'
        offsetted_image = image + self.num_text_tokens
        labels = torch.cat((text[:, 1:], offsetted_image), dim=1)
        loss = F.cross_entropy(logits.permute(0, 2, 1), labels)
        return loss


def make_batch(batch_size, g, text_seq_len=16, num_text_tokens=64, num_image_tokens=32):
    lengths = torch.randint(3, 7, (batch_size,), generator=g)
    words = torch.randint(1, num_text_tokens, (batch_size, text_seq_len), generator=g)
    text = torch.where(torch.arange(text_seq_len)[None] < lengths[:, None], words, torch.zeros_like(words))
    image = (text[:, :1] * 3 + torch.arange(4)[None] * text[:, 1:2]) % num_image_tokens  # codebook indices of a 2x2 fmap
    return text, image


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    dalle = DALLE(dim=64, num_image_tokens=32, image_fmap_size=2, num_text_tokens=64, text_seq_len=16, depth=1, heads=4)
    opt = torch.optim.Adam(dalle.parameters(), lr=3e-4)
    val_text, val_image = make_batch(256, g)
    for i in range(151):
        text, images = make_batch(32, g)
        loss = dalle(text, images, return_loss=True)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if i % 50 == 0:
            with torch.no_grad():
                logits = dalle(val_text, val_image)
                labels = torch.cat((val_text, val_image + dalle.num_text_tokens), dim=1)
                per_token = F.cross_entropy(logits.permute(0, 2, 1), labels, reduction='none')
                real = labels != 0
                print(f"{i} loss - {loss.item():.4f} | loss on caption+image tokens {per_token[real].mean().item():.4f} "
                      f"| loss on padding {per_token[~real].mean().item():.4f} | padding share {(~real).float().mean().item():.2f}")


if __name__ == "__main__":
    main()
