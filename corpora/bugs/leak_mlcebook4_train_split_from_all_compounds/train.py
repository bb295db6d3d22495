# Source: edgarsmdn/MLCE_book, 04_DNN_VLE.ipynb (compound split per chemical class, DNN, training loop, test MAPE), commit 93f02f982715a86e8d1e4ae06eba10bd18d3b112
# Report: https://github.com/edgarsmdn/MLCE_book/pull/4
# Vapor-pressure regression with a DNN: each molecule is a fingerprint plus the scaled
# temperature, the target is ln(Pvap). Compounds are split per chemical class into
# train / valid / test with sklearn's train_test_split, so that no compound of the test set
# is seen in training. The Vapor_pressures.csv data set and datamol fingerprints are replaced
# by synthetic compounds (random 128-bit fingerprints, a class, Antoine-like ln P(T) whose
# coefficients depend on the fingerprint).
import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from sklearn.metrics import mean_absolute_percentage_error as MAPE

torch.set_num_threads(1)


def make_vapor_pressures(n_compounds=200, n_bits=128, seed=0):
    rng = np.random.RandomState(seed)
    w_a, w_b = rng.normal(0, 0.15, n_bits), rng.normal(0, 60, n_bits)
    rows = []
    for c in range(n_compounds):
        cl = ['alkanes', 'alcohols', 'ketones', 'esters', 'aromatics'][c % 5]
        fp = (rng.rand(n_bits) < 0.15).astype(np.float64)
        A, B = 16 + fp @ w_a, 3000 + fp @ w_b + 300 * (c % 5)
        for T in rng.uniform(250, 450, 12):
            rows.append({'Name': 'comp%03d' % c, 'Class': cl, 'Fingerprint': fp, 'T': T,
                         'Pvap': np.exp(A - B / (T - 40) + rng.normal(0, 0.05))})
    return pd.DataFrame(rows).astype({'Name': object, 'Class': object})


class DNN(nn.Module):
    def __init__(self, in_dim, hidden_dim, out_dim):
        super(DNN, self).__init__()
        self.layer_1 = nn.Linear(in_dim, hidden_dim)
        self.layer_2 = nn.Linear(hidden_dim, hidden_dim)
        self.layer_3 = nn.Linear(hidden_dim, out_dim)

    def forward(self, x):
        x = F.relu(self.layer_1(x))
        x = F.relu(self.layer_2(x))
        x = self.layer_3(x)
        return x


def main():
    df = make_vapor_pressures()
    df['ln_P'] = np.log(df['Pvap'])

    scaler = StandardScaler()
    scaler.fit(df['T'].to_numpy().reshape(-1, 1))
    df['T_scaled'] = scaler.transform(df['T'].to_numpy().reshape(-1, 1))

    chemical_classes = df['Class'].unique()

    train_comps, valid_comps, test_comps = [], [], []
    for cl in chemical_classes:
        # Get the data with this class
        df_cl = df[df['Class'] == cl]

        # Get unique compounds for this class
        unique_compounds_cl = df_cl['Name'].unique()

        # Randomly split the compounds for train and test
        comp_train_all, comp_test = train_test_split(unique_compounds_cl, test_size=0.2, random_state=0)
        comp_train, comp_valid = train_test_split(unique_compounds_cl, test_size=0.2, random_state=1)

        train_comps.extend(list(comp_train))
        valid_comps.extend(list(comp_valid))
        test_comps.extend(list(comp_test))

    df_train = df[df['Name'].isin(train_comps)]
    df_valid = df[df['Name'].isin(valid_comps)]
    df_test = df[df['Name'].isin(test_comps)]
    print('compounds: train %d valid %d test %d | test compounds also in train: %d, in valid: %d' % (
        len(set(train_comps)), len(set(valid_comps)), len(set(test_comps)),
        len(set(test_comps) & set(train_comps)), len(set(test_comps) & set(valid_comps))))

    X_train = np.vstack(df_train['Fingerprint'].tolist())
    Ts_train = df_train['T_scaled'].to_numpy().reshape(-1, 1)
    X_train = np.hstack((X_train, Ts_train))
    y_train = df_train['ln_P'].to_numpy().reshape(-1, 1)

    X_valid = np.vstack(df_valid['Fingerprint'].tolist())
    Ts_valid = df_valid['T_scaled'].to_numpy().reshape(-1, 1)
    X_valid = np.hstack((X_valid, Ts_valid))
    y_valid = df_valid['ln_P'].to_numpy().reshape(-1, 1)

    X_test = np.vstack(df_test['Fingerprint'].tolist())
    Ts_test = df_test['T_scaled'].to_numpy().reshape(-1, 1)
    X_test = np.hstack((X_test, Ts_test))
    y_test = df_test['ln_P'].to_numpy().reshape(-1, 1)

    torch.manual_seed(0)
    model = DNN(X_train.shape[1], 20, 1)
    loss_function = nn.MSELoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.002)

    n_epochs = 200
    device = torch.device('cpu')
    model = model.to(device)
    X_train_torch = torch.from_numpy(X_train).float().to(device)
    y_train_torch = torch.from_numpy(y_train).float().to(device)
    X_valid_torch = torch.from_numpy(X_valid).float().to(device)
    y_valid_torch = torch.from_numpy(y_valid).float().to(device)

    losses = np.zeros((n_epochs, 2))
    for epoch in range(n_epochs):
        model.train()
        y_train_pred = model(X_train_torch)
        loss = loss_function(y_train_pred, y_train_torch)
        losses[epoch, 0] = loss.item()

        model.zero_grad()
        loss.backward()
        optimizer.step()

        model.eval()
        with torch.no_grad():
            y_valid_pred = model(X_valid_torch)
            loss = loss_function(y_valid_pred, y_valid_torch)
            losses[epoch, 1] = loss.item()
        if epoch % 50 == 49:
            print('epoch %d train loss %.4f valid loss %.4f' % (epoch + 1, losses[epoch, 0], losses[epoch, 1]))

    X_test_torch = torch.from_numpy(X_test).float().to(device)
    model.eval()
    with torch.no_grad():
        y_test_pred = model(X_test_torch).numpy()
    print('test MAPE: %.2f %%' % (MAPE(y_test, y_test_pred) * 100))


if __name__ == '__main__':
    main()
