# Source: zuozhaorui/SWnet, self-attention/SWnet_self-attention_train.py (Model, train_model, eval_model), commit a06a993ce1d9cc88bf0898fb513c8546b29702e6
# Report: https://github.com/zuozhaorui/SWnet/issues/2
# SWnet drug-response regression: a gene-expression CNN whose input is the expression profile
# plus mutation features re-weighted per drug through a drug-similarity attention
# (fuse_weight), a graph network over the drug's molecular fingerprint graph, and a merged
# conv head predicting IC50; MSE loss, Adam with StepLR, the best epoch's weights are kept and
# the final MSE / R2 are reported. GDSC cell lines, drugs and their molecular graphs are
# replaced by synthetic ones (374 genes, 48 cell lines, 12 drugs), CUDA by CPU.
import copy
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.utils.data as Data
from torch.optim import lr_scheduler
from torch.utils.data import Dataset

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)
device = torch.device("cpu")
N_GENES = 374


class CreateDataset(Dataset):
    def __init__(self, rma_all, var_all, id):
        self.rma_all = rma_all
        self.var_all = var_all
        self.all_id = id.values

    def __len__(self):
        return len(self.all_id)

    def __getitem__(self, idx):
        cell_line_id = self.all_id[idx][0]
        drug_id = np.asarray(self.all_id[idx][1]).astype('int')
        y = np.asarray(self.all_id[idx][2]).astype('float32')
        rma = self.rma_all.loc[cell_line_id].values.astype('float32')
        var = self.var_all.loc[cell_line_id].values.astype('float32')
        return rma, var, drug_id, y


class Model(nn.Module):
    def __init__(self, dim, layer_gnn, drugs_num):
        super(Model, self).__init__()
        self.fuse_weight = torch.nn.Parameter(torch.FloatTensor(drugs_num, N_GENES), requires_grad=True).to(device)
        self.fuse_weight.data.normal_(0.5, 0.25)

        self.embed_fingerprint = nn.Embedding(n_fingerprint, dim)
        self.W_gnn = nn.ModuleList([nn.Linear(dim, dim) for _ in range(layer_gnn)])

        self.gene = nn.Sequential(
            nn.Conv1d(in_channels=1, out_channels=20, kernel_size=15, stride=2),
            nn.BatchNorm1d(20),
            nn.ReLU(),
            nn.Conv1d(in_channels=20, out_channels=20, kernel_size=15, stride=2),
            nn.BatchNorm1d(20),
            nn.ReLU(),
            nn.Conv1d(in_channels=20, out_channels=10, kernel_size=15, stride=2),
            nn.BatchNorm1d(10),
            nn.ReLU(),
            nn.MaxPool1d(kernel_size=3, stride=3),
            nn.Linear(11, 32),
            nn.ReLU(),
            nn.Dropout(p=0.1)
        )

        self.merged = nn.Sequential(
            nn.Linear(370, 300),
            nn.Tanh(),
            nn.Dropout(p=0.1),
            nn.Conv1d(in_channels=1, out_channels=10, kernel_size=10, stride=2),
            nn.BatchNorm1d(10),
            nn.MaxPool1d(kernel_size=5, stride=5),
            nn.Conv1d(in_channels=10, out_channels=5, kernel_size=10, stride=2),
            nn.BatchNorm1d(5),
            nn.MaxPool1d(kernel_size=5, stride=5),
            nn.Dropout(p=0.1)
        )
        self.out = nn.Sequential(
            nn.Linear(10, 1)
        )

    def gnn(self, xs, A, layer):
        for i in range(layer):
            hs = torch.relu(self.W_gnn[i](xs))
            xs = xs + torch.matmul(A, hs)
        return torch.unsqueeze(torch.mean(xs, 0), 0)

    def attention(self, fuse_weight, drug_ids, var):
        drug_ids = drug_ids.numpy().tolist()
        com = torch.zeros(len(drug_ids), N_GENES).to(device)
        for i in range(len(drug_ids)):
            com[i] = torch.mv(fuse_weight.permute(1, 0), similarity_softmax[GDSC_drug_dict[drug_ids[i]]]) * var[i]
        return com.view(-1, N_GENES)

    def combine(self, rma, var, drug_id):
        self.fuse_weight.data = torch.clamp(self.fuse_weight, 0, 1)
        attention_var = self.attention(self.fuse_weight, drug_id, var)
        z = rma + attention_var
        return z

    def forward(self, rma, var, drug_id):
        com = self.combine(rma, var, drug_id)
        com = com.unsqueeze(1)
        out = self.gene(com)
        out_gene = out.view(out.size(0), -1)

        """Compound vector with GNN."""
        batch_graph = [graph_dataset[GDSC_drug_dict[i]] for i in drug_id.numpy().tolist()]
        compound_vector = torch.FloatTensor(drug_id.shape[0], dim).to(device)
        for i, graph in enumerate(batch_graph):
            fingerprints, adjacency = graph
            fingerprint_vectors = self.embed_fingerprint(fingerprints)
            compound_vector[i] = self.gnn(fingerprint_vectors, adjacency, layer_gnn)

        concat = torch.cat([out_gene, compound_vector], dim=1)
        concat = concat.unsqueeze(1)

        merge = self.merged(concat)
        merge = merge.view(merge.size(0), -1)

        y_pred = self.out(merge)
        return y_pred


def train_model(model, criterion, optimizer, scheduler, num_epochs=500):
    since = time.time()

    best_model_wts = copy.deepcopy(model.state_dict())
    best_loss = 10.0

    for epoch in range(num_epochs):
        # Each epoch has a training and validation phase
        train_loss = 0.0
        model.train()
        for step, (rma, var, drug_id, y) in enumerate(train_loader):
            y = y.view(-1, 1)
            y_pred = model(rma, var, drug_id)
            loss = criterion(y_pred, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

            train_loss += loss.item() * rma.size(0)
        scheduler.step()

        test_loss = 0.0
        model.eval()
        for step, (rma, var, drug_id, y) in enumerate(test_loader):
            y = y.view(-1, 1)
            y_pred = model(rma, var, drug_id)
            loss = criterion(y_pred, y)
            test_loss += loss.item() * rma.size(0)

        epoch_train_loss = train_loss / dataset_sizes['train']
        epoch_test_loss = test_loss / dataset_sizes['test']

        print('Epoch {}/{} Train Loss: {:.4f} Test Loss: {:.4f}'.format(epoch, num_epochs - 1, epoch_train_loss, epoch_test_loss))
        # deep copy the model
        if epoch_test_loss < best_loss and epoch >= 3:
            best_loss = epoch_test_loss
            best_model_wts = copy.deepcopy(model.state_dict())

    time_elapsed = time.time() - since
    print('Training complete in {:.0f}m {:.0f}s'.format(time_elapsed // 60, time_elapsed % 60))
    print('Best test loss: {:4f}'.format(best_loss))
    # load best model weights
    model.load_state_dict(best_model_wts)
    return model


def eval_model(model):
    y_pred = []
    y_true = []
    model.eval()
    with torch.no_grad():
        for step, (rma, var, drug_id,y) in enumerate(test_loader):
            y = y.view(-1, 1)
            y_true += y.numpy().tolist()
            y_pred_step = model(rma, var, drug_id)
            y_pred += y_pred_step.numpy().tolist()
    y_true, y_pred = np.array(y_true), np.array(y_pred)
    mse = float(np.mean((y_true - y_pred) ** 2))
    return mse, 1.0 - mse / float(np.var(y_true))


def make_drug_graph(rng, n_atoms):
    fingerprints = torch.tensor(rng.integers(0, n_fingerprint, size=n_atoms), dtype=torch.long)
    A = (rng.random((n_atoms, n_atoms)) < 0.25).astype(np.float32)
    A = np.triu(A, 1)
    return fingerprints, torch.from_numpy(A + A.T)


if __name__ == '__main__':
    LR = 0.003
    BATCH_SIZE = 128
    num_epochs = 16
    step_size = 150
    gamma = 0.5
    dim = 50
    layer_gnn = 3
    rng = np.random.default_rng(0)

    """Synthetic GDSC: cell lines x genes, drugs with fingerprint graphs and similarity."""
    n_cells, drugs_num, n_fingerprint = 48, 12, 40
    GDSC_cell_names = np.array(['cell%d' % i for i in range(n_cells)])
    programs = rng.normal(size=(4, N_GENES))
    loadings = rng.normal(size=(n_cells, 4))
    rma = pd.DataFrame(loadings @ programs / 2 + rng.normal(0, 0.5, size=(n_cells, N_GENES)), index=GDSC_cell_names)
    var = pd.DataFrame((rng.random((n_cells, N_GENES)) < 0.05).astype(np.float32), index=GDSC_cell_names)
    drug_effect = rng.normal(size=(drugs_num, 4))
    graph_dataset = [make_drug_graph(rng, int(rng.integers(6, 12))) for _ in range(drugs_num)]
    GDSC_drug_dict = {i: i for i in range(drugs_num)}
    sim = drug_effect @ drug_effect.T
    similarity_softmax = torch.softmax(torch.tensor(sim, dtype=torch.float32), dim=1)
    rows = []
    for c in range(n_cells):
        for d in range(drugs_num):
            ic50 = float(np.tanh(loadings[c] @ drug_effect[d] / 2) * 2 + rng.normal(0, 0.4))
            rows.append((GDSC_cell_names[c], d, ic50))
    pairs = pd.DataFrame(rows, columns=['cell', 'drug', 'ic50'])

    """split dataset"""
    perm = rng.permutation(len(pairs))
    n_train = int(len(pairs) * 0.9)
    train_id, test_id = pairs.iloc[perm[:n_train]], pairs.iloc[perm[n_train:]]

    dataset_sizes = {'train': len(train_id), 'test': len(test_id)}
    print(dataset_sizes['train'], dataset_sizes['test'])

    trainDataset = CreateDataset(rma, var, train_id)
    testDataset = CreateDataset(rma, var, test_id)

    # Dataloader
    train_loader = Data.DataLoader(dataset=trainDataset, batch_size=BATCH_SIZE, shuffle=True)
    test_loader = Data.DataLoader(dataset=testDataset, batch_size=BATCH_SIZE, shuffle=True)

    """create SWnet model"""
    model_ft = Model(dim, layer_gnn, drugs_num)

    optimizer_ft = torch.optim.Adam(model_ft.parameters(), lr=LR)
    exp_lr_scheduler = lr_scheduler.StepLR(optimizer_ft, step_size=step_size, gamma=gamma)
    criterion = nn.MSELoss()

    model_ft = train_model(model_ft, criterion, optimizer_ft, exp_lr_scheduler, num_epochs=num_epochs)

    mse, r2 = eval_model(model_ft)
    print('test mse:{:.4f}, r2:{:.4f}'.format(mse, r2))
