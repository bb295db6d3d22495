# Source: HUST-NingKang-Lab/BGC-Prophet, bgc_prophet/train/data.py, bgc_prophet/train/classifyTrainer.py, bgc_prophet/train/classifier.py, commit e524ff543b0e167b1bb6ff37a99a1e35301bc63c
# Report: https://github.com/HUST-NingKang-Lab/BGC-Prophet/issues/8
# BGC-Prophet classifier training: DataReader (csv -> stratified train/test split on the first
# label), BGCLabelsDataset (gene embeddings looked up per gene), transformerClassifier (transformer
# encoder, mean pooling, sigmoid head), FocalLoss and the classifyTrainer loop. The ESM gene
# embeddings in lmdb are replaced by a dict of random 32-d vectors; the csv by a synthetic frame in
# which every BGC appears as 5 rows with different genomic context windows (ID suffixes _0, _-1,
# _1, _2, _3), as in BGC_train_dataset_classify.csv.
import math
import random

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
import torch.optim as optim
from torch import nn
from torch.utils.data import DataLoader, Dataset

LABELS = ['Alkaloid', 'Terpene', 'NRP', 'Polyketide', 'RiPP', 'Saccharide', 'Other']


def make_dataset_frame(n_bgc=260, seed=0):
    rng = np.random.RandomState(seed)
    rows = []
    for b in range(n_bgc):
        label = LABELS[rng.randint(len(LABELS))]
        family = LABELS.index(label) * 30
        core = [family + rng.randint(30) if rng.uniform() < 0.25 else 300 + rng.randint(3000) for _ in range(12)]
        for suffix in ['_0', '_-1', '_1', '_2', '_3']:
            left = list(300 + rng.randint(3000, size=rng.randint(2, 5)))
            right = list(300 + rng.randint(3000, size=6 - len(left)))
            genes = left + core + right
            td = [0] * len(left) + [1] * len(core) + [0] * len(right)
            rows.append({'ID': f'BGC{b:07d}{suffix}', 'labels': label,
                         'TDsentence': ' '.join(str(g) for g in genes), 'TDlabels': ' '.join(str(t) for t in td)})
    return pd.DataFrame(rows)


class DataReader:

    def __init__(self, df, test_ratio=0.2) -> None:
        self.df = df
        self.test_ratio = test_ratio
        self.embedding_dim = 32
        self.__getData()
        self.__train_test_split()

    def __getData(self):
        self.df['labels'] = self.df['labels'].apply(lambda x: x.split())
        self.df['TDsentence'] = self.df['TDsentence'].apply(lambda x: x.split())
        self.df['TDlabels'] = self.df['TDlabels'].apply(lambda x: x.split()).apply(lambda x: [int(eval(i)) for i in x])
        self.df['labels_rep'] = self.df['labels'].apply(lambda x: x[0])

        self.labels_list = LABELS
        self.labels_num = len(self.labels_list)

    def __len__(self):
        return len(self.df)

    def __getitem__(self, idx):

        sentence = self.df['TDsentence'][idx]
        labels = self.df['labels'][idx]
        TDlabels = self.df['TDlabels'][idx]

        labels_onehot = [1 if label in labels else 0 for label in self.labels_list]
        return sentence, labels_onehot, TDlabels

    def __train_test_split(self):
        groups = self.df.groupby('labels_rep')
        self.train = []
        self.test = []
        for k, v in groups.groups.items():
            vv = list(v)
            random.shuffle(vv)
            self.train += vv[int(v.size*self.test_ratio):]
            self.test += vv[:int(v.size*self.test_ratio)]


class BGCLabelsDataset(Dataset):
    def __init__(self, data, embeddings, mode='train') -> None:
        super().__init__()
        self.data = data
        self.mode = mode
        self.embeddings = embeddings

    def __len__(self):
        if self.mode == 'train':
            return len(self.data.train)
        elif self.mode == 'test':
            return len(self.data.test)
        else:
            raise ValueError("No such mode: {}!".format(self.mode))

    def __getitem__(self, idx):
        if self.mode == 'train':
            index = self.data.train[idx]
        else:
            index = self.data.test[idx]
        sentence, labels_onehot, TDlabels = self.data[index]
        sentence_embedding = torch.stack([self.embeddings[int(word)] for word in sentence])
        return sentence_embedding, torch.tensor(labels_onehot, dtype=torch.float32), torch.tensor(TDlabels, dtype=torch.float32)


class PositionalEncoding(nn.Module):
    def __init__(self, num_hiddens: int, dropout: float = 0.1, max_len: int = 1000):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.P = torch.zeros((1, max_len, num_hiddens))
        X = torch.arange(max_len, dtype=torch.float32).reshape(-1, 1) / torch.pow(
            10000, torch.arange(0, num_hiddens, 2, dtype=torch.float32) / num_hiddens)
        self.P[:, :, 0::2] = torch.sin(X)
        self.P[:, :, 1::2] = torch.cos(X)

    def forward(self, X):
        X = X + self.P[:, :X.shape[1], :].to(X.device)
        return self.dropout(X)


class transformerClassifier(nn.Module):
    def __init__(self, d_model=512, nhead=8, num_encoder_layers=6, max_len=128, dim_feedforward=2048, labels_num=7,
                 transformer_dropout=0.1, mlp_dropout=0.5, layer_norm_eps=1e-5, batch_first=True, norm_first=True):
        super().__init__()
        self.pos_encoder = PositionalEncoding(num_hiddens=d_model)
        encoder_layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, transformer_dropout, F.gelu,
                                                   layer_norm_eps, batch_first, norm_first)
        encoder_norm = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.encoder = nn.TransformerEncoder(encoder_layer, num_encoder_layers, encoder_norm, enable_nested_tensor=False)

        self.classifier = nn.Sequential(
            nn.Dropout(mlp_dropout),
            nn.Linear(d_model, labels_num),
            nn.Sigmoid()
        )
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def forward(self, src, src_key_padding_mask):
        memory = self.pos_encoder(src)
        memory = self.encoder(memory, mask=None, src_key_padding_mask=src_key_padding_mask)
        memory = memory.mean(dim=1)
        labels = self.classifier(memory)
        return labels


class FocalLoss(nn.Module):
    def __init__(self, alpha, gamma, reduction='mean'):
        super().__init__()
        self.alpha = alpha
        self.gamma = gamma
        self.reduction = reduction

    def forward(self, inputs, targets):
        inputs = inputs.view(-1)
        targets = targets.view(-1)

        BCE = F.binary_cross_entropy(inputs, targets, reduction=self.reduction)
        BEC_EXP = torch.exp(-BCE)
        focal_loss = self.alpha * (1-BEC_EXP) ** self.gamma * BCE

        return focal_loss


def evaluate(yp, yt):
    yp[yp >= 0.5] = 1
    yp[yp < 0.1] = -1
    corrects = torch.sum(torch.eq(yp, yt)).item()
    return corrects


class classifyTrainer():
    def __init__(self, args, data, model, loss, embeddings) -> None:
        self.args = args
        self.data = data
        self.model = model
        self.loss = loss
        self.batch_size = args['batch_size']
        self.epochs = args['epochs']
        self.learning_rate = args['learning_rate']

        self.train_dataset = BGCLabelsDataset(self.data, embeddings, 'train')
        self.test_dataset = BGCLabelsDataset(self.data, embeddings, 'test')
        print('Train dataset size: ', len(self.train_dataset), 'Test dataset size: ', len(self.test_dataset))
        self.train_dataLoader = DataLoader(self.train_dataset, batch_size=self.batch_size, shuffle=True)
        self.test_dataLoader = DataLoader(self.test_dataset, batch_size=self.batch_size, shuffle=True)

    def __train_step(self, epoch):
        self.model.train()
        for i, data in enumerate(self.train_dataLoader):
            sentence, labels, distribution = data[0], data[1], data[2]
            padding_mask = torch.zeros(distribution.shape, dtype=torch.bool)

            self.optimizer.zero_grad()
            output = self.model(src=sentence, src_key_padding_mask=padding_mask)
            loss = self.loss(output, labels)
            self.train_total_loss += loss.item()
            correct = evaluate(output.clone().detach(), labels)
            if torch.sum(labels) > 0:
                acc = correct*100/torch.sum(labels).item()
            else:
                acc = 0
            self.train_total_acc += acc
            loss.backward()
            self.optimizer.step()
        self.train_total_loss /= len(self.train_dataLoader)
        self.train_total_acc /= len(self.train_dataLoader)

    def __val_step(self,):
        self.model.eval()
        with torch.no_grad():
            total_loss = 0
            total_acc = 0
            for i, data in enumerate(self.test_dataLoader):
                sentence, labels, distribution = data[0], data[1], data[2]
                padding_mask = torch.zeros(distribution.shape, dtype=torch.bool)

                output = self.model(src=sentence, src_key_padding_mask=padding_mask)
                loss = self.loss(output, labels)
                total_loss += loss.item()
                correct = evaluate(output.clone().detach(), labels)

                if torch.sum(labels) > 0:
                    acc = correct*100/torch.sum(labels).item()
                else:
                    acc = 0
                total_acc += acc
            self.test_total_loss = total_loss/len(self.test_dataLoader)
            self.test_total_acc = total_acc/len(self.test_dataLoader)

    def train(self,):
        self.optimizer = optim.AdamW(self.model.parameters(), lr=self.learning_rate, weight_decay=0.01)
        self.scheduler = optim.lr_scheduler.ExponentialLR(self.optimizer, gamma=0.9, last_epoch=-1)

        for epoch in range(self.epochs):
            self.train_total_loss = 0
            self.train_total_acc = 0
            self.__train_step(epoch)
            if epoch >= 5 and self.scheduler.get_last_lr()[0] > 5e-6:
                self.scheduler.step()

            self.test_total_loss = 0
            self.test_total_acc = 0
            self.__val_step()
            print(f'Epoch: {epoch}, Train Loss: {self.train_total_loss:.4f}, Acc: {self.train_total_acc:.2f} | '
                  f'Test Loss: {self.test_total_loss:.4f}, Acc: {self.test_total_acc:.2f}')


def setup_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


if __name__ == '__main__':
    args = {'batch_size': 32, 'epochs': 14, 'learning_rate': 4e-3, 'alpha': 0.25, 'gamma': 2}
    setup_seed(42)
    embeddings = {g: torch.randn(32) for g in range(3300)}
    data = DataReader(make_dataset_frame(), test_ratio=0.1)
    model = transformerClassifier(d_model=32, nhead=4, num_encoder_layers=2, max_len=24, dim_feedforward=32 * 4,
                                  labels_num=data.labels_num, transformer_dropout=0.1, mlp_dropout=0.5)
    loss = FocalLoss(alpha=args['alpha'], gamma=args['gamma'])
    trainer = classifyTrainer(args, data, model, loss, embeddings)
    trainer.train()
