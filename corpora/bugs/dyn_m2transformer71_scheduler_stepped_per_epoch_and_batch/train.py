# Source: aimagelab/meshed-memory-transformer, train.py (train_xe, evaluate_loss, lambda_lr, main loop), commit 5d0600917850756d8edba64dee38458a84b64907
# Report: https://github.com/aimagelab/meshed-memory-transformer/issues/71
# Cross-entropy stage of the Meshed-Memory Transformer for image captioning: Adam(lr=1) with
# the Noam LambdaLR schedule (d_model ** -.5 * min(s ** -.5, s * warmup ** -1.5)), stepped
# per iteration. The memory-augmented encoder / meshed decoder are a small
# nn.Transformer encoder-decoder; COCO region features and captions are synthetic
# (each caption names the classes of the strongest regions).
import random

import numpy as np
import torch
from torch import nn
from torch.nn import NLLLoss
from torch.optim import Adam
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import DataLoader, TensorDataset

random.seed(1234)
torch.manual_seed(1234)
np.random.seed(1234)

VOCAB, PAD, BOS, EOS = 24, 0, 1, 2
N_DET, D_IN, SEQ = 10, 32, 7


class Transformer(nn.Module):
    def __init__(self, bos_idx, d_model=64):
        super().__init__()
        self.bos_idx = bos_idx
        self.d_model = d_model
        self.in_proj = nn.Linear(D_IN, d_model)
        self.word_emb = nn.Embedding(VOCAB, d_model, padding_idx=PAD)
        self.pos_emb = nn.Embedding(SEQ + 2, d_model)
        self.encoder = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(d_model, 4, 128, dropout=0.1, batch_first=True), 3)
        self.decoder = nn.TransformerDecoder(
            nn.TransformerDecoderLayer(d_model, 4, 128, dropout=0.1, batch_first=True), 3)
        self.fc = nn.Linear(d_model, VOCAB, bias=False)

    def forward(self, images, seq):
        enc_output = self.encoder(self.in_proj(images))
        pos = torch.arange(seq.shape[1]).unsqueeze(0)
        mask = torch.triu(torch.ones(seq.shape[1], seq.shape[1], dtype=torch.bool), 1)
        out = self.decoder(self.word_emb(seq) + self.pos_emb(pos), enc_output, tgt_mask=mask,
                           tgt_key_padding_mask=seq == PAD)
        return torch.log_softmax(self.fc(out), dim=-1)


def make_split(n, seed):
    g = torch.Generator().manual_seed(seed)
    protos = torch.randn(VOCAB - 3, D_IN, generator=torch.Generator().manual_seed(99))
    cls = torch.randint(0, VOCAB - 3, (n, N_DET), generator=g)
    det = protos[cls] + 0.3 * torch.randn(n, N_DET, D_IN, generator=g)
    caps = torch.full((n, SEQ + 2), PAD)
    caps[:, 0] = BOS
    lengths = torch.randint(3, SEQ + 1, (n,), generator=g)
    for i in range(n):
        L = int(lengths[i])
        caps[i, 1:L + 1] = cls[i, :L] + 3
        caps[i, L + 1] = EOS
    return TensorDataset(det, caps)


def evaluate_loss(model, dataloader, loss_fn):
    # Validation loss
    model.eval()
    running_loss = .0
    with torch.no_grad():
        for it, (detections, captions) in enumerate(dataloader):
            detections, captions = detections.to(device), captions.to(device)
            out = model(detections, captions)
            captions = captions[:, 1:].contiguous()
            out = out[:, :-1].contiguous()
            loss = loss_fn(out.view(-1, VOCAB), captions.view(-1))
            this_loss = loss.item()
            running_loss += this_loss

    val_loss = running_loss / len(dataloader)
    return val_loss


def train_xe(model, dataloader, optim):
    # Training with cross-entropy
    model.train()
    scheduler.step()
    running_loss = .0
    for it, (detections, captions) in enumerate(dataloader):
        detections, captions = detections.to(device), captions.to(device)
        out = model(detections, captions)
        optim.zero_grad()
        captions_gt = captions[:, 1:].contiguous()
        out = out[:, :-1].contiguous()
        loss = loss_fn(out.view(-1, VOCAB), captions_gt.view(-1))
        loss.backward()

        optim.step()
        this_loss = loss.item()
        running_loss += this_loss

        scheduler.step()

    loss = running_loss / len(dataloader)
    return loss


def main():
    global device, scheduler, loss_fn, e
    device = torch.device('cpu')
    batch_size, warmup = 10, 400
    train_dataset, val_dataset = make_split(60, 0), make_split(40, 1)

    model = Transformer(BOS).to(device)

    def lambda_lr(s):
        warm_up = warmup
        s += 1
        return (model.d_model ** -.5) * min(s ** -.5, s * warm_up ** -1.5)

    # Initial conditions
    optim = Adam(model.parameters(), lr=1, betas=(0.9, 0.98))
    scheduler = LambdaLR(optim, lambda_lr)
    loss_fn = NLLLoss(ignore_index=PAD)
    n_updates = 0

    print("Training starts")
    for e in range(0, 8):
        dataloader_train = DataLoader(train_dataset, batch_size=batch_size, shuffle=True, drop_last=True)
        dataloader_val = DataLoader(val_dataset, batch_size=batch_size, shuffle=False)
        train_loss = train_xe(model, dataloader_train, optim)
        n_updates += len(dataloader_train)
        val_loss = evaluate_loss(model, dataloader_val, loss_fn)
        print("Epoch %d train_loss %.4f val_loss %.4f lr %.6f optimizer steps %d scheduler steps %d" % (
            e, train_loss, val_loss, optim.param_groups[0]['lr'], n_updates, scheduler.last_epoch))


if __name__ == '__main__':
    main()
