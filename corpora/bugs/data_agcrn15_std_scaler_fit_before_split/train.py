# Source: LeiBAI/AGCRN, lib/dataloader.py, lib/normalization.py, model/AGCRN.py, model/BasicTrainer.py, commit 7fbbf2aeb099242098a3cf482b55cd45d7295c28
# Report: https://github.com/LeiBAI/AGCRN/issues/15
import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data


class StandardScaler:
    def __init__(self, mean, std):
        self.mean = mean
        self.std = std

    def transform(self, data):
        return (data - self.mean) / self.std

    def inverse_transform(self, data):
        return (data * self.std) + self.mean


def normalize_dataset(data, normalizer, column_wise=False):
    if normalizer == 'std':
        if column_wise:
            mean = data.mean(axis=0, keepdims=True)
            std = data.std(axis=0, keepdims=True)
        else:
            mean = data.mean()
            std = data.std()
        scaler = StandardScaler(mean, std)
        data = scaler.transform(data)
        print('Normalize the dataset by Standard Normalization')
    else:
        raise ValueError
    return data, scaler


def split_data_by_ratio(data, val_ratio, test_ratio):
    data_len = data.shape[0]
    test_data = data[-int(data_len*test_ratio):]
    val_data = data[-int(data_len*(test_ratio+val_ratio)):-int(data_len*test_ratio)]
    train_data = data[:-int(data_len*(test_ratio+val_ratio))]
    return train_data, val_data, test_data


def Add_Window_Horizon(data, window=3, horizon=1):
    length = len(data)
    end_index = length - horizon - window + 1
    X, Y = [], []
    index = 0
    while index < end_index:
        X.append(data[index:index+window])
        Y.append(data[index+window:index+window+horizon])
        index = index + 1
    return np.array(X), np.array(Y)


def data_loader(X, Y, batch_size, shuffle=True, drop_last=True):
    X, Y = torch.FloatTensor(X), torch.FloatTensor(Y)
    data = torch.utils.data.TensorDataset(X, Y)
    return torch.utils.data.DataLoader(data, batch_size=batch_size, shuffle=shuffle, drop_last=drop_last)


def load_st_dataset(num_nodes, steps=1000, seed=0):
    # synthetic 5-minute traffic flow: daily cycle, per-node level and a slow growth over the period
    rng = np.random.RandomState(seed)
    t = np.arange(steps)[:, None]
    level = rng.uniform(150, 300, size=(1, num_nodes))
    daily = 80 * np.sin(2 * np.pi * t / 288 + rng.uniform(0, 1, size=(1, num_nodes)))
    growth = 0.12 * t
    data = level + daily + growth + rng.normal(0, 12, size=(steps, num_nodes))
    return data[..., None].astype(np.float32)      # B, N, D


def get_dataloader(args, normalizer='std'):
    data = load_st_dataset(args.num_nodes)        # B, N, D
    raw_train = data[:-int(data.shape[0]*(args.test_ratio+args.val_ratio))]
    data, scaler = normalize_dataset(data, normalizer, args.column_wise)
    data_train, data_val, data_test = split_data_by_ratio(data, args.val_ratio, args.test_ratio)
    x_tra, y_tra = Add_Window_Horizon(data_train, args.lag, args.horizon)
    x_val, y_val = Add_Window_Horizon(data_val, args.lag, args.horizon)
    x_test, y_test = Add_Window_Horizon(data_test, args.lag, args.horizon)
    print('Train: ', x_tra.shape, y_tra.shape)
    print('Val: ', x_val.shape, y_val.shape)
    print('Test: ', x_test.shape, y_test.shape)
    print(f'scaler mean {float(scaler.mean):.1f} std {float(scaler.std):.1f}; training steps mean '
          f'{raw_train.mean():.1f} std {raw_train.std():.1f}; normalised training inputs mean '
          f'{x_tra.mean():.3f} std {x_tra.std():.3f}')
    train_dataloader = data_loader(x_tra, y_tra, args.batch_size, shuffle=True, drop_last=True)
    val_dataloader = data_loader(x_val, y_val, args.batch_size, shuffle=False, drop_last=True)
    test_dataloader = data_loader(x_test, y_test, args.batch_size, shuffle=False, drop_last=False)
    return train_dataloader, val_dataloader, test_dataloader, scaler


class AVWGCN(nn.Module):
    def __init__(self, dim_in, dim_out, cheb_k, embed_dim):
        super(AVWGCN, self).__init__()
        self.cheb_k = cheb_k
        self.weights_pool = nn.Parameter(torch.FloatTensor(embed_dim, cheb_k, dim_in, dim_out))
        self.bias_pool = nn.Parameter(torch.FloatTensor(embed_dim, dim_out))

    def forward(self, x, node_embeddings):
        node_num = node_embeddings.shape[0]
        supports = F.softmax(F.relu(torch.mm(node_embeddings, node_embeddings.transpose(0, 1))), dim=1)
        support_set = [torch.eye(node_num).to(supports.device), supports]
        for k in range(2, self.cheb_k):
            support_set.append(torch.matmul(2 * supports, support_set[-1]) - support_set[-2])
        supports = torch.stack(support_set, dim=0)
        weights = torch.einsum('nd,dkio->nkio', node_embeddings, self.weights_pool)
        bias = torch.matmul(node_embeddings, self.bias_pool)
        x_g = torch.einsum("knm,bmc->bknc", supports, x)
        x_g = x_g.permute(0, 2, 1, 3)
        x_gconv = torch.einsum('bnki,nkio->bno', x_g, weights) + bias
        return x_gconv


class AGCRNCell(nn.Module):
    def __init__(self, node_num, dim_in, dim_out, cheb_k, embed_dim):
        super(AGCRNCell, self).__init__()
        self.node_num = node_num
        self.hidden_dim = dim_out
        self.gate = AVWGCN(dim_in+self.hidden_dim, 2*dim_out, cheb_k, embed_dim)
        self.update = AVWGCN(dim_in+self.hidden_dim, dim_out, cheb_k, embed_dim)

    def forward(self, x, state, node_embeddings):
        input_and_state = torch.cat((x, state), dim=-1)
        z_r = torch.sigmoid(self.gate(input_and_state, node_embeddings))
        z, r = torch.split(z_r, self.hidden_dim, dim=-1)
        candidate = torch.cat((x, z*state), dim=-1)
        hc = torch.tanh(self.update(candidate, node_embeddings))
        h = r*state + (1-r)*hc
        return h

    def init_hidden_state(self, batch_size):
        return torch.zeros(batch_size, self.node_num, self.hidden_dim)


class AGCRN(nn.Module):
    def __init__(self, args):
        super(AGCRN, self).__init__()
        self.num_node = args.num_nodes
        self.input_dim = args.input_dim
        self.hidden_dim = args.rnn_units
        self.output_dim = args.output_dim
        self.horizon = args.horizon
        self.node_embeddings = nn.Parameter(torch.randn(self.num_node, args.embed_dim), requires_grad=True)
        self.cell = AGCRNCell(args.num_nodes, args.input_dim, args.rnn_units, args.cheb_k, args.embed_dim)
        self.end_conv = nn.Conv2d(1, args.horizon * self.output_dim, kernel_size=(1, self.hidden_dim), bias=True)

    def forward(self, source):
        state = self.cell.init_hidden_state(source.shape[0])
        for t in range(source.shape[1]):
            state = self.cell(source[:, t, :, :], state, self.node_embeddings)
        output = state.unsqueeze(1)                                     # B, 1, N, hidden
        output = self.end_conv((output))                                # B, T*C, N, 1
        output = output.squeeze(-1).reshape(-1, self.horizon, self.output_dim, self.num_node)
        return output.permute(0, 1, 3, 2)                               # B, T, N, C


def main():
    args = argparse.Namespace(num_nodes=6, lag=8, horizon=3, val_ratio=0.2, test_ratio=0.2, column_wise=False,
                              input_dim=1, output_dim=1, embed_dim=4, rnn_units=16, cheb_k=2, batch_size=64,
                              epochs=3, lr_init=0.003, real_value=False, seed=10)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    train_loader, val_loader, test_loader, scaler = get_dataloader(args, normalizer='std')
    model = AGCRN(args)
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
        else:
            nn.init.uniform_(p)
    loss = torch.nn.L1Loss()
    optimizer = torch.optim.Adam(params=model.parameters(), lr=args.lr_init, eps=1.0e-8, weight_decay=0,
                                 amsgrad=False)
    for epoch in range(1, args.epochs + 1):
        model.train()
        total_loss = 0
        for data, target in train_loader:
            label = target[..., :args.output_dim]
            optimizer.zero_grad()
            output = model(data[..., :args.input_dim])
            if args.real_value:
                label = scaler.inverse_transform(label)
            loss_v = loss(output, label)
            loss_v.backward()
            optimizer.step()
            total_loss += loss_v.item()
        model.eval()
        val_loss = 0
        with torch.no_grad():
            for data, target in val_loader:
                label = scaler.inverse_transform(target[..., :args.output_dim])
                val_loss += loss(scaler.inverse_transform(model(data[..., :args.input_dim])), label).item()
        print(f'Epoch {epoch}: train loss {total_loss / len(train_loader):.4f}, val MAE {val_loss / len(val_loader):.2f}')
    model.eval()
    maes = []
    with torch.no_grad():
        for data, target in test_loader:
            label = scaler.inverse_transform(target[..., :args.output_dim])
            maes.append((scaler.inverse_transform(model(data[..., :args.input_dim])) - label).abs().mean().item())
    print(f'Test MAE {np.mean(maes):.2f}')


if __name__ == '__main__':
    main()
