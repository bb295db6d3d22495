# Source: pmernyei/wiki-cs-dataset, experiments/node_classification/load_graph_data.py (from_file, from_builtin, load), experiments/node_classification/gcn/gcn.py (GCN), experiments/node_classification/train.py (accuracy, evaluate, train_and_eval_once), commit 4078c80e698c58e5cfb3ef19f2716f1032dced4d
# Report: https://github.com/pmernyei/wiki-cs-dataset/issues/4
# Wiki-CS node classification baselines: the dataset is read from its json file into a graph with
# both edge directions, a GCN (GraphConv layers with symmetric degree normalisation, ReLU,
# dropout) is trained with Adam on one training split with early stopping on the stopping split's
# loss, and train / validation / test accuracy are reported. DGL's DGLGraph and GraphConv are
# replaced by a minimal edge-list graph and a GraphConv with the same 'both' normalisation; the
# Wiki-CS json by a synthetic citation-like graph (600 nodes, 5 classes, noisy bag-of-words-like
# features, partly homophilous links).
import itertools
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)


class DGLGraph:
    def __init__(self):
        self.n = 0
        self.src = torch.zeros(0, dtype=torch.long)
        self.dst = torch.zeros(0, dtype=torch.long)
        self.ndata = {}

    def add_nodes(self, n):
        self.n += n

    def add_edges(self, src, dst):
        self.src = torch.cat([self.src, torch.as_tensor(src, dtype=torch.long)])
        self.dst = torch.cat([self.dst, torch.as_tensor(dst, dtype=torch.long)])

    def in_degrees(self):
        return torch.bincount(self.dst, minlength=self.n)

    def out_degrees(self):
        return torch.bincount(self.src, minlength=self.n)


def remove_self_loop(g):
    keep = g.src != g.dst
    g.src, g.dst = g.src[keep], g.dst[keep]
    return g


def add_self_loop(g):
    loops = torch.arange(g.n)
    g.add_edges(loops, loops)
    return g


class GraphConv(nn.Module):
    """GraphConv(norm='both'): h_i' = sum_j c_out(j)^-1/2 c_in(i)^-1/2 h_j W + b."""
    def __init__(self, in_feats, out_feats, activation=None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(in_feats, out_feats))
        self.bias = nn.Parameter(torch.zeros(out_feats))
        nn.init.xavier_uniform_(self.weight)
        self._activation = activation

    def forward(self, graph, feat):
        out_norm = graph.out_degrees().float().clamp(min=1).pow(-0.5).unsqueeze(1)
        in_norm = graph.in_degrees().float().clamp(min=1).pow(-0.5).unsqueeze(1)
        h = (feat * out_norm) @ self.weight
        rst = torch.zeros(graph.n, h.shape[1]).index_add_(0, graph.dst, h[graph.src])
        rst = rst * in_norm + self.bias
        if self._activation is not None:
            rst = self._activation(rst)
        return rst


class GCN(nn.Module):
    def __init__(self, g, in_feats, n_hidden, n_classes, n_layers, activation, dropout):
        super(GCN, self).__init__()
        self.g = g
        self.layers = nn.ModuleList()
        self.layers.append(GraphConv(in_feats, n_hidden, activation=activation))
        for i in range(n_layers - 1):
            self.layers.append(GraphConv(n_hidden, n_hidden, activation=activation))
        self.layers.append(GraphConv(n_hidden, n_classes))
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, features):
        h = features
        for i, layer in enumerate(self.layers[:-1]):
            if i != 0:
                h = self.dropout(h)
            h = layer(self.g, h)
        self.last_embeddings = h
        h = self.dropout(h)
        h = self.layers[-1](self.g, h)
        return h


class NodeClassificationDataset:
    def __init__(self, graph, features, labels, train_masks, stopping_masks,
                 val_masks, test_mask, n_edges, n_classes, n_feats):
        self.graph = graph
        self.features = features
        self.labels = labels
        self.train_masks = train_masks
        self.stopping_masks = stopping_masks
        self.val_masks = val_masks
        self.test_mask = test_mask
        self.n_edges = n_edges
        self.n_classes = n_classes
        self.n_feats = n_feats


def make_wiki_json(n=600, n_classes=5, n_feats=50, seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, n_classes, n)
    centers = rng.normal(0, 1, (n_classes, n_feats))
    features = centers[labels] * 0.35 + rng.normal(0, 1, (n, n_feats))
    links = []
    for i in range(n):
        nbs = set()
        for _ in range(3):
            same = np.flatnonzero(labels == labels[i]) if rng.random() < 0.3 else np.arange(n)
            j = int(rng.choice(same))
            if j != i:
                nbs.add(j)
        links.append(sorted(nbs))
    perm = rng.permutation(n)
    split = lambda a, b: [bool(x) for x in np.isin(np.arange(n), perm[a:b])]
    return {'features': features.tolist(), 'labels': labels.tolist(), 'links': links,
            'train_masks': [split(0, 120)], 'stopping_masks': [split(120, 220)],
            'val_masks': [split(220, 320)], 'test_mask': split(320, 600)}


def from_file(data):
    features = torch.FloatTensor(np.array(data['features']))
    labels = torch.LongTensor(np.array(data['labels']))
    train_masks = [torch.BoolTensor(tr) for tr in data['train_masks']]
    val_masks = [torch.BoolTensor(val) for val in data['val_masks']]
    stopping_masks = [torch.BoolTensor(st) for st in data['stopping_masks']]
    test_mask = torch.BoolTensor(data['test_mask'])
    n_feats = features.shape[1]
    n_classes = len(set(data['labels']))

    g = DGLGraph()
    g.add_nodes(len(data['features']))
    edge_list = list(itertools.chain(*[[(i, nb) for nb in nbs] for i, nbs in enumerate(data['links'])]))
    n_edges = len(edge_list)
    # add edges two lists of nodes: src and dst
    src, dst = tuple(zip(*edge_list))
    g.add_edges(src, dst)
    # edges are directional in DGL; make them bi-directional
    g.add_edges(dst, src)
    return NodeClassificationDataset(g, features, labels, train_masks, stopping_masks,
                                     val_masks, test_mask, n_edges, n_classes, n_feats)


def load(args, raw):
    if args.dataset == 'wiki':
        data = from_file(raw)
    print("""----Data statistics------'
      #Edges %d
      #Classes %d
      #Train samples %d
      #Test samples %d""" % (data.n_edges, data.n_classes,
                             data.train_masks[0].int().sum().item(), data.test_mask.int().sum().item()))
    degs = data.graph.in_degrees().float()
    norm = torch.pow(degs, -0.5)
    norm[torch.isinf(norm)] = 0
    data.graph.ndata['norm'] = norm.unsqueeze(1)
    return data


def accuracy(logits, labels, mask=None):
    if mask is not None:
        logits = logits[mask]
        labels = labels[mask]
    _, indices = torch.max(logits, dim=1)
    correct = torch.sum(indices == labels)
    acc = correct.item() * 1.0 / len(labels)
    return acc


def loss_scalar(logits, labels, mask, loss_fcn):
    if mask is not None:
        logits = logits[mask]
        labels = labels[mask]
    return loss_fcn(logits, labels).cpu().numpy().mean()


def evaluate(model, features, labels, mask, loss_fcn=None):
    model.eval()
    with torch.no_grad():
        logits = model(features)
        acc = accuracy(logits, labels, mask)
        if loss_fcn is None:
            return acc
        return acc, loss_scalar(logits, labels, mask, loss_fcn)


def train_and_eval_once(data, model, split_idx, stopping_patience, lr, weight_decay):
    min_loss = 10000
    patience_left = stopping_patience
    best_vars = None
    epoch = 0
    loss_fcn = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    while patience_left > 0:
        model.train()
        logits = model(data.features)
        loss = loss_fcn(logits[data.train_masks[split_idx]], data.labels[data.train_masks[split_idx]])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        model.eval()
        with torch.no_grad():
            eval_logits = model(data.features)
            stopping_loss = loss_scalar(eval_logits, data.labels, data.stopping_masks[split_idx], loss_fcn)
        if stopping_loss < min_loss:
            min_loss = stopping_loss
            patience_left = stopping_patience
            best_vars = {key: value.clone() for key, value in model.state_dict().items()}
        else:
            patience_left -= 1
        epoch += 1
    model.load_state_dict(best_vars)
    result = {'epochs': epoch}
    result['train_acc'], result['train_loss'] = evaluate(model, data.features, data.labels, data.train_masks[split_idx], loss_fcn)
    result['val_acc'], result['val_loss'] = evaluate(model, data.features, data.labels, data.val_masks[split_idx], loss_fcn)
    result['test_acc'], result['test_loss'] = evaluate(model, data.features, data.labels, data.test_mask, loss_fcn)
    return result


class Args:
    dataset = 'wiki'
    self_loop = True
    n_hidden_units = 16
    n_hidden_layers = 1
    dropout = 0.5
    lr = 0.01
    weight_decay = 5e-4
    patience = 50


if __name__ == '__main__':
    args = Args()
    data = load(args, make_wiki_json())
    accs = []
    for run in range(3):
        torch.manual_seed(run)
        model = GCN(data.graph, data.n_feats, args.n_hidden_units, data.n_classes,
                    args.n_hidden_layers, F.relu, args.dropout)
        res = train_and_eval_once(data, model, 0, args.patience, args.lr, args.weight_decay)
        print('run %d: epochs %d train_acc %.4f val_acc %.4f test_acc %.4f' % (
            run, res['epochs'], res['train_acc'], res['val_acc'], res['test_acc']))
        accs.append(res['test_acc'])
    print('mean test accuracy over 3 runs: %.4f' % np.mean(accs))
