# Source: EleutherAI/aria, aria/train.py, aria/model/model.py, aria/data/datasets.py, commit ed5a694db302442e00cc27ec37ef2d4bc2b266c1
# Report: https://github.com/EleutherAI/aria/pull/40
import random

import torch
from torch import nn as nn
from torch.nn import functional as F
from torch.utils.data import DataLoader


class ModelConfig:
    def __init__(self, d_model, n_heads, n_layers, ff_mult, drop_p, max_seq_len):
        self.d_model = d_model
        self.n_heads = n_heads
        self.n_layers = n_layers
        self.ff_mult = ff_mult
        self.drop_p = drop_p
        self.max_seq_len = max_seq_len

    def set_vocab_size(self, vocab_size):
        self.vocab_size = vocab_size


class TokenizerLazy:
    def __init__(self, n_pitches=24):
        self.pad_tok, self.bos_tok, self.eos_tok = "<P>", "<S>", "<E>"
        self.special_tokens = [self.pad_tok, self.bos_tok, self.eos_tok]
        self.vocab = self.special_tokens + [("piano", p) for p in range(n_pitches)]
        self.tok_to_id = {tok: i for i, tok in enumerate(self.vocab)}
        self.vocab_size = len(self.vocab)
        self.pad_id = self.tok_to_id[self.pad_tok]

    def encode(self, seq):
        return torch.tensor([self.tok_to_id[tok] for tok in seq])


def make_pieces(tokenizer, n, max_seq_len, rng):
    # melodies that walk up and down a scale with a piece-specific step
    seqs = []
    for _ in range(n):
        length = rng.randint(6, max_seq_len // 2)
        start, step = rng.randrange(24), rng.choice([1, 2, 3, 5])
        notes = [("piano", (start + i * step) % 24) for i in range(length)]
        seq = [tokenizer.bos_tok] + notes + [tokenizer.eos_tok]
        seq = seq[:max_seq_len]
        seq += [tokenizer.pad_tok] * (max_seq_len - len(seq))
        seqs.append(seq)
    return seqs


class TokenizedDataset(torch.utils.data.Dataset):
    def __init__(self, seqs, tokenizer):
        self.seqs = seqs
        self.tokenizer = tokenizer

    def __len__(self):
        return len(self.seqs)

    def __getitem__(self, idx):
        seq = self.seqs[idx]
        src = seq
        tgt = seq[1:] + [self.tokenizer.pad_tok]
        return self.tokenizer.encode(src), self.tokenizer.encode(tgt)


class FusedEncoderBlock(nn.Module):
    def __init__(self, model_config):
        super().__init__()
        self.drop_p = model_config.drop_p
        self.n_heads = model_config.n_heads
        self.d_head = model_config.d_model // model_config.n_heads
        self.mixed_qkv = nn.Linear(model_config.d_model, 3 * model_config.d_model, bias=False)
        self.att_proj_linear = nn.Linear(model_config.d_model, model_config.d_model)
        self.resid_dropout = nn.Dropout(model_config.drop_p)
        self.ff_dropout = nn.Dropout(model_config.drop_p)
        self.ff_linear_1 = nn.Linear(model_config.d_model, model_config.d_model * model_config.ff_mult)
        self.ff_linear_2 = nn.Linear(model_config.d_model * model_config.ff_mult, model_config.d_model)
        self.ff_activation = nn.GELU()
        self.norm1 = nn.LayerNorm(model_config.d_model)
        self.norm2 = nn.LayerNorm(model_config.d_model)

    def forward(self, x):
        x = x + self._att_block(self.norm1(x))
        x = x + self._ff_block(self.norm2(x))
        return x

    def _att_block(self, x):
        batch_size, seq_len, _ = x.shape
        xq, xk, xv = self.mixed_qkv(x).chunk(3, -1)
        xq = xq.view(batch_size, seq_len, self.n_heads, self.d_head).transpose(1, 2)
        xk = xk.view(batch_size, seq_len, self.n_heads, self.d_head).transpose(1, 2)
        xv = xv.view(batch_size, seq_len, self.n_heads, self.d_head).transpose(1, 2)
        att_dropout = self.drop_p if self.training else 0.0
        att = F.scaled_dot_product_attention(query=xq, key=xk, value=xv, dropout_p=att_dropout, is_causal=True)
        out = att.transpose(1, 2).contiguous().view(batch_size, seq_len, self.n_heads * self.d_head)
        return self.resid_dropout(self.att_proj_linear(out))

    def _ff_block(self, x):
        return self.ff_dropout(self.ff_linear_2(self.ff_activation(self.ff_linear_1(x))))


class Transformer(nn.Module):
    def __init__(self, model_config):
        super().__init__()
        self.model_config = model_config
        self.tok_embeddings = nn.Embedding(model_config.vocab_size, model_config.d_model)
        self.pos_embeddings = nn.Embedding(model_config.max_seq_len, model_config.d_model)
        self.out_layer_norm = nn.LayerNorm(model_config.d_model)
        self.encode_layers = nn.ModuleList([FusedEncoderBlock(model_config) for _ in range(model_config.n_layers)])

    def forward(self, src):
        positions = torch.arange(src.shape[1], device=src.device)
        hidden_states = self.tok_embeddings(src) + self.pos_embeddings(positions)
        assert src.shape[1] <= self.model_config.max_seq_len, "Too long."
        for layer in self.encode_layers:
            hidden_states = layer(hidden_states)
        return self.out_layer_norm(hidden_states)


class TransformerLM(nn.Module):
    def __init__(self, model_config):
        super().__init__()
        self.max_seq_len = model_config.max_seq_len
        self.model = Transformer(model_config)
        self.lm_head = nn.Linear(model_config.d_model, model_config.vocab_size, bias=False)

    def forward(self, src):
        return self.lm_head(self.model(src))


def rolling_average(prev_avg, x_new, idx):
    return ((idx * prev_avg) + x_new) / (idx + 1)


def train(model, train_dataloader, val_dataloader, optimizer, scheduler, epochs):
    loss_fn = nn.CrossEntropyLoss()

    def train_loop(dataloader, _epoch):
        avg_train_loss = 0
        model.train()
        for step, batch in enumerate(dataloader):
            src, tgt = batch  # (b_sz, s_len), (b_sz, s_len)
            logits = model(src)  # (b_sz, s_len, v_sz)
            logits = logits.transpose(1, 2)  # Transpose for CrossEntropyLoss
            loss = loss_fn(logits, tgt)
            avg_train_loss = rolling_average(avg_train_loss, loss.item(), step)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            if scheduler:
                scheduler.step()
        return avg_train_loss

    def val_loop(dataloader, _epoch):
        avg_val_loss = 0
        note_correct = note_total = 0
        model.eval()
        for step, batch in enumerate(dataloader):
            src, tgt = batch
            with torch.no_grad():
                logits = model(src)
            pred = logits.argmax(-1)
            notes = tgt >= 3
            note_correct += (pred[notes] == tgt[notes]).sum().item()
            note_total += notes.sum().item()
            logits = logits.transpose(1, 2)
            loss = loss_fn(logits, tgt)
            avg_val_loss = rolling_average(avg_val_loss, loss.item(), step)
        return avg_val_loss, note_correct / note_total

    for epoch in range(1, epochs + 1):
        avg_train_loss = train_loop(dataloader=train_dataloader, _epoch=epoch)
        avg_val_loss, note_acc = val_loop(dataloader=val_dataloader, _epoch=epoch)
        print(f"EPOCH {epoch}/{epochs}: avg_train_loss={avg_train_loss:.4f}, avg_val_loss={avg_val_loss:.4f}, "
              f"val next-note accuracy={note_acc:.3f}")


def main():
    torch.manual_seed(0)
    rng = random.Random(0)
    tokenizer = TokenizerLazy()
    model_config = ModelConfig(d_model=64, n_heads=4, n_layers=2, ff_mult=2, drop_p=0.1, max_seq_len=48)
    model_config.set_vocab_size(tokenizer.vocab_size)
    model = TransformerLM(model_config)
    train_ds = TokenizedDataset(make_pieces(tokenizer, 256, 48, rng), tokenizer)
    val_ds = TokenizedDataset(make_pieces(tokenizer, 64, 48, rng), tokenizer)
    tgt_all = torch.stack([train_ds[i][1] for i in range(len(train_ds))])
    print(f"{(tgt_all == tokenizer.pad_id).sum().item()} of {tgt_all.numel()} target positions are "
          f"{tokenizer.pad_tok}")
    train_dataloader = DataLoader(train_ds, batch_size=32, shuffle=True)
    val_dataloader = DataLoader(val_ds, batch_size=32, shuffle=False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 20))
    train(model, train_dataloader, val_dataloader, optimizer, scheduler, epochs=6)


if __name__ == "__main__":
    main()
