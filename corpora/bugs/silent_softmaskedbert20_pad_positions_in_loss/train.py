# Source: hiyoung123/SoftMaskedBert, train.py (SoftMaskedBertTrainer, BertDataset), model/soft_masked_bert.py (SoftMaskedBert), model/decotor.py (BiGRU), optim_schedule.py (ScheduledOptim), commit 25b62c735ae6b01457f723a880bf30102223d87a
# Report: https://github.com/hiyoung123/SoftMaskedBert/issues/20
# Soft-Masked BERT for Chinese spelling correction: a BiGRU detector gives each character
# the probability p that it is wrong, the embedding is softly mixed with the [MASK]
# embedding (p * mask_e + (1 - p) * e), a BERT encoder corrects, and the loss is
# gama * NLL(corrector) + (1 - gama) * BCE(detector). Sentences are left-padded to
# max_len with id 0. The pretrained chinese-wwm BERT is replaced by a small randomly
# initialised embedding + transformer encoder; sentences come from a synthetic character
# language where each character follows from the previous one, with 15% random typos.
import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.optim import Adam
from torch.utils.data import DataLoader, Dataset

PAD, CLS, SEP, MASK = 0, 1, 2, 3
VOCAB = 40


class ScheduledOptim():
    '''A simple wrapper class for learning rate scheduling'''

    def __init__(self, optimizer, d_model, n_warmup_steps):
        self._optimizer = optimizer
        self.n_warmup_steps = n_warmup_steps
        self.n_current_steps = 0
        self.init_lr = np.power(d_model, -0.5)

    def step_and_update_lr(self):
        self._update_learning_rate()
        self._optimizer.step()

    def zero_grad(self):
        self._optimizer.zero_grad()

    def _get_lr_scale(self):
        return np.min([
            np.power(self.n_current_steps, -0.5),
            np.power(self.n_warmup_steps, -1.5) * self.n_current_steps])

    def _update_learning_rate(self):
        self.n_current_steps += 1
        lr = self.init_lr * self._get_lr_scale()
        for param_group in self._optimizer.param_groups:
            param_group['lr'] = lr


class BiGRU(nn.Module):
    def __init__(self, embedding_size, hidden, n_layers, dropout=0.0):
        super(BiGRU, self).__init__()
        self.rnn = nn.GRU(embedding_size, hidden, num_layers=n_layers,
                          bidirectional=True, dropout=dropout, batch_first=True)
        self.sigmoid = nn.Sigmoid()
        self.linear = nn.Linear(hidden * 2, 1)

    def forward(self, x):
        out, _ = self.rnn(x)
        prob = self.sigmoid(self.linear(out))
        return prob


class BertEmbeddings(nn.Module):
    def __init__(self, vocab, size, max_len):
        super().__init__()
        self.word = nn.Embedding(vocab, size)
        self.pos = nn.Embedding(max_len, size)
        self.token_type = nn.Embedding(2, size)
        self.norm = nn.LayerNorm(size)

    def forward(self, input_ids, token_type_ids=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        pos = torch.arange(input_ids.shape[1]).unsqueeze(0)
        return self.norm(self.word(input_ids) + self.pos(pos) + self.token_type(token_type_ids))


class SoftMaskedBert(nn.Module):
    def __init__(self, hidden, layer_n, embedding_size=64, max_len=32):
        super(SoftMaskedBert, self).__init__()
        self.embedding = BertEmbeddings(VOCAB, embedding_size, max_len)
        self.detector = BiGRU(embedding_size, hidden, layer_n)
        layer = nn.TransformerEncoderLayer(embedding_size, 4, 128, dropout=0.1, batch_first=True)
        self.corrector = nn.TransformerEncoder(layer, 2)
        self.mask_token_id = torch.tensor([[MASK]])
        self.linear = nn.Linear(embedding_size, VOCAB)
        self.softmax = nn.LogSoftmax(dim=-1)

    def forward(self, input_ids, input_mask, segment_ids):
        e = self.embedding(input_ids=input_ids, token_type_ids=segment_ids)
        p = self.detector(e)
        mask_e = self.embedding(self.mask_token_id)
        e_ = p * mask_e + (1 - p) * e
        h = self.corrector(e_, src_key_padding_mask=input_mask == 0)
        h = h + e
        out = self.softmax(self.linear(h))
        return out, p


class SoftMaskedBertTrainer():
    def __init__(self, hidden=32, layer_n=1, lr=2e-5, gama=0.8, betas=(0.9, 0.999), weight_decay=0.01, warmup_steps=100):
        self.model = SoftMaskedBert(hidden, layer_n)
        optim = Adam(self.model.parameters(), lr=lr, betas=betas, weight_decay=weight_decay)
        self.optim_schedule = ScheduledOptim(optim, hidden, n_warmup_steps=warmup_steps)
        self.criterion_c = nn.NLLLoss()
        self.criterion_d = nn.BCELoss()
        self.gama = gama

    def train(self, train_data, epoch):
        self.model.train()
        return self.iteration(epoch, train_data)

    def evaluate(self, val_data, epoch):
        self.model.eval()
        with torch.no_grad():
            return self.iteration(epoch, val_data, train=False)

    def iteration(self, epoch, data_loader, train=True):
        str_code = "train" if train else "val"
        avg_loss = 0.0
        total_element = 0
        c_correct = 0
        d_correct = 0
        typo_fixed, typo_total = 0, 0
        for i, data in enumerate(data_loader):
            out, prob = self.model(data["input_ids"], data["input_mask"], data["segment_ids"])
            prob = prob.reshape(-1, prob.shape[1])
            loss_d = self.criterion_d(prob, data['label'].float())
            loss_c = self.criterion_c(out.transpose(1, 2), data["output_ids"])
            loss = self.gama * loss_c + (1 - self.gama) * loss_d

            if train:
                self.optim_schedule.zero_grad()
                loss.backward(retain_graph=True)
                self.optim_schedule.step_and_update_lr()

            out = out.argmax(dim=-1)
            c_correct += sum([out[i].equal(data['output_ids'][i]) for i in range(len(out))])
            prob = torch.round(prob).long()
            d_correct += sum([prob[i].equal(data['label'][i]) for i in range(len(prob))])
            typo = data['label'] == 1
            typo_fixed += (out[typo] == data['output_ids'][typo]).sum().item()
            typo_total += typo.sum().item()

            avg_loss += loss.item()
            total_element += len(data["input_ids"])

        print("EP%d_%s, avg_loss=%.4f d_acc=%.3f c_acc=%.3f typos corrected=%.3f" % (
            epoch, str_code, avg_loss / len(data_loader), d_correct / total_element, c_correct / total_element,
            typo_fixed / typo_total))
        return avg_loss / len(data_loader)


class BertDataset(Dataset):
    def __init__(self, dataset, max_len=512, pad_first=True, mode='train'):
        self.dataset = dataset
        self.max_len = max_len
        self.data_size = len(dataset)
        self.pad_first = pad_first
        self.mode = mode

    def __len__(self):
        return self.data_size

    def __getitem__(self, item):
        item = self.dataset.iloc[item]
        input_ids = item['random_text']
        input_ids = [CLS] + list(input_ids)[:min(len(input_ids), self.max_len - 2)] + [SEP]
        input_mask = [1] * len(input_ids)
        segment_ids = [0] * len(input_ids)

        pad_len = self.max_len - len(input_ids)
        if self.pad_first:
            input_ids = [0] * pad_len + input_ids
            input_mask = [0] * pad_len + input_mask
            segment_ids = [0] * pad_len + segment_ids
        else:
            input_ids = input_ids + [0] * pad_len
            input_mask = input_mask + [0] * pad_len
            segment_ids = segment_ids + [0] * pad_len

        output_ids = item['origin_text']
        label = item['label']
        output_ids = [CLS] + list(output_ids)[:min(len(output_ids), self.max_len - 2)] + [SEP]
        label = [0] + list(label)[:min(len(label), self.max_len - 2)] + [0]
        pad_label_len = self.max_len - len(label)
        if self.pad_first:
            output_ids = [0] * pad_len + output_ids
            label = [0] * pad_label_len + label
        else:
            output_ids = output_ids + [0] * pad_len
            label = label + [0] * pad_label_len

        output = {
            'input_ids': input_ids,
            'input_mask': input_mask,
            'segment_ids': segment_ids,
            'output_ids': output_ids,
            'label': label
        }
        return {key: torch.tensor(value) for key, value in output.items()}


def make_corpus(n, rng):
    rows = []
    for _ in range(n):
        length = rng.integers(6, 13)
        c = rng.integers(4, VOCAB)
        origin = []
        for _ in range(length):
            origin.append(int(c))
            c = 4 + (7 * (c - 4) + 3) % (VOCAB - 4)
        noisy, label = list(origin), [0] * length
        for j in range(length):
            if rng.random() < 0.15:
                noisy[j] = int(rng.integers(4, VOCAB))
                label[j] = int(noisy[j] != origin[j])
        rows.append({'origin_text': origin, 'random_text': noisy, 'label': label})
    return pd.DataFrame(rows)


if __name__ == '__main__':
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    dataset = make_corpus(600, rng)
    train = BertDataset(dataset.iloc[:480], max_len=32)
    train = DataLoader(train, batch_size=16, shuffle=True)
    val = BertDataset(dataset.iloc[480:], max_len=32)
    val = DataLoader(val, batch_size=16)
    trainer = SoftMaskedBertTrainer()
    best_loss = 100000
    for e in range(6):
        trainer.train(train, e)
        val_loss = trainer.evaluate(val, e)
        if best_loss > val_loss:
            best_loss = val_loss
            print('Best val loss {:.4f}'.format(best_loss))
