# Source: wenet-e2e/wekws, kws/utils/executor.py + kws/model/loss.py + kws/model/kws_model.py + kws/bin/train.py + examples/hi_xiaowen/s0/conf/gru.yaml, commit 41a3432198f600bbbb049de91f6766e7f63df06f
# Report: https://github.com/wenet-e2e/wekws/issues/72 (fixed by https://github.com/wenet-e2e/wekws/pull/73)
import logging

import torch
import torch.nn as nn
import torch.optim as optim
from torch.nn.utils import clip_grad_norm_
from torch.utils.data import DataLoader, Dataset


def padding_mask(lengths: torch.Tensor) -> torch.Tensor:
    batch_size = lengths.size(0)
    max_len = int(lengths.max().item())
    seq = torch.arange(max_len, dtype=torch.int64, device=lengths.device)
    seq = seq.expand(batch_size, max_len)
    return seq >= lengths.unsqueeze(1)


def max_pooling_loss(logits, target, lengths, min_duration=0):
    mask = padding_mask(lengths)
    num_utts = logits.size(0)
    num_keywords = logits.size(2)

    target = target.cpu()
    loss = 0.0
    for i in range(num_utts):
        for j in range(num_keywords):
            # Add entropy loss CE = -(t * log(p) + (1 - t) * log(1 - p))
            if target[i] == j:
                # For the keyword, do max-polling
                prob = logits[i, :, j]
                m = mask[i].clone().detach()
                m[:min_duration] = True
                prob = prob.masked_fill(m, 0.0)
                prob = torch.clamp(prob, 1e-8, 1.0)
                max_prob = prob.max()
                loss += -torch.log(max_prob)
            else:
                # For other keywords or filler, do min-polling
                prob = 1 - logits[i, :, j]
                prob = prob.masked_fill(mask[i], 1.0)
                prob = torch.clamp(prob, 1e-8, 1.0)
                min_prob = prob.min()
                loss += -torch.log(min_prob)
    loss = loss / num_utts

    # Compute accuracy of current batch
    mask = mask.unsqueeze(-1)
    logits = logits.masked_fill(mask, 0.0)
    max_logits, index = logits.max(1)
    num_correct = 0
    for i in range(num_utts):
        max_p, idx = max_logits[i].max(0)
        # Predict correct as the i'th keyword
        if max_p > 0.5 and idx == target[i]:
            num_correct += 1
        # Predict correct as the filler, filler id < 0
        if max_p < 0.5 and target[i] < 0:
            num_correct += 1
    acc = num_correct / num_utts
    return loss, acc


def criterion(type, logits, target, lengths, min_duration=0):
    if type == 'max_pooling':
        return max_pooling_loss(logits, target, lengths, min_duration)
    raise ValueError(type)


class LinearSubsampling1(nn.Module):
    def __init__(self, idim, odim):
        super().__init__()
        self.out = nn.Sequential(nn.Linear(idim, odim), nn.ReLU())

    def forward(self, x):
        return self.out(x)


class LinearClassifier(nn.Module):
    def __init__(self, input_dim, output_dim):
        super().__init__()
        self.linear = nn.Linear(input_dim, output_dim)

    def forward(self, x):
        return self.linear(x)


class KWSModel(nn.Module):
    def __init__(self, idim, odim, hdim, global_cmvn, preprocessing, backbone, classifier, activation):
        super().__init__()
        self.idim = idim
        self.odim = odim
        self.hdim = hdim
        self.global_cmvn = global_cmvn
        self.preprocessing = preprocessing
        self.backbone = backbone
        self.classifier = classifier
        self.activation = activation

    def forward(self, x):
        if self.global_cmvn is not None:
            x = self.global_cmvn(x)
        x = self.preprocessing(x)
        x, _ = self.backbone(x)
        x = self.classifier(x)
        x = self.activation(x)
        return x


def init_model(configs):
    input_dim = configs['input_dim']
    output_dim = configs['output_dim']
    hidden_dim = configs['hidden_dim']
    preprocessing = LinearSubsampling1(input_dim, hidden_dim)
    backbone = nn.GRU(hidden_dim, hidden_dim, num_layers=configs['backbone']['num_layers'], batch_first=True)
    classifier = LinearClassifier(hidden_dim, output_dim)
    return KWSModel(input_dim, output_dim, hidden_dim, None, preprocessing, backbone, classifier, nn.Sigmoid())


class FbankDataset(Dataset):
    """Synthetic 40-d fbank utterances: keyword 0/1 leave a pattern in a window of frames, filler (-1) does not."""

    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        patterns = torch.randn(2, 40, generator=torch.Generator().manual_seed(7))
        self.items = []
        for k in range(n):
            target = k % 3 - 1
            length = int(torch.randint(30, 50, (1,), generator=g))
            feats = torch.randn(length, 40, generator=g)
            if target >= 0:
                start = int(torch.randint(0, length - 10, (1,), generator=g))
                feats[start:start + 10] += 1.5 * patterns[target]
            self.items.append((f'utt{k}', feats, target))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def padding_batch(batch):
    keys = [b[0] for b in batch]
    lengths = torch.tensor([b[1].size(0) for b in batch], dtype=torch.int32)
    feats = nn.utils.rnn.pad_sequence([b[1] for b in batch], batch_first=True)
    target = torch.tensor([b[2] for b in batch], dtype=torch.int64)
    return keys, feats, target, lengths


class Executor:
    def __init__(self):
        self.step = 0

    def train(self, model, optimizer, data_loader, device, writer, args):
        ''' Train one epoch
        '''
        model.train()
        clip = args.get('grad_clip', 50.0)
        log_interval = args.get('log_interval', 10)
        epoch = args.get('epoch', 0)

        for batch_idx, batch in enumerate(data_loader):
            key, feats, target, feats_lengths = batch
            feats = feats.to(device)
            target = target.to(device)
            feats_lengths = feats_lengths.to(device)
            num_utts = feats_lengths.size(0)
            if num_utts == 0:
                continue
            logits = model(feats)
            loss_type = args.get('criterion', 'max_pooling')
            loss, acc = criterion(loss_type, logits, target, feats_lengths)
            loss.backward()
            grad_norm = clip_grad_norm_(model.parameters(), clip)
            if torch.isfinite(grad_norm):
                optimizer.step()
            if batch_idx % log_interval == 0:
                logging.debug('TRAIN Batch {}/{} loss {:.8f} acc {:.8f}'.format(epoch, batch_idx, loss.item(), acc))
        return loss.item(), grad_norm.item()

    def cv(self, model, data_loader, device, args):
        model.eval()
        # in order to avoid division by 0
        num_seen_utts = 1
        total_loss = 0.0
        total_acc = 0.0
        with torch.no_grad():
            for batch_idx, batch in enumerate(data_loader):
                key, feats, target, feats_lengths = batch
                num_utts = feats_lengths.size(0)
                if num_utts == 0:
                    continue
                logits = model(feats)
                loss, acc = criterion(args.get('criterion', 'max_pooling'), logits, target, feats_lengths)
                if torch.isfinite(loss):
                    num_seen_utts += num_utts
                    total_loss += loss.item() * num_utts
                    total_acc += acc * num_utts
        return total_loss / num_seen_utts, total_acc / num_seen_utts


def main():
    torch.manual_seed(777)
    configs = {'input_dim': 40, 'output_dim': 2, 'hidden_dim': 32, 'backbone': {'type': 'gru', 'num_layers': 2},
               'optim_conf': {'lr': 0.001},
               'training_config': {'grad_clip': 5, 'max_epoch': 8, 'log_interval': 10}}
    train_data_loader = DataLoader(FbankDataset(384, 0), batch_size=32, shuffle=True, collate_fn=padding_batch)
    cv_data_loader = DataLoader(FbankDataset(192, 1), batch_size=64, collate_fn=padding_batch)
    model = init_model(configs)
    device = torch.device('cpu')
    optimizer = optim.Adam(model.parameters(), **configs['optim_conf'])
    scheduler = optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode='min', factor=0.5, patience=3)
    training_config = configs['training_config']
    executor = Executor()
    for epoch in range(training_config['max_epoch']):
        training_config['epoch'] = epoch
        lr = optimizer.param_groups[0]['lr']
        train_loss, grad_norm = executor.train(model, optimizer, train_data_loader, device, None, training_config)
        cv_loss, cv_acc = executor.cv(model, cv_data_loader, device, training_config)
        print('Epoch {} train loss {:.4f} grad_norm {:.2f} | CV info lr {} cv_loss {:.4f} cv_acc {:.4f}'.format(
            epoch, train_loss, grad_norm, lr, cv_loss, cv_acc))
        scheduler.step(cv_loss)


if __name__ == "__main__":
    main()
