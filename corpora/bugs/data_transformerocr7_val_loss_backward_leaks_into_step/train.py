# Source: fengxinjie/Transformer-OCR, train.py (NoamOpt, LabelSmoothing, SimpleLossCompute, run_epoch, train), commit 799de0391d4641a836da419a695aebadb8703247
# Report: https://github.com/fengxinjie/Transformer-OCR/issues/7
import torch
import torch.nn as nn

char2token = {c: i + 3 for i, c in enumerate("0123456789")}
PAD, BOS, EOS = 0, 1, 2


class ListDataset(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        glyphs = torch.randn(10, 8, 8, generator=torch.Generator().manual_seed(7))
        self.items = []
        for _ in range(n):
            digits = torch.randint(0, 10, (4,), generator=g)
            img = torch.cat([glyphs[d] for d in digits], 1) + 0.6 * torch.randn(8, 32, generator=g)
            label = torch.cat([torch.tensor([BOS]), digits + 3, torch.tensor([EOS])])
            self.items.append((img.unsqueeze(0), label[1:], label))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


class Batch:
    def __init__(self, imgs, labels_y, labels):
        self.imgs = imgs
        self.trg = labels[:, :-1]
        self.trg_y = labels_y
        self.src_mask = None
        L = self.trg.size(1)
        self.trg_mask = torch.triu(torch.full((L, L), float("-inf")), 1)
        self.ntokens = (self.trg_y != PAD).sum().item()


class OCRModel(nn.Module):
    def __init__(self, vocab, d_model=96):
        super().__init__()
        self.d_model = d_model
        self.src_embed = nn.Conv2d(1, d_model, (8, 4), stride=(8, 4))
        self.src_pos = nn.Parameter(0.02 * torch.randn(1, 8, d_model))
        self.tgt_embed = nn.Embedding(vocab, d_model)
        self.tgt_pos = nn.Parameter(0.02 * torch.randn(1, 8, d_model))
        self.decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(d_model, 4, 2 * d_model, 0.1, batch_first=True), 2)
        self.generator = nn.Sequential(nn.Linear(d_model, vocab), nn.LogSoftmax(dim=-1))

    def forward(self, imgs, trg, src_mask, trg_mask):
        memory = self.src_embed(imgs).flatten(2).transpose(1, 2) + self.src_pos
        return self.decoder(self.tgt_embed(trg) + self.tgt_pos[:, :trg.size(1)], memory, tgt_mask=trg_mask)


def make_model(vocab):
    return OCRModel(vocab)


class NoamOpt:
    "Optim wrapper that implements rate."
    def __init__(self, model_size, factor, warmup, optimizer):
        self.optimizer = optimizer
        self._step = 0
        self.warmup = warmup
        self.factor = factor
        self.model_size = model_size
        self._rate = 0

    def step(self):
        "Update parameters and rate"
        self._step += 1
        rate = self.rate()
        for p in self.optimizer.param_groups:
            p['lr'] = rate
        self._rate = rate
        self.optimizer.step()

    def rate(self, step = None):
        "Implement `lrate` above"
        if step is None:
            step = self._step
        return self.factor * \
            (self.model_size ** (-0.5) *
            min(step ** (-0.5), step * self.warmup ** (-1.5)))


class LabelSmoothing(nn.Module):
    "Implement label smoothing."
    def __init__(self, size, padding_idx=0, smoothing=0.0):
        super(LabelSmoothing, self).__init__()
        self.criterion = nn.KLDivLoss(reduction='sum')
        self.padding_idx = padding_idx
        self.confidence = 1.0 - smoothing
        self.smoothing = smoothing
        self.size = size
        self.true_dist = None

    def forward(self, x, target):
        assert x.size(1) == self.size
        true_dist = x.data.clone()
        true_dist.fill_(self.smoothing / (self.size - 2))
        true_dist.scatter_(1, target.data.unsqueeze(1), self.confidence)
        true_dist[:, self.padding_idx] = 0
        mask = torch.nonzero(target.data == self.padding_idx)
        if mask.dim() > 0:
            true_dist.index_fill_(0, mask.squeeze(), 0.0)
        self.true_dist = true_dist
        return self.criterion(x, true_dist)

class SimpleLossCompute:
    "A simple loss compute and train function."
    def __init__(self, generator, criterion, opt=None):
        self.generator = generator
        self.criterion = criterion
        self.opt = opt

    def __call__(self, x, y, norm):
        x = self.generator(x)
        loss = self.criterion(x.contiguous().view(-1, x.size(-1)),
                              y.contiguous().view(-1)) / norm
        loss.backward()
        if self.opt is not None:
            self.opt.step()
            self.opt.optimizer.zero_grad()
        return loss.data * norm

def run_epoch(dataloader, model, loss_compute):
    "Standard Training and Logging Function"
    total_tokens = 0
    total_loss = 0
    for i, (imgs, labels_y, labels) in enumerate(dataloader):
        batch = Batch(imgs, labels_y, labels)
        out = model(batch.imgs, batch.trg, batch.src_mask, batch.trg_mask)
        loss = loss_compute(out, batch.trg_y, batch.ntokens)
        total_loss += loss
        total_tokens += batch.ntokens
    return total_loss / total_tokens


def train():
    torch.manual_seed(0)
    batch_size = 64
    train_dataloader = torch.utils.data.DataLoader(ListDataset(1024, seed=1), batch_size=batch_size, shuffle=True, num_workers=0)
    val_dataloader = torch.utils.data.DataLoader(ListDataset(512, seed=2), batch_size=batch_size, shuffle=False, num_workers=0)
    model = make_model(len(char2token) + 3)
    criterion = LabelSmoothing(size=len(char2token) + 3, padding_idx=0, smoothing=0.1)
    model_opt = NoamOpt(model.d_model, 1, 100,
            torch.optim.Adam(model.parameters(), lr=0, betas=(0.9, 0.98), eps=1e-9))
    for epoch in range(6):
        model.train()
        run_epoch(train_dataloader, model,
              SimpleLossCompute(model.generator, criterion, model_opt))
        model.eval()
        test_loss = run_epoch(val_dataloader, model,
              SimpleLossCompute(model.generator, criterion, None))
        left = torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters() if p.grad is not None)).item() if any(p.grad is not None for p in model.parameters()) else 0.0
        print("epoch", epoch, "test_loss %.4f" % test_loss, "| gradient norm left in the model by validation: %.4f" % left)

if __name__ == '__main__':
    train()
