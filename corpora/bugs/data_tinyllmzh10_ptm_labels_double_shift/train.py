# Source: wdndev/tiny-llm-zh, tinyllm_dataset.py (PTMDataset) + modeling_tinyllm.py (causal-LM loss), commit 0ee5244d1d0ed0bc6018bf9b2ecbe25e864d47f5
# Report: https://github.com/wdndev/tiny-llm-zh/issues/10
# Pre-training of a small causal LM: PTMDataset cuts the packed uint16 token stream into
# max_length rows and returns input_ids / labels; the model's forward computes the usual
# causal-LM loss (logits[..., :-1, :] against labels[..., 1:]). The tokenizer and the
# pre-training corpus are replaced by a synthetic token stream with a learnable next-token
# rule, the TinyLLM decoder by one small causal transformer layer, the Trainer by a plain loop.
import random
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

VOCAB = 64


class PTMDataset(Dataset):
    def __init__(self, data, max_length=33):
        super(PTMDataset, self).__init__()
        data = data[:max_length * int(len(data) / max_length)]
        self.data = data.reshape(-1, max_length)
        self.shuffle_index = list(range(len(self.data)))
        random.shuffle(self.shuffle_index)
        print("train data.shape:{}".format(self.data.shape))

    def __len__(self):
        return self.data.shape[0]

    def __getitem__(self, index: int):
        index = self.shuffle_index[index]
        sample = self.data[index]
        X = np.array(sample[:-1]).astype(np.int64)
        Y = np.array(sample[1:]).astype(np.int64)
        input_ids = torch.LongTensor(X)
        labels = torch.LongTensor(Y)

        return {
            "input_ids": input_ids,
            "labels": labels,
        }


class TinyllmForCausalLM(nn.Module):
    def __init__(self, vocab_size=VOCAB, hidden_size=64, num_heads=4, max_pos=64):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, hidden_size)
        self.embed_pos = nn.Embedding(max_pos, hidden_size)
        self.layer = nn.TransformerEncoderLayer(hidden_size, num_heads, dim_feedforward=128,
                                                dropout=0.0, batch_first=True, norm_first=True)
        self.norm = nn.LayerNorm(hidden_size)
        self.lm_head = nn.Linear(hidden_size, vocab_size, bias=False)

    def forward(self, input_ids, labels=None):
        T = input_ids.shape[1]
        pos = torch.arange(T)
        h = self.embed_tokens(input_ids) + self.embed_pos(pos)
        mask = nn.Transformer.generate_square_subsequent_mask(T)
        h = self.layer(h, src_mask=mask, is_causal=True)
        logits = self.lm_head(self.norm(h))
        loss = None
        if labels is not None:
            shift_logits = logits[..., :-1, :].contiguous()
            shift_labels = labels[..., 1:].contiguous()
            loss = F.cross_entropy(shift_logits.view(-1, shift_logits.size(-1)), shift_labels.view(-1),
                                   ignore_index=-100)
        return loss, logits


def make_stream(n_tokens, rng, perm):
    toks = np.empty(n_tokens, dtype=np.uint16)
    toks[0] = rng.randint(VOCAB)
    for i in range(1, n_tokens):
        toks[i] = perm[toks[i - 1]] if rng.rand() < 0.9 else rng.randint(VOCAB)
    return toks


def evaluate(model, rows):
    # next-token quality on held-out rows: logits at t predict token t+1
    x = torch.from_numpy(rows.astype(np.int64))
    with torch.no_grad():
        _, logits = model(x[:, :-1])
    pred_logits = logits.reshape(-1, VOCAB)
    target = x[:, 1:].reshape(-1)
    nll = F.cross_entropy(pred_logits, target).item()
    acc = (pred_logits.argmax(-1) == target).float().mean().item()
    return nll, acc


def main():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    rng = np.random.RandomState(0)
    perm = rng.permutation(VOCAB)
    train_stream = make_stream(33 * 1024, rng, perm)
    eval_rows = make_stream(33 * 128, rng, perm).reshape(-1, 33)

    ds = PTMDataset(train_stream, max_length=33)
    loader = DataLoader(ds, batch_size=32, shuffle=False)
    model = TinyllmForCausalLM()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    t0 = time.time()
    for epoch in range(3):
        model.train()
        losses = []
        for batch in loader:
            loss, _ = model(**batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        model.eval()
        nll, acc = evaluate(model, eval_rows)
        print("epoch %d train_loss %.4f eval_next_token_nll %.4f eval_next_token_acc %.4f eval_ppl %.2f"
              % (epoch + 1, np.mean(losses), nll, acc, float(np.exp(nll))))
    print("done in %.1fs" % (time.time() - t0))


if __name__ == "__main__":
    main()
