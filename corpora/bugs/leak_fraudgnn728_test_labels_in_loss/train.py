# Source: awslabs/realtime-fraud-detection-with-gnn-on-dgl, src/sagemaker/FD_SL_DGL/gnn_fraud_detection_dgl/fd_sl_train_entry_point.py (train_fg, evaluate, __main__), pytorch_model.py (HeteroRGCN), utils.py (get_metrics), commit bec9e2f5d4d6c5addf7a31ef7a13cd5ce4600d64
# Report: https://github.com/awslabs/realtime-fraud-detection-with-gnn-on-dgl/pull/728
# Full-graph heterogeneous RGCN fraud detection: transaction ("target") nodes with features,
# card / device / email nodes with learned embeddings, relation-specific linear maps with mean
# aggregation, CrossEntropy on the target nodes, metrics on the test_mask nodes. DGL's
# heterograph and multi_update_all are replaced by index tensors and index_add; the IEEE-CIS
# csv files by a synthetic transaction graph (fraud depends on features and on the card).
import time

import numpy as np
import torch as th
import torch.nn as nn
import torch.nn.functional as F
from sklearn.metrics import auc, average_precision_score, roc_curve


def normalize(feature_matrix):
    mean = th.mean(feature_matrix, axis=0)
    stdev = th.sqrt(th.sum((feature_matrix - mean)**2, axis=0)/feature_matrix.shape[0])
    return mean, stdev, (feature_matrix - mean) / stdev


class HeteroGraph:
    def __init__(self, edges, num_nodes):
        self.edges = edges            # {(srctype, etype, dsttype): (src_idx, dst_idx)}
        self.num_nodes = num_nodes
        self.canonical_etypes = list(edges)
        self.etypes = [e for _, e, _ in edges]
        self.ntypes = list(num_nodes)


class HeteroRGCNLayer(nn.Module):
    def __init__(self, in_size, out_size, etypes):
        super(HeteroRGCNLayer, self).__init__()
        # W_r for each relation
        self.weight = nn.ModuleDict({
                name: nn.Linear(in_size, out_size) for name in etypes
            })

    def forward(self, G, feat_dict):
        # The input is a dictionary of node features for each type
        out = {}
        for srctype, etype, dsttype in G.canonical_etypes:
            # Compute W_r * h
            if srctype in feat_dict:
                Wh = self.weight[etype](feat_dict[srctype])
                src, dst = G.edges[(srctype, etype, dsttype)]
                # copy_u + mean over incoming edges, summed over relation types
                msg = th.zeros(G.num_nodes[dsttype], Wh.shape[1]).index_add_(0, dst, Wh[src])
                deg = th.zeros(G.num_nodes[dsttype]).index_add_(0, dst, th.ones(len(dst))).clamp(min=1)
                h = msg / deg.unsqueeze(1)
                out[dsttype] = out[dsttype] + h if dsttype in out else h
        # return the updated node feature dictionary
        return out


class HeteroRGCN(nn.Module):
    def __init__(self, ntype_dict, etypes, in_size, hidden_size, out_size, n_layers, embedding_size):
        super(HeteroRGCN, self).__init__()
        # Use trainable node embeddings as featureless inputs.
        embed_dict = {ntype: nn.Parameter(th.Tensor(num_nodes, in_size))
                      for ntype, num_nodes in ntype_dict.items() if ntype != 'target'}
        for key, embed in embed_dict.items():
            nn.init.xavier_uniform_(embed)
        self.embed = nn.ParameterDict(embed_dict)
        # create layers
        self.layers = nn.ModuleList()
        self.layers.append(HeteroRGCNLayer(embedding_size, hidden_size, etypes))
        # hidden layers
        for i in range(n_layers - 1):
            self.layers.append(HeteroRGCNLayer(hidden_size, hidden_size, etypes))

        # output layer
        self.layers.append(nn.Linear(hidden_size, out_size))

    def forward(self, g, features):
        # get embeddings for all node types. for user node type, use passed in user features
        h_dict = {ntype: emb for ntype, emb in self.embed.items()}
        h_dict['target'] = features

        # pass through all layers
        for i, layer in enumerate(self.layers[:-1]):
            if i != 0:
                h_dict = {k: F.leaky_relu(h) for k, h in h_dict.items()}
            h_dict = layer(g, h_dict)

        # get user logits
        return self.layers[-1](h_dict['target'])


def get_f1_score(y_true, y_pred):
    tp = ((y_pred == 1) & (y_true == 1)).sum()
    fp = ((y_pred == 1) & (y_true == 0)).sum()
    fn = ((y_pred == 0) & (y_true == 1)).sum()
    precision = tp / (tp + fp + 10e-5)
    recall = tp / (tp + fn)
    f1 = 2 * (precision * recall) / (precision + recall + 10e-5)
    return precision, recall, f1


def evaluate(model, g, features, labels, device):
    "Compute the F1 value in a binary classification case"
    preds = model(g, features.to(device))
    preds = th.argmax(preds, axis=1).numpy()
    precision, recall, f1 = get_f1_score(labels.numpy(), preds)
    return f1


def get_model_class_predictions(model, g, features, labels, device, threshold=None):
    unnormalized_preds = model(g, features.to(device))
    pred_proba = th.softmax(unnormalized_preds, dim=-1)
    if not threshold:
        return unnormalized_preds.argmax(axis=1).detach().numpy(), pred_proba[:,1].detach().numpy()
    return np.where(pred_proba.detach().numpy() > threshold, 1, 0), pred_proba[:,1].detach().numpy()


def get_metrics(pred, pred_proba, labels, mask):
    labels, pred, pred_proba = labels[np.where(mask)], pred[np.where(mask)], pred_proba[np.where(mask)]
    acc = ((pred == labels)).sum() / mask.sum()
    precision, recall, f1 = get_f1_score(labels, pred)
    ap = average_precision_score(labels, pred_proba)
    fpr, tpr, _ = roc_curve(labels, pred_proba)
    roc_auc = auc(fpr, tpr)
    return acc, f1, precision, recall, roc_auc, ap


def train_fg(model, optim, loss, features, labels, train_g, test_g, test_mask,
             device, n_epochs, thresh, compute_metrics=True):
    """
    A full graph verison of RGCN training
    """

    duration = []
    for epoch in range(n_epochs):
        tic = time.time()
        loss_val = 0.

        pred = model(train_g, features.to(device))

        l = loss(pred, labels)

        optim.zero_grad()
        l.backward()
        optim.step()

        loss_val += l

        duration.append(time.time() - tic)
        if epoch % 20 == 0 or epoch == n_epochs - 1:
            metric = evaluate(model, train_g, features, labels, device)
            print("Epoch {:05d} | Time(s) {:.4f} | Loss {:.4f} | f1 {:.4f} ".format(
                    epoch, np.mean(duration), loss_val, metric))

    class_preds, pred_proba = get_model_class_predictions(model, test_g, features, labels, device, threshold=thresh)

    if compute_metrics:
        acc, f1, p, r, roc, ap = get_metrics(class_preds, pred_proba, labels.numpy(), test_mask.numpy())
        print("Metrics (test_mask nodes)")
        print("f1: {:.4f}, precision: {:.4f}, recall: {:.4f}, acc: {:.4f}, roc: {:.4f}, ap: {:.4f}".format(
            f1, p, r, acc, roc, ap))

    return model, class_preds, pred_proba


def construct_graph(rng, n_target=1200):
    n_card, n_device, n_email = 500, 80, 150
    card = rng.randint(n_card, size=n_target)
    device = rng.randint(n_device, size=n_target)
    email = rng.randint(n_email, size=n_target)
    features = rng.randn(n_target, 12).astype(np.float32)
    card_risk = rng.randn(n_card) * 1.0
    logit = 1.2 * features[:, 0] - 0.8 * features[:, 1] + card_risk[card] - 2.0 + 1.2 * rng.randn(n_target)
    labels = (logit > 0).astype(np.int64)
    t = th.arange(n_target)
    edges = {}
    for name, idx in (("card", card), ("device", device), ("email", email)):
        idx = th.from_numpy(idx)
        edges[("target", "target<>" + name, name)] = (t, idx)
        edges[(name, name + "<>target", "target")] = (idx, t)
        edges[("target", "self_relation", "target")] = (t, t)
    num_nodes = {"target": n_target, "card": n_card, "device": n_device, "email": n_email}
    test_mask = np.zeros(n_target, dtype=np.float32)
    test_mask[rng.permutation(n_target)[: int(0.3 * n_target)]] = 1
    return HeteroGraph(edges, num_nodes), features, labels, test_mask


def main():
    th.manual_seed(0)
    rng = np.random.RandomState(0)
    g, features, labels, test_mask = construct_graph(rng)
    mean, stdev, features = normalize(th.from_numpy(features))
    labels = th.from_numpy(labels).float()
    test_mask = th.from_numpy(test_mask).float()
    print("#Nodes: {} #Labeled Test samples: {} #fraud: {}".format(sum(g.num_nodes.values()), int(test_mask.sum()),
                                                                   int(labels.sum())))

    device = th.device('cpu')
    in_feats = features.shape[1]
    n_classes = 2
    ntype_dict = g.num_nodes
    model = HeteroRGCN(ntype_dict, g.etypes, in_feats, 32, n_classes, 2, in_feats)

    labels = labels.long().to(device)
    loss = th.nn.CrossEntropyLoss()
    optim = th.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)

    print("Starting Model training")
    model, class_preds, pred_proba = train_fg(model, optim, loss, features, labels, g, g,
                                              test_mask, device, 150, None, True)
    print("Finished Model training")


if __name__ == "__main__":
    main()
