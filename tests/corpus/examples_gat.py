"""Graph attention network in plain torch: GraphAttentionLayer with raw nn.Parameter weights W
and a (per head), attention scores by a broadcast add of source and target scores, edges masked
with -9e16 through torch.where before a softmax over the neighbours, dropout on the features and
on the attention, heads averaged; GAT = two layers with ELU between and log_softmax + NLLLoss on
the training nodes of a randperm split; Adam with weight decay; after every update test() on the
train and val nodes in eval() + no_grad (loss and argmax accuracy).

Source: pytorch/examples, gat/main.py, commit 4440841a1012fe680f098a97aed3b02c85ed654e.
Reduced: a random 48-node graph with 16 features and 3 classes instead of Cora, hidden 8,
2 heads, 4 epochs.
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch.optim import Adam


class GraphAttentionLayer(nn.Module):
    def __init__(self, in_features, out_features, n_heads, concat=False, dropout=0.4, leaky_relu_slope=0.2):
        super(GraphAttentionLayer, self).__init__()
        self.n_heads = n_heads
        self.concat = concat
        self.dropout = dropout
        if concat:
            self.out_features = out_features
            assert out_features % n_heads == 0
            self.n_hidden = out_features // n_heads
        else:
            self.n_hidden = out_features
        self.W = nn.Parameter(torch.empty(size=(in_features, self.n_hidden * n_heads)))
        self.a = nn.Parameter(torch.empty(size=(n_heads, 2 * self.n_hidden, 1)))
        self.leakyrelu = nn.LeakyReLU(leaky_relu_slope)
        self.softmax = nn.Softmax(dim=1)
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.xavier_normal_(self.W)
        nn.init.xavier_normal_(self.a)

    def _get_attention_scores(self, h_transformed):
        source_scores = torch.matmul(h_transformed, self.a[:, :self.n_hidden, :])
        target_scores = torch.matmul(h_transformed, self.a[:, self.n_hidden:, :])
        e = source_scores + target_scores.mT  # (heads, n, 1) + (heads, 1, n)
        return self.leakyrelu(e)

    def forward(self, h, adj_mat):
        n_nodes = h.shape[0]
        h_transformed = torch.mm(h, self.W)
        h_transformed = F.dropout(h_transformed, self.dropout, training=self.training)
        h_transformed = h_transformed.view(n_nodes, self.n_heads, self.n_hidden).permute(1, 0, 2)
        e = self._get_attention_scores(h_transformed)
        connectivity_mask = -9e16 * torch.ones_like(e)
        e = torch.where(adj_mat > 0, e, connectivity_mask)
        attention = F.softmax(e, dim=-1)
        attention = F.dropout(attention, self.dropout, training=self.training)
        h_prime = torch.matmul(attention, h_transformed)
        if self.concat:
            h_prime = h_prime.permute(1, 0, 2).contiguous().view(n_nodes, self.out_features)
        else:
            h_prime = h_prime.mean(dim=0)
        return h_prime


class GAT(nn.Module):
    def __init__(self, in_features, n_hidden, n_heads, num_classes, concat=False, dropout=0.4, leaky_relu_slope=0.2):
        super(GAT, self).__init__()
        self.gat1 = GraphAttentionLayer(in_features=in_features, out_features=n_hidden, n_heads=n_heads,
                                        concat=concat, dropout=dropout, leaky_relu_slope=leaky_relu_slope)
        self.gat2 = GraphAttentionLayer(in_features=n_hidden, out_features=num_classes, n_heads=1,
                                        concat=False, dropout=dropout, leaky_relu_slope=leaky_relu_slope)

    def forward(self, input_tensor, adj_mat):
        x = self.gat1(input_tensor, adj_mat)
        x = F.elu(x)
        x = self.gat2(x, adj_mat)
        return F.log_softmax(x, dim=1)


def random_graph(n=48, f=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    features = (torch.rand(n, f, generator=g) > 0.7).float()
    scale_vector = 1 / torch.sum(features, dim=1)
    scale_vector[scale_vector == float("inf")] = 0
    features = torch.diag(scale_vector).to_sparse() @ features
    edges = torch.randint(0, n, (2, 3 * n), generator=g)
    adj_mat = torch.sparse_coo_tensor(edges, torch.ones(edges.shape[1]), (n, n))
    adj_mat = torch.eye(n) + adj_mat  # self-loops; a dense matrix, as in load_cora
    labels = torch.randint(0, 3, (n,), generator=g)
    return features, labels, adj_mat


def build():
    torch.manual_seed(13)
    features, labels, adj_mat = random_graph()
    idx = torch.randperm(len(labels))
    idx_test, idx_val, idx_train = idx[:12], idx[12:20], idx[20:]
    gat_net = GAT(in_features=features.shape[1], n_hidden=8, n_heads=2, num_classes=labels.max().item() + 1,
                  concat=False, dropout=0.6, leaky_relu_slope=0.2)
    optimizer = Adam(gat_net.parameters(), lr=0.005, weight_decay=5e-4)
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
            train_iter(epoch + 1, gat_net, (features, adj_mat), labels, idx_train, idx_val)
        return test(gat_net, (features, adj_mat), labels, idx_test)

    return [gat_net], [optimizer], train


if __name__ == "__main__":
    build()[2]()
