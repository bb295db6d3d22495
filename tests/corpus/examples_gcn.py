"""Graph convolutional network: GraphConv layers with a raw nn.Parameter kernel and torch.spmm on
a sparse symmetric-normalised adjacency matrix, dropout, log_softmax + NLLLoss on the training
node mask, Adam with weight decay, and after every update test() on the train and val masks in
eval() + no_grad (loss and argmax accuracy), the next train_iter switching back to train().

Source: pytorch/examples, gcn/main.py, commit 77f55b912142e11fcfdf5b530231fb9c52f181e8.
Reduced: a random 40-node graph with 12 features and 3 classes instead of Cora, hidden 8, 4 epochs.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim


class GraphConv(nn.Module):
    def __init__(self, input_dim, output_dim, use_bias=False):
        super(GraphConv, self).__init__()
        self.kernel = nn.Parameter(torch.Tensor(input_dim, output_dim))
        nn.init.xavier_normal_(self.kernel)
        self.bias = None
        if use_bias:
            self.bias = nn.Parameter(torch.Tensor(output_dim))
            nn.init.zeros_(self.bias)

    def forward(self, input_tensor, adj_mat):
        support = torch.mm(input_tensor, self.kernel)
        output = torch.spmm(adj_mat, support)
        if self.bias is not None:
            output = output + self.bias
        return output


class GCN(nn.Module):
    def __init__(self, input_dim, hidden_dim, output_dim, use_bias=True, dropout_p=0.1):
        super(GCN, self).__init__()
        self.gc1 = GraphConv(input_dim, hidden_dim, use_bias=use_bias)
        self.gc2 = GraphConv(hidden_dim, output_dim, use_bias=use_bias)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, input_tensor, adj_mat):
        x = self.gc1(input_tensor, adj_mat)
        x = F.relu(x)
        x = self.dropout(x)
        x = self.gc2(x, adj_mat)
        return F.log_softmax(x, dim=1)


def random_graph(n=40, f=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    features = (torch.rand(n, f, generator=g) > 0.7).float()
    scale_vector = 1 / torch.sum(features, dim=1)
    scale_vector[scale_vector == float("inf")] = 0
    features = torch.diag(scale_vector).to_sparse() @ features
    adj = (torch.rand(n, n, generator=g) > 0.9).float()
    adj = ((adj + adj.t()) > 0).float() + torch.eye(n)
    degree = torch.sum(adj, dim=1)
    d_inv_sqrt = torch.diag(torch.pow(degree, -0.5))
    adj_mat = (d_inv_sqrt @ adj @ d_inv_sqrt).to_sparse()
    labels = torch.randint(0, 3, (n,), generator=g)
    return features, labels, adj_mat


def build():
    torch.manual_seed(42)
    features, labels, adj_mat = random_graph()
    idx = torch.randperm(len(labels))
    idx_test, idx_val, idx_train = idx[:10], idx[10:20], idx[20:]
    gcn = GCN(features.shape[1], 8, labels.max().item() + 1, True, 0.5)
    optimizer = optim.Adam(gcn.parameters(), lr=0.01, weight_decay=5e-4)
    criterion = nn.NLLLoss()

    def test(model, input, target, mask):
        model.eval()
        with torch.no_grad():
            output = model(*input)
            output, target = output[mask], target[mask]
            loss = criterion(output, target)
            acc = (output.argmax(dim=1) == target).float().sum() / len(target)
        return loss.item(), acc.item()

    def train_iter(epoch, model, input, target, mask_train, mask_val):
        model.train()
        optimizer.zero_grad()
        output = model(*input)
        loss = criterion(output[mask_train], target[mask_train])
        loss.backward()
        optimizer.step()
        loss_train, acc_train = test(model, input, target, mask_train)
        loss_val, acc_val = test(model, input, target, mask_val)

    def train():
        for epoch in range(4):
            train_iter(epoch + 1, gcn, (features, adj_mat), labels, idx_train, idx_val)
        return test(gcn, (features, adj_mat), labels, idx_test)

    return [gcn], [optimizer], train


if __name__ == "__main__":
    build()[2]()
