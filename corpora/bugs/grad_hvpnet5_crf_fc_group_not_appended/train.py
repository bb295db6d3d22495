# Source: zjunlp/HVPNeT, modules/train.py (NERTrainer.multiModal_before_train), commit 13432e1ac5ff08aa3e5f83650181194a357be9fd
# Report: https://github.com/zjunlp/HVPNeT/issues/5
# HVPNeT multimodal NER training: parameter groups for the text encoder ('bert'), the visual
# prompt modules ('encoder_conv', 'gates') and the CRF / fc head (lr 5e-2), AdamW, linear warmup
# schedule, image model frozen. BERT and the ResNet visual prompts are reduced to a small
# transformer encoder and a gated projection of image features; torchcrf's CRF is inlined;
# Twitter-2015 to synthetic token sequences with BIO tags.
import torch
import torch.nn as nn
from torch import optim
from transformers import get_linear_schedule_with_warmup


class CRF(nn.Module):
    def __init__(self, num_tags, batch_first=True):
        super().__init__()
        self.num_tags = num_tags
        self.batch_first = batch_first
        self.start_transitions = nn.Parameter(torch.empty(num_tags).uniform_(-0.1, 0.1))
        self.end_transitions = nn.Parameter(torch.empty(num_tags).uniform_(-0.1, 0.1))
        self.transitions = nn.Parameter(torch.empty(num_tags, num_tags).uniform_(-0.1, 0.1))

    def forward(self, emissions, tags, mask, reduction='mean'):
        emissions, tags, mask = emissions.transpose(0, 1), tags.transpose(0, 1), mask.transpose(0, 1).bool()
        seq_length, batch_size = tags.shape
        score = self.start_transitions[tags[0]] + emissions[0, torch.arange(batch_size), tags[0]]
        for i in range(1, seq_length):
            score = score + (self.transitions[tags[i - 1], tags[i]] + emissions[i, torch.arange(batch_size), tags[i]]) * mask[i]
        seq_ends = mask.long().sum(dim=0) - 1
        score = score + self.end_transitions[tags[seq_ends, torch.arange(batch_size)]]
        alpha = self.start_transitions + emissions[0]
        for i in range(1, seq_length):
            nxt = torch.logsumexp(alpha.unsqueeze(2) + self.transitions + emissions[i].unsqueeze(1), dim=1)
            alpha = torch.where(mask[i].unsqueeze(1), nxt, alpha)
        denominator = torch.logsumexp(alpha + self.end_transitions, dim=1)
        llh = score - denominator
        return llh.mean() if reduction == 'mean' else llh.sum()

    def decode(self, emissions, mask):
        emissions, mask = emissions.transpose(0, 1), mask.transpose(0, 1).bool()
        score = self.start_transitions + emissions[0]
        history = []
        for i in range(1, emissions.shape[0]):
            nxt, idx = (score.unsqueeze(2) + self.transitions + emissions[i].unsqueeze(1)).max(dim=1)
            score = torch.where(mask[i].unsqueeze(1), nxt, score)
            history.append(idx)
        score = score + self.end_transitions
        best_last = score.argmax(1)
        paths = [best_last]
        for idx in reversed(history):
            best_last = idx.gather(1, best_last.unsqueeze(1)).squeeze(1)
            paths.append(best_last)
        return torch.stack(paths[::-1], 1)


class HMNeTNERModel(nn.Module):
    def __init__(self, vocab_size, num_labels, hidden=64, img_dim=32):
        super().__init__()
        self.bert = nn.ModuleDict({
            "embeddings": nn.Embedding(vocab_size, hidden),
            "encoder": nn.TransformerEncoder(nn.TransformerEncoderLayer(hidden, 4, 128, 0.1, batch_first=True), 2),
        })
        self.encoder_conv = nn.Sequential(nn.Linear(img_dim, hidden), nn.Tanh())
        self.gates = nn.Linear(hidden * 2, 1)
        self.image_model = nn.Linear(img_dim, img_dim)
        self.num_labels = num_labels
        self.crf = CRF(num_labels, batch_first=True)
        self.fc = nn.Linear(hidden, num_labels)
        self.dropout = nn.Dropout(0.1)

    def forward(self, input_ids, attention_mask, labels=None, images=None):
        seq = self.bert["encoder"](self.bert["embeddings"](input_ids), src_key_padding_mask=attention_mask == 0)
        prompt = self.encoder_conv(self.image_model(images)).unsqueeze(1).expand_as(seq)
        gate = torch.sigmoid(self.gates(torch.cat([seq, prompt], -1)))
        emissions = self.fc(self.dropout(seq + gate * prompt))
        logits = self.crf.decode(emissions, attention_mask)
        loss = None
        if labels is not None:
            loss = -1 * self.crf(emissions, labels, mask=attention_mask.byte(), reduction='mean')
        return logits, loss


class NERTrainer:
    def __init__(self, model, args, train_num_steps):
        self.model, self.args, self.train_num_steps = model, args, train_num_steps

    def multiModal_before_train(self):
        # bert lr
        parameters = []
        params = {'lr':self.args["lr"], 'weight_decay':1e-2}
        params['params'] = []
        for name, param in self.model.named_parameters():
            if 'bert' in name:
                params['params'].append(param)
        parameters.append(params)

        # prompt lr
        params = {'lr':self.args["lr"], 'weight_decay':1e-2}
        params['params'] = []
        for name, param in self.model.named_parameters():
            if 'encoder_conv' in name or 'gates' in name:
                params['params'].append(param)
        parameters.append(params)

        # crf lr
        params = {'lr':5e-2, 'weight_decay':1e-2}
        params['params'] = []
        for name, param in self.model.named_parameters():
            if 'crf' in name or name.startswith('fc'):
                params['params'].append(param)

        self.optimizer = optim.AdamW(parameters)

        for name, par in self.model.named_parameters(): # freeze resnet
            if 'image_model' in name:   par.requires_grad = False

        self.scheduler = get_linear_schedule_with_warmup(optimizer=self.optimizer,
                                                            num_warmup_steps=self.args["warmup_ratio"]*self.train_num_steps,
                                                            num_training_steps=self.train_num_steps)


def make_ner_data(n, g, vocab=300, length=16):
    # tags: 0=O, 1=B-PER, 2=I-PER, 3=B-LOC, 4=I-LOC; entity words come from two vocabulary ranges
    x = torch.randint(20, vocab, (n, length), generator=g)
    y = torch.zeros(n, length, dtype=torch.long)
    for i in range(n):
        for _ in range(2):
            start = int(torch.randint(0, length - 3, (1,), generator=g))
            kind = int(torch.randint(0, 2, (1,), generator=g))
            span = int(torch.randint(1, 3, (1,), generator=g))
            lo = 20 + kind * 30
            x[i, start:start + span] = torch.randint(lo, lo + 30, (span,), generator=g)
            y[i, start] = 1 + 2 * kind
            y[i, start + 1:start + span] = 2 + 2 * kind
            x[i, start + span] = torch.randint(100, vocab, (1,), generator=g)
            y[i, start + span] = 0
    lengths = torch.randint(10, length + 1, (n,), generator=g)
    mask = (torch.arange(length)[None] < lengths[:, None]).long()
    images = torch.randn(n, 32, generator=g)
    return x * mask, y * mask, mask, images


def main():
    torch.manual_seed(1234)
    g = torch.Generator().manual_seed(0)
    train = make_ner_data(800, g)
    test = make_ner_data(300, g)
    model = HMNeTNERModel(vocab_size=300, num_labels=5)
    args = {"lr": 1e-3, "warmup_ratio": 0.01, "num_epochs": 6, "batch_size": 32}
    steps = args["num_epochs"] * (800 // args["batch_size"])
    trainer = NERTrainer(model, args, steps)
    trainer.multiModal_before_train()
    for epoch in range(1, args["num_epochs"] + 1):
        model.train()
        for i in range(0, 800, args["batch_size"]):
            input_ids, labels, attention_mask, images = (t[i:i + args["batch_size"]] for t in train)
            _, loss = model(input_ids, attention_mask, labels, images)
            loss.backward()
            trainer.optimizer.step()
            trainer.scheduler.step()
            model.zero_grad()
        model.eval()
        with torch.no_grad():
            input_ids, labels, attention_mask, images = test
            pred, _ = model(input_ids, attention_mask, None, images)
            m = attention_mask.bool() & (labels > 0)
            ent_acc = (pred[m] == labels[m]).float().mean().item()
            tok_acc = (pred[attention_mask.bool()] == labels[attention_mask.bool()]).float().mean().item()
        print(f"epoch {epoch} loss {loss.item():.4f} test token acc {tok_acc:.4f} entity-token acc {ent_acc:.4f}")


if __name__ == "__main__":
    main()
