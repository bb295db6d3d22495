# Source: chennnM/GCNII, train.py + model.py + utils.py, commit ca91f5686c4cd09cc1c6f98431a5d5b7e36acc92
# https://github.com/chennnM/GCNII
#
# GCNII (deep GCN with initial residual and identity mapping): 64 graph-conv layers whose weights are created
# as uninitialised FloatTensor Parameters filled via .data.uniform_, theta = log(lamda / l + 1) shrinking the
# weight contribution with depth; the model keeps two plain Python lists of its parameters (params1 = convs,
# params2 = fcs) that define two Adam groups with weight decay 0.01 vs 5e-4; dropout 0.6 before every layer;
# loss on 140 labelled nodes only; early stopping on the validation loss with the best state_dict saved with
# torch.save and re-loaded with torch.load for the test.
# Adaptation: the Planetoid Cora files are replaced by an in-memory synthetic citation graph with Cora's sizes
# (2708 nodes, 1433 binary features, 7 classes, ~5400 edges, 80% intra-class) processed like load_citation
# (row-normalised features, D^-1/2 (A+I) D^-1/2 as a sparse tensor, 140/500/1000 split); the checkpoint file
# 'pretrained/<uuid>.pt' becomes an in-memory io.BytesIO; cuda device -> cpu; layer 64 -> 16, epochs 1500 -> 40,
# patience 100 (kept), --test on; prints every 5 epochs.
import io
import math
import random

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.nn.parameter import Parameter


def accuracy(output, labels):
    preds = output.max(1)[1].type_as(labels)
    correct = preds.eq(labels).double()
    correct = correct.sum()
    return correct / len(labels)

def normalize(mx):
    """Row-normalize sparse matrix"""
    rowsum = np.array(mx.sum(1))
    rowsum = (rowsum==0)*1+rowsum
    r_inv = np.power(rowsum, -1).flatten()
    r_inv[np.isinf(r_inv)] = 0.
    r_mat_inv = sp.diags(r_inv)
    mx = r_mat_inv.dot(mx)
    return mx

def sys_normalized_adjacency(adj):
   adj = sp.coo_matrix(adj)
   adj = adj + sp.eye(adj.shape[0])
   row_sum = np.array(adj.sum(1))
   row_sum=(row_sum==0)*1+row_sum
   d_inv_sqrt = np.power(row_sum, -0.5).flatten()
   d_inv_sqrt[np.isinf(d_inv_sqrt)] = 0.
   d_mat_inv_sqrt = sp.diags(d_inv_sqrt)
   return d_mat_inv_sqrt.dot(adj).dot(d_mat_inv_sqrt).tocoo()

def sparse_mx_to_torch_sparse_tensor(sparse_mx):
    """Convert a scipy sparse matrix to a torch sparse tensor."""
    sparse_mx = sparse_mx.tocoo().astype(np.float32)
    indices = torch.from_numpy(
        np.vstack((sparse_mx.row, sparse_mx.col)).astype(np.int64))
    values = torch.from_numpy(sparse_mx.data)
    shape = torch.Size(sparse_mx.shape)
    return torch.sparse.FloatTensor(indices, values, shape)


def load_citation(dataset_str="cora", seed=42):
    """Synthetic stand-in with Cora's sizes; the processing mirrors utils.load_citation."""
    rng = np.random.RandomState(seed)
    n, n_feat, n_cls = 2708, 1433, 7
    y = rng.randint(0, n_cls, n)
    word_p = np.full((n_cls, n_feat), 0.005)
    for c in range(n_cls):
        word_p[c, rng.choice(n_feat, 60, replace=False)] = 0.12
    features = sp.lil_matrix((rng.rand(n, n_feat) < word_p[y]).astype(np.float32))
    src = rng.randint(0, n, 5429)
    same = rng.rand(5429) < 0.8
    dst = np.where(same, [rng.choice(np.flatnonzero(y == y[s])) for s in src], rng.randint(0, n, 5429))
    adj = sp.coo_matrix((np.ones(len(src)), (src, dst)), shape=(n, n))
    adj = adj + adj.T.multiply(adj.T > adj) - adj.multiply(adj.T > adj)
    labels = y
    idx_test = list(range(n - 1000, n))
    idx_train = range(140)
    idx_val = range(140, 640)

    features = normalize(features)
    # porting to pytorch
    features = torch.FloatTensor(np.array(features.todense())).float()
    labels = torch.LongTensor(labels)
    adj = sys_normalized_adjacency(adj)
    adj = sparse_mx_to_torch_sparse_tensor(adj)
    idx_train = torch.LongTensor(idx_train)
    idx_val = torch.LongTensor(idx_val)
    idx_test = torch.LongTensor(idx_test)
    return adj, features, labels, idx_train, idx_val, idx_test


class GraphConvolution(nn.Module):

    def __init__(self, in_features, out_features, residual=False, variant=False):
        super(GraphConvolution, self).__init__() 
        self.variant = variant
        if self.variant:
            self.in_features = 2*in_features 
        else:
            self.in_features = in_features

        self.out_features = out_features
        self.residual = residual
        self.weight = Parameter(torch.FloatTensor(self.in_features,self.out_features))
        self.reset_parameters()

    def reset_parameters(self):
        stdv = 1. / math.sqrt(self.out_features)
        self.weight.data.uniform_(-stdv, stdv)

    def forward(self, input, adj , h0 , lamda, alpha, l):
        theta = math.log(lamda/l+1)
        hi = torch.spmm(adj, input)
        if self.variant:
            support = torch.cat([hi,h0],1)
            r = (1-alpha)*hi+alpha*h0
        else:
            support = (1-alpha)*hi+alpha*h0
            r = support
        output = theta*torch.mm(support, self.weight)+(1-theta)*r
        if self.residual:
            output = output+input
        return output

class GCNII(nn.Module):
    def __init__(self, nfeat, nlayers,nhidden, nclass, dropout, lamda, alpha, variant):
        super(GCNII, self).__init__()
        self.convs = nn.ModuleList()
        for _ in range(nlayers):
            self.convs.append(GraphConvolution(nhidden, nhidden,variant=variant))
        self.fcs = nn.ModuleList()
        self.fcs.append(nn.Linear(nfeat, nhidden))
        self.fcs.append(nn.Linear(nhidden, nclass))
        self.params1 = list(self.convs.parameters())
        self.params2 = list(self.fcs.parameters())
        self.act_fn = nn.ReLU()
        self.dropout = dropout
        self.alpha = alpha
        self.lamda = lamda

    def forward(self, x, adj):
        _layers = []
        x = F.dropout(x, self.dropout, training=self.training)
        layer_inner = self.act_fn(self.fcs[0](x))
        _layers.append(layer_inner)
        for i,con in enumerate(self.convs):
            layer_inner = F.dropout(layer_inner, self.dropout, training=self.training)
            layer_inner = self.act_fn(con(layer_inner,adj,_layers[0],self.lamda,self.alpha,i+1))
        layer_inner = F.dropout(layer_inner, self.dropout, training=self.training)
        layer_inner = self.fcs[-1](layer_inner)
        return F.log_softmax(layer_inner, dim=1)


class args:
    seed, epochs, lr, wd1, wd2, layer, hidden, dropout, patience = 42, 40, 0.01, 0.01, 5e-4, 16, 64, 0.6, 100
    data, dev, alpha, lamda, variant, test = 'cora', 0, 0.1, 0.5, False, True


def main():
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.cuda.manual_seed(args.seed)

    # Load data
    adj, features, labels,idx_train,idx_val,idx_test = load_citation(args.data)
    device = torch.device("cpu")
    features = features.to(device)
    adj = adj.to(device)
    checkpt_file = io.BytesIO()

    model = GCNII(nfeat=features.shape[1],
                    nlayers=args.layer,
                    nhidden=args.hidden,
                    nclass=int(labels.max()) + 1,
                    dropout=args.dropout,
                    lamda = args.lamda,
                    alpha=args.alpha,
                    variant=args.variant).to(device)

    optimizer = optim.Adam([
                            {'params':model.params1,'weight_decay':args.wd1},
                            {'params':model.params2,'weight_decay':args.wd2},
                            ],lr=args.lr)

    def train():
        model.train()
        optimizer.zero_grad()
        output = model(features,adj)
        acc_train = accuracy(output[idx_train], labels[idx_train].to(device))
        loss_train = F.nll_loss(output[idx_train], labels[idx_train].to(device))
        loss_train.backward()
        optimizer.step()
        return loss_train.item(),acc_train.item()

    def validate():
        model.eval()
        with torch.no_grad():
            output = model(features,adj)
            loss_val = F.nll_loss(output[idx_val], labels[idx_val].to(device))
            acc_val = accuracy(output[idx_val], labels[idx_val].to(device))
            return loss_val.item(),acc_val.item()

    def test():
        checkpt_file.seek(0)
        model.load_state_dict(torch.load(checkpt_file))
        model.eval()
        with torch.no_grad():
            output = model(features, adj)
            loss_test = F.nll_loss(output[idx_test], labels[idx_test].to(device))
            acc_test = accuracy(output[idx_test], labels[idx_test].to(device))
            return loss_test.item(),acc_test.item()

    bad_counter = 0
    best = 999999999
    best_epoch = 0
    acc = 0
    history = []
    for epoch in range(args.epochs):
        loss_tra,acc_tra = train()
        loss_val,acc_val = validate()
        history.append(loss_val)
        if(epoch+1)%5 == 0:
            print('Epoch:{:04d}'.format(epoch+1),
                'train',
                'loss:{:.3f}'.format(loss_tra),
                'acc:{:.2f}'.format(acc_tra*100),
                '| val',
                'loss:{:.3f}'.format(loss_val),
                'acc:{:.2f}'.format(acc_val*100))
        if loss_val < best:
            best = loss_val
            best_epoch = epoch
            acc = acc_val
            checkpt_file.seek(0)
            checkpt_file.truncate()
            torch.save(model.state_dict(), checkpt_file)
            bad_counter = 0
        else:
            bad_counter += 1

        if bad_counter == args.patience:
            break

    if args.test:
        acc = test()[1]

    print('Load {}th epoch'.format(best_epoch))
    print("Test" if args.test else "Val","acc.:{:.1f}".format(acc*100))
    print(f"[summary] val_loss first={history[0]:.4f} best={best:.4f} decreased={best < history[0]}")


if __name__ == '__main__':
    main()
