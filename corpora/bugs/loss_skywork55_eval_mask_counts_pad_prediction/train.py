# Source: SkyworkAI/Skywork, eval/eval_loss.py (compute_loss, main), commit 460868dad89a0c91eb46acf12427a769b69aeeee
# Report: https://github.com/SkyworkAI/Skywork/issues/55 (fixed by https://github.com/SkyworkAI/Skywork/pull/65)
# Per-token loss evaluation of a causal LM: texts are tokenized without special tokens,
# right-padded with pad = eos, and compute_loss sums the token cross-entropies under the
# attention mask and divides by the number of predicted tokens. The HF checkpoints,
# tensor_parallel and the pg19 data set are replaced by a small causal transformer trained
# here on synthetic token streams of varying length (the evaluation part is kept as is).
import random

import numpy as np
import torch
from torch import nn
from torch.nn import CrossEntropyLoss

device = "cpu"
VOCAB = 48
EOS = 0


class TinyCausalLM(nn.Module):
    def __init__(self, dim=64, heads=4, layers=2, max_len=64):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim)
        self.pos = nn.Embedding(max_len, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.lm_head = nn.Linear(dim, VOCAB)

    def forward(self, input_ids, attention_mask=None):
        n = input_ids.size(1)
        causal = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
        pad = None if attention_mask is None else attention_mask == 0
        h = self.embed(input_ids) + self.pos(torch.arange(n))
        h = self.blocks(h, mask=causal, src_key_padding_mask=pad)

        class Out:
            pass
        out = Out()
        out.logits = self.lm_head(h)
        return out


def make_texts(n, seed):
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        length = rng.randint(12, 48)
        start, step = rng.randint(1, VOCAB - 1), rng.choice([1, 2, 3, 5])
        texts.append([(start + k * step) % (VOCAB - 1) + 1 for k in range(length)])
    return texts


def tokenizer(batch_texts, pad_token_id=EOS):
    max_len = max(len(t) for t in batch_texts)
    input_ids = torch.full((len(batch_texts), max_len), pad_token_id)
    attention_mask = torch.zeros((len(batch_texts), max_len), dtype=torch.int64)
    for i, t in enumerate(batch_texts):
        input_ids[i, :len(t)] = torch.tensor(t)
        attention_mask[i, :len(t)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def pretrain(model, texts, steps=300, batch_size=16):
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    loss_fn = CrossEntropyLoss(ignore_index=-100)
    rng = random.Random(0)
    for step in range(steps):
        batch = tokenizer(rng.sample(texts, batch_size))
        ids, mask = batch["input_ids"], batch["attention_mask"]
        labels = ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100)
        logits = model(ids, attention_mask=mask).logits[:, :-1]
        loss = loss_fn(logits.transpose(1, 2), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 99:
            print(f"pretrain step {step + 1} loss {loss.item():.4f}")


def compute_loss(tokenized_texts, attention_mask, model, add_start_token=False):

    loss_func = CrossEntropyLoss(reduction="none")

    tokenized_texts = tokenized_texts.to(device)
    attention_mask = attention_mask.to(device)

    labels = tokenized_texts[:, 1:]

    with torch.no_grad():
        logits = model(tokenized_texts, attention_mask=attention_mask).logits
        logits = logits[:, :-1]
        loss = loss_func(logits.transpose(1, 2), labels) * attention_mask[:, :-1]

    num_tokens = torch.sum(attention_mask).item() - attention_mask.size(0)
    return torch.sum(loss).item(), num_tokens


def main(batch_size=8):
    model = TinyCausalLM()
    pretrain(model, make_texts(512, 0))
    model.eval()

    input_texts = make_texts(96, 1)
    total_loss = 0
    total_tokens = 0
    for i in range(0, len(input_texts), batch_size):
        batch_texts = input_texts[i:i + batch_size]
        tokenized_texts = tokenizer(batch_texts)
        loss, num_tokens = compute_loss(tokenized_texts=tokenized_texts["input_ids"], attention_mask=tokenized_texts["attention_mask"], model=model)
        total_loss += loss
        total_tokens += num_tokens

    avg_loss = total_loss / total_tokens
    print(f"{avg_loss:.4f}\t{total_tokens}")

    single_loss, single_tokens = 0, 0
    for t in input_texts:
        tok = tokenizer([t])
        loss, num_tokens = compute_loss(tok["input_ids"], tok["attention_mask"], model)
        single_loss += loss
        single_tokens += num_tokens
    print(f"same texts one at a time (no padding): {single_loss / single_tokens:.4f}\t{single_tokens}")


if __name__ == '__main__':
    random.seed(1234)
    np.random.seed(1234)
    torch.manual_seed(1234)
    torch.set_num_threads(1)
    main()
