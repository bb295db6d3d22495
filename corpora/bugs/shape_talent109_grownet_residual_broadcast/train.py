# Source: LAMDA-Tabular/TALENT, TALENT/model/methods/grownet.py (GrowNetMethod.fit), TALENT/model/models/grownet.py (DynamicNet, MLP_2HL), commit c9d24c8ab44f8fabb1b7213b28a03a107394ce54
# Report: https://github.com/LAMDA-Tabular/TALENT/pull/109
# GrowNet (gradient boosting with shallow neural networks) for tabular regression as in TALENT:
# each stage adds an MLP_2HL weak learner fitted to the negative gradient (the residual) of the
# current ensemble, then a corrective step fine-tunes the whole ensemble. The benchmark datasets
# are replaced by a synthetic numerical regression task, .cuda() by CPU, the Method plumbing
# (data formatting, tuning, logging) by a plain loop.
import argparse
import math

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class DynamicNet:
    def __init__(self, lr):
        self.models = []
        self.lr = lr
        self.boost_rate = nn.Parameter(torch.tensor(lr, requires_grad=True, dtype=torch.float64))

    def add(self, model):
        self.models.append(model)

    def parameters(self):
        params = []
        for m in self.models:
            params.extend(m.parameters())
        return params

    def to_eval(self):
        for m in self.models:
            m.eval()

    def to_train(self):
        for m in self.models:
            m.train(True)

    def embed_input(self, x_num, x_cat):
        return x_num

    def forward(self, x_num, x_cat):
        if len(self.models) == 0:
            return None, 0
        middle_feat_cum = None
        prediction = None
        with torch.no_grad():
            for m in self.models:
                if middle_feat_cum is None:
                    middle_feat_cum, prediction = m(self.embed_input(x_num, x_cat), middle_feat_cum)
                else:
                    middle_feat_cum, pred = m(self.embed_input(x_num, x_cat), middle_feat_cum)
                    prediction += pred
        return middle_feat_cum, self.boost_rate * prediction

    def forward_grad(self, x_num, x_cat):
        middle_feat_cum = None
        prediction = None
        for m in self.models:
            if middle_feat_cum is None:
                middle_feat_cum, prediction = m(self.embed_input(x_num, x_cat), middle_feat_cum)
            else:
                middle_feat_cum, pred = m(self.embed_input(x_num, x_cat), middle_feat_cum)
                prediction += pred
        return middle_feat_cum, self.boost_rate * prediction


class MLP_2HL(nn.Module):
    def __init__(self, dim_in, dim_hidden1, dim_hidden2, dim_out, sparse=False, bn=True):
        super(MLP_2HL, self).__init__()
        self.in_layer = nn.Linear(dim_in, dim_hidden1)
        self.dropout_layer = nn.Dropout(0.0)
        self.lrelu = nn.LeakyReLU(0.1)
        self.relu = nn.ReLU()
        self.hidden_layer = nn.Linear(dim_hidden1, dim_hidden2)
        self.out_layer = nn.Linear(dim_hidden2, dim_out)
        self.bn = nn.BatchNorm1d(dim_hidden1)
        self.bn2 = nn.BatchNorm1d(dim_in)

    def forward(self, x, lower_f):
        if lower_f is not None:
            x = torch.cat([x, lower_f], dim=1)
            x = self.bn2(x)
        out = self.lrelu(self.in_layer(x))
        out = self.bn(out)
        out = self.hidden_layer(out)
        return out, self.out_layer(self.relu(out)).squeeze()

    @classmethod
    def get_model(cls, stage, opt):
        if stage == 0:
            dim_in = opt.feat_d
        else:
            dim_in = opt.feat_d + opt.hidden_d
        dim_out = opt.dim_out
        model = MLP_2HL(dim_in, opt.hidden_d, opt.hidden_d, dim_out, opt.sparse)
        return model


def make_data(n, gen):
    x = torch.randn(n, 8, generator=gen, dtype=torch.float64)
    y = torch.sin(2 * x[:, 0]) + x[:, 1] * x[:, 2] + 0.5 * x[:, 3] ** 2 - x[:, 4] + 0.1 * torch.randn(
        n, generator=gen, dtype=torch.float64)
    return x, y


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    x_train, y_train = make_data(1024, gen)
    x_val, y_val = make_data(256, gen)
    train_loader = DataLoader(TensorDataset(x_train, y_train), batch_size=128, shuffle=True)
    sub_model_config = dict(feat_d=8, hidden_d=32, dim_out=1, sparse=False)
    training_config = dict(lr=1e-3, weight_decay=0.0, epochs_per_stage=2, correct_epoch=1, lr_scaler=2)
    loss_f1 = torch.nn.MSELoss()
    loss_f2 = torch.nn.MSELoss()
    model = DynamicNet(lr=1.0)
    learning_rate = training_config['lr']
    weight_decay = training_config['weight_decay']
    for s in range(6):
        m = MLP_2HL.get_model(s, argparse.Namespace(**sub_model_config)).double()
        optimizer = torch.optim.AdamW(m.parameters(), lr=learning_rate, weight_decay=weight_decay)
        model.to_train()
        for epoch in range(training_config['epochs_per_stage']):
            for i, (X, y) in enumerate(train_loader, 1):
                X_num, X_cat = X, None
                middle_feat, out = model.forward(X_num, X_cat)
                out = torch.as_tensor(out, dtype=torch.float64).view(-1, 1)
                grad_direction = -(out - y)
                _, out = m(model.embed_input(X_num, X_cat), middle_feat)
                out = torch.as_tensor(out, dtype=torch.float64).view(-1, 1)
                loss = loss_f1(model.boost_rate * out, grad_direction)
                m.zero_grad()
                loss.backward()
                optimizer.step()
        stage_loss = loss.item()

        model.add(m)
        if s > 0:
            optimizer = torch.optim.AdamW(m.parameters(), lr=learning_rate / training_config['lr_scaler'],
                                          weight_decay=weight_decay)
            for e in range(training_config["correct_epoch"]):
                for i, (X, y) in enumerate(train_loader, 1):
                    _, out = model.forward_grad(X, None)
                    out = torch.as_tensor(out, dtype=torch.float64)
                    loss = loss_f2(out, y)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
        model.to_eval()
        with torch.no_grad():
            _, pred = model.forward(x_val, None)
            rmse = math.sqrt(((pred - y_val) ** 2).mean().item())
        model.to_train()
        print(f"stage {s}: last boosting loss {stage_loss:.4f}  val RMSE {rmse:.4f}  (val std {y_val.std().item():.4f})")


if __name__ == "__main__":
    main()
