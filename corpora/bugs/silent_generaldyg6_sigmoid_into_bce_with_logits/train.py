# Source: YXNTU/GeneralDyG, model/Transformer.py, model/Combine.py, train.py, commit 4276d0e67df0c01957dfc802b1c99022f7df3efb
# Report: https://github.com/YXNTU/GeneralDyG/issues/6
import argparse
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.metrics import roc_auc_score


class CustomTransformerEncoder(nn.Module):
    def __init__(self, encoder_layer, num_layers):
        super(CustomTransformerEncoder, self).__init__()
        self.layers = nn.ModuleList([encoder_layer for _ in range(num_layers)])
        self.num_layers = num_layers

    def forward(self, src, raw_src, src_mask=None, src_key_padding_mask=None):
        output = src
        for layer in self.layers:
            output = layer(output, raw_src, src_mask=src_mask, src_key_padding_mask=src_key_padding_mask)
        return output


class CustomTransformerEncoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1):
        super(CustomTransformerEncoderLayer, self).__init__()
        self.self_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, src, raw_src, src_mask=None, src_key_padding_mask=None):
        # Q, K from src, V from raw_src
        q = k = src
        v = raw_src
        src2 = self.self_attn(q, k, v, attn_mask=src_mask, key_padding_mask=src_key_padding_mask)[0]
        src = src + self.dropout1(src2)
        src = self.norm1(src)
        src2 = self.linear2(self.dropout(F.relu(self.linear1(src))))
        src = src + self.dropout2(src2)
        src = self.norm2(src)
        return src


class TransformerBinaryClassifier(nn.Module):
    def __init__(self, config, device, hidden_size=128):
        super(TransformerBinaryClassifier, self).__init__()
        self.device = device
        self.input_size = config.input_dim
        self.encoder_layer = CustomTransformerEncoderLayer(d_model=self.input_size, nhead=config.n_heads,
                                                           dropout=config.drop_out, dim_feedforward=hidden_size)
        self.transformer_encoder = CustomTransformerEncoder(self.encoder_layer, num_layers=config.n_layer)
        self.bn = nn.BatchNorm1d(self.input_size)
        self.dropout = nn.Dropout(config.drop_out)
        self.classifier = nn.Linear(self.input_size, 1)
        self.sigmoid = nn.Sigmoid()
        self.to(device)
        self.config = config

    def forward(self, raw_input, GNN_output, mask):
        GNN_output = GNN_output.transpose(0, 1)
        raw_input = raw_input.transpose(0, 1)
        GNN_output = GNN_output.float()
        raw_input = raw_input.float()
        mask = mask.bool()
        transformer_output = self.transformer_encoder(GNN_output, raw_input, src_key_padding_mask=mask)
        transformer_output = transformer_output.transpose(0, 1)
        transformer_output[mask] = 0
        filtered_output = [out[~m] for out, m in zip(transformer_output, mask)]
        averaged_tensors = [tensor.mean(dim=0) for tensor in filtered_output]
        mean_output = torch.stack(averaged_tensors)
        mean_output = self.bn(mean_output)
        logits = self.classifier(mean_output)
        logits = self.sigmoid(logits).squeeze()
        return logits


class EdgeEncoder(nn.Module):
    # stands in for CensNet: one message-passing step over the temporal edge sequence
    def __init__(self, input_dim, drop_out):
        super().__init__()
        self.lin = nn.Linear(2 * input_dim, input_dim)
        self.dropout = nn.Dropout(drop_out)

    def forward(self, H_e):
        outputs = []
        for h in H_e:
            prev = torch.cat([h[:1], h[:-1]], 0)
            outputs.append(self.dropout(F.relu(self.lin(torch.cat([h, prev], 1)))))
        return outputs


class CombinedModel(torch.nn.Module):
    def __init__(self, GNN, Transformer):
        super(CombinedModel, self).__init__()
        self.GNN = GNN
        self.Transformer = Transformer

    def forward(self, H_e, H_e_pad, mask):
        output = self.GNN(H_e)
        pad_output = torch.zeros((H_e_pad.shape[0], H_e_pad.shape[1], H_e_pad.shape[2]))
        for i in range(H_e_pad.shape[0]):
            length = output[i].shape[0]
            pad_output[i, :length, :] = output[i]
        output = self.Transformer(H_e_pad, pad_output, mask)
        return output


def make_samples(n, input_dim, max_len, rng):
    direction = rng.normal(size=input_dim)
    samples = []
    for _ in range(n):
        length = rng.randint(4, max_len + 1)
        label = float(rng.rand() < 0.5)
        edges = rng.normal(size=(length, input_dim))
        if label:
            hit = rng.choice(length, size=max(1, length // 3), replace=False)
            edges[hit] += 0.9 * direction
        samples.append((torch.tensor(edges, dtype=torch.float32), label))
    return samples


def collate(batch, max_len, input_dim):
    edges = [e for e, _ in batch]
    pad = torch.zeros(len(batch), max_len, input_dim)
    mask = torch.ones(len(batch), max_len, dtype=torch.bool)
    for i, e in enumerate(edges):
        pad[i, :len(e)] = e
        mask[i, :len(e)] = False
    return {'input_edges_feature': edges, 'input_edges_pad': pad, 'mask_edge': mask,
            'labels': torch.tensor([lbl for _, lbl in batch])}


def main():
    def criterion(logits, labels):
        loss_classify = F.binary_cross_entropy_with_logits(logits, labels, reduction='none')
        loss_classify = torch.mean(loss_classify)
        return loss_classify

    def eval_epoch(dataset, model):
        m_loss, m_pred, m_label = np.array([]), np.array([]), np.array([])
        with torch.no_grad():
            model.eval()
            for batch_sample in dataset:
                logits = model(batch_sample['input_edges_feature'], batch_sample['input_edges_pad'],
                               batch_sample['mask_edge'])
                y = batch_sample['labels'].to(torch.float32)
                c_loss = np.array([criterion(logits, y).cpu()])
                m_loss = np.concatenate((m_loss, c_loss))
                m_pred = np.concatenate((m_pred, logits.cpu().numpy().flatten()))
                m_label = np.concatenate((m_label, y.cpu().numpy().flatten()))
            auc_roc = roc_auc_score(m_label, m_pred)
        return np.mean(m_loss), auc_roc, m_pred

    config = argparse.Namespace(input_dim=16, hidden_dim=32, n_heads=4, drop_out=0.1, n_layer=2,
                                learning_rate=0.001, batch_size=32, n_epochs=6, max_len=12, seed=95540)
    random.seed(config.seed)
    np.random.seed(config.seed)
    torch.manual_seed(config.seed)
    rng = np.random.RandomState(0)
    train_set = make_samples(512, config.input_dim, config.max_len, rng)
    test_set = make_samples(256, config.input_dim, config.max_len, rng)

    def fn(b):
        return collate(b, config.max_len, config.input_dim)
    loader_train = torch.utils.data.DataLoader(train_set, batch_size=config.batch_size, shuffle=True, collate_fn=fn)
    loader_test = torch.utils.data.DataLoader(test_set, batch_size=config.batch_size, shuffle=True, collate_fn=fn)

    GNN = EdgeEncoder(config.input_dim, config.drop_out)
    transformer = TransformerBinaryClassifier(config, 'cpu', hidden_size=config.hidden_dim)
    model = CombinedModel(GNN, transformer)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.learning_rate)

    max_test_auc = 0.0
    for epoch in range(config.n_epochs):
        losses = []
        for batch_idx, batch_sample in enumerate(loader_train):
            optimizer.zero_grad()
            model.train()
            logits = model(batch_sample['input_edges_feature'], batch_sample['input_edges_pad'],
                           batch_sample['mask_edge'])
            y = batch_sample['labels'].to(torch.float32)
            loss = criterion(logits, y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        test_loss, test_auc, scores = eval_epoch(loader_test, model)
        print(f'epoch {epoch}: train loss {np.mean(losses):.4f}, val loss {test_loss:.4f}, val auc {test_auc:.4f}, '
              f'scores in [{scores.min():.3f}, {scores.max():.3f}]')
        if test_auc > max_test_auc:
            max_test_auc = test_auc
    print('best auc:{:.4f}'.format(max_test_auc))


if __name__ == "__main__":
    main()
