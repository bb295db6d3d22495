# Source: jsbaan/transformer-from-scratch, train.py (train loop of the copy-task test), as quoted in the report (lines 59-71 at commit 40078344c7a47a37ba7733b83b119e3bfb2d9079)
# Report: https://github.com/jsbaan/transformer-from-scratch/issues/7
import random
from random import choices

import numpy as np
import torch
from torch import nn

PAD, BOS, EOS = 0, 1, 2


class TinySeq2Seq(nn.Module):
    def __init__(self, vocab_size, hidden_dim=64, padding_idx=PAD):
        super().__init__()
        self.padding_idx = padding_idx
        self.embed = nn.Embedding(vocab_size, hidden_dim, padding_idx=padding_idx)
        self.enc_rnn = nn.GRU(hidden_dim, hidden_dim, batch_first=True, bidirectional=True)
        self.dec_rnn = nn.GRU(hidden_dim, 2 * hidden_dim, batch_first=True)
        self.out = nn.Linear(2 * hidden_dim, vocab_size)

    def encoder(self, src, src_padding_mask=None):
        out, _ = self.enc_rnn(self.embed(src))
        return out

    def decoder(self, tgt, encoder_output, src_padding_mask=None, future_mask=None):
        h, _ = self.dec_rnn(self.embed(tgt))
        attn = torch.softmax(h @ encoder_output.transpose(1, 2) / 8.0 + src_padding_mask.unsqueeze(1) * -1e9, -1)
        return self.out(h + attn @ encoder_output)


def construct_batches(corpus, batch_size, max_len=14):
    batches = {"src": [], "tgt": []}
    masks = {"src": [], "tgt": []}
    for i in range(0, len(corpus), batch_size):
        chunk = corpus[i:i + batch_size]
        ids = torch.full((len(chunk), max_len), PAD)
        for j, sent in enumerate(chunk):
            seq = [BOS] + sent + [EOS]
            ids[j, :len(seq)] = torch.tensor(seq)
        batches["src"].append(ids)
        batches["tgt"].append(ids.clone())
        masks["src"].append((ids == PAD).float())
        masks["tgt"].append(None)
    return batches, masks


def train(transformer, optimizer, criterion, batches, masks, n_epochs):
    transformer.train(True)
    num_iters = 0
    for e in range(n_epochs):
        for i, (src_batch, src_mask, tgt_batch, tgt_mask) in enumerate(
            zip(batches["src"], masks["src"], batches["tgt"], masks["tgt"])
        ):
            encoder_output = transformer.encoder(src_batch, src_padding_mask=src_mask)
            decoder_output = transformer.decoder(tgt_batch, encoder_output, src_padding_mask=src_mask, future_mask=tgt_mask)
            decoder_output = decoder_output[:, :-1, :]
            tgt_batch = tgt_batch[:, 1:].clone()

            # Set pad tokens in the target to -100 so they don't incur a loss
            tgt_batch[tgt_batch == transformer.padding_idx] = -100

            batch_loss = criterion(decoder_output.contiguous().permute(0, 2, 1), tgt_batch.contiguous().long())

            # Rough estimate of per-token accuracy in the current training batch
            batch_accuracy = (torch.sum(decoder_output.argmax(dim=-1) == tgt_batch)) / torch.numel(tgt_batch)

            if num_iters % 24 == 0:
                print(f"epoch: {e}, num_iters: {num_iters}, batch_loss: {batch_loss.item():.4f}, batch_accuracy: {batch_accuracy.item():.4f}")
            batch_loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            num_iters += 1
    return batch_loss, batch_accuracy


def main():
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    valid_tokens = list(range(3, 14))
    corpus = [choices(valid_tokens, k=random.randint(3, 10)) for _ in range(480)]
    batches, masks = construct_batches(corpus, batch_size=60)
    transformer = TinySeq2Seq(vocab_size=14)
    optimizer = torch.optim.Adam(transformer.parameters(), lr=3e-3)
    criterion = nn.CrossEntropyLoss()
    loss, acc = train(transformer, optimizer, criterion, batches, masks, n_epochs=10)
    print(f"latest batch loss {loss.item():.4f} accuracy {acc.item():.4f} (test asserts accuracy >= 0.99)")


if __name__ == "__main__":
    main()
