# Source: benedekrozemberczki/ClusterGCN, src/main.py, src/clustergcn.py, src/clustering.py, src/layers.py, src/utils.py, src/parser.py, commit ecc9b7e6e2c1fb359aaf78e361446058b2b655b3
# https://github.com/benedekrozemberczki/ClusterGCN/blob/master/src/clustergcn.py
#
# Cluster-GCN: the graph is cut into clusters and every optimizer step sees one induced subgraph only (edges between
# clusters are dropped for good); node ids are remapped to 0..n-1 inside each cluster; the loss is an NLL over the
# training nodes of the cluster (10% of its nodes, test_ratio 0.9), while the forward pass runs over all of the
# cluster's nodes, test nodes included (transductive); the clusters are reshuffled in place each epoch; dropout is
# applied only after the third hidden layer (`if i>1`); the epoch loss is a node-weighted running mean; the layer
# list is built in a plain Python list and registered through a hand-written ListModule.
# Adaptation: torch_geometric's GCNConv replaced by a stand-in with the same maths (self-loops, symmetric
# normalisation, linear then propagate, bias); metis not installed, so the repo's --clustering-method random is used;
# the edges / features / target CSV files are written from a synthetic 4-class stochastic block graph (1200 nodes,
# 40 sparse binary features) and read by the repo's readers; texttable/tqdm printing reduced to print; 200 -> 60
# epochs; python's and numpy's RNGs seeded (the repo seeds torch only); cpu.
import os
import random
import tempfile

import networkx as nx
import numpy as np
import pandas as pd
import torch
from scipy.sparse import coo_matrix
from sklearn.metrics import f1_score
from sklearn.model_selection import train_test_split


# ---------------------------------------------------------------- stand-in for torch_geometric.nn.GCNConv
class GCNConv(torch.nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.lin = torch.nn.Linear(in_channels, out_channels, bias=False)
        self.bias = torch.nn.Parameter(torch.zeros(out_channels))
        torch.nn.init.xavier_uniform_(self.lin.weight)

    def forward(self, x, edge_index):
        n = x.size(0)
        loops = torch.arange(n, dtype=torch.long)
        if edge_index.numel() == 0:
            edge_index = edge_index.view(2, 0)
        row = torch.cat([edge_index[0], loops])
        col = torch.cat([edge_index[1], loops])
        deg = torch.zeros(n).index_add_(0, col, torch.ones(col.numel()))
        norm = deg[row].pow(-0.5) * deg[col].pow(-0.5)
        x = self.lin(x)
        out = torch.zeros(n, x.size(1)).index_add_(0, col, x[row] * norm.view(-1, 1))
        return out + self.bias


# ---------------------------------------------------------------- src/layers.py
class StackedGCN(torch.nn.Module):
    """
    Multi-layer GCN model.
    """
    def __init__(self, args, input_channels, output_channels):
        super(StackedGCN, self).__init__()
        self.args = args
        self.input_channels = input_channels
        self.output_channels = output_channels
        self.setup_layers()

    def setup_layers(self):
        self.layers = []
        self.args.layers = [self.input_channels] + self.args.layers + [self.output_channels]
        for i, _ in enumerate(self.args.layers[:-1]):
            self.layers.append(GCNConv(self.args.layers[i], self.args.layers[i+1]))
        self.layers = ListModule(*self.layers)

    def forward(self, edges, features):
        for i, _ in enumerate(self.args.layers[:-2]):
            features = torch.nn.functional.relu(self.layers[i](features, edges))
            if i > 1:
                features = torch.nn.functional.dropout(features, p=self.args.dropout, training=self.training)
        features = self.layers[i+1](features, edges)
        predictions = torch.nn.functional.log_softmax(features, dim=1)
        return predictions


class ListModule(torch.nn.Module):
    """
    Abstract list layer class.
    """
    def __init__(self, *args):
        super(ListModule, self).__init__()
        idx = 0
        for module in args:
            self.add_module(str(idx), module)
            idx += 1

    def __getitem__(self, idx):
        if idx < 0 or idx >= len(self._modules):
            raise IndexError('index {} is out of range'.format(idx))
        it = iter(self._modules.values())
        for i in range(idx):
            next(it)
        return next(it)

    def __iter__(self):
        return iter(self._modules.values())

    def __len__(self):
        return len(self._modules)


# ---------------------------------------------------------------- src/clustering.py
class ClusteringMachine(object):
    """
    Clustering the graph, feature set and target.
    """
    def __init__(self, args, graph, features, target):
        self.args = args
        self.graph = graph
        self.features = features
        self.target = target
        self._set_sizes()

    def _set_sizes(self):
        self.feature_count = self.features.shape[1]
        self.class_count = np.max(self.target)+1

    def decompose(self):
        print("\nRandom graph clustering started.\n")
        self.random_clustering()
        self.general_data_partitioning()
        self.transfer_edges_and_nodes()

    def random_clustering(self):
        self.clusters = [cluster for cluster in range(self.args.cluster_number)]
        self.cluster_membership = {node: random.choice(self.clusters) for node in self.graph.nodes()}

    def general_data_partitioning(self):
        self.sg_nodes = {}
        self.sg_edges = {}
        self.sg_train_nodes = {}
        self.sg_test_nodes = {}
        self.sg_features = {}
        self.sg_targets = {}
        for cluster in self.clusters:
            subgraph = self.graph.subgraph([node for node in sorted(self.graph.nodes()) if self.cluster_membership[node] == cluster])
            self.sg_nodes[cluster] = [node for node in sorted(subgraph.nodes())]
            mapper = {node: i for i, node in enumerate(sorted(self.sg_nodes[cluster]))}
            self.sg_edges[cluster] = [[mapper[edge[0]], mapper[edge[1]]] for edge in subgraph.edges()] + [[mapper[edge[1]], mapper[edge[0]]] for edge in subgraph.edges()]
            self.sg_train_nodes[cluster], self.sg_test_nodes[cluster] = train_test_split(list(mapper.values()), test_size=self.args.test_ratio)
            self.sg_test_nodes[cluster] = sorted(self.sg_test_nodes[cluster])
            self.sg_train_nodes[cluster] = sorted(self.sg_train_nodes[cluster])
            self.sg_features[cluster] = self.features[self.sg_nodes[cluster], :]
            self.sg_targets[cluster] = self.target[self.sg_nodes[cluster], :]

    def transfer_edges_and_nodes(self):
        for cluster in self.clusters:
            self.sg_nodes[cluster] = torch.LongTensor(self.sg_nodes[cluster])
            self.sg_edges[cluster] = torch.LongTensor(self.sg_edges[cluster]).t()
            self.sg_train_nodes[cluster] = torch.LongTensor(self.sg_train_nodes[cluster])
            self.sg_test_nodes[cluster] = torch.LongTensor(self.sg_test_nodes[cluster])
            self.sg_features[cluster] = torch.FloatTensor(self.sg_features[cluster])
            self.sg_targets[cluster] = torch.LongTensor(self.sg_targets[cluster])


# ---------------------------------------------------------------- src/clustergcn.py
class ClusterGCNTrainer(object):
    """
    Training a ClusterGCN.
    """
    def __init__(self, args, clustering_machine):
        self.args = args
        self.clustering_machine = clustering_machine
        self.device = torch.device("cpu")
        self.create_model()

    def create_model(self):
        self.model = StackedGCN(self.args, self.clustering_machine.feature_count, self.clustering_machine.class_count)
        self.model = self.model.to(self.device)

    def do_forward_pass(self, cluster):
        edges = self.clustering_machine.sg_edges[cluster].to(self.device)
        macro_nodes = self.clustering_machine.sg_nodes[cluster].to(self.device)
        train_nodes = self.clustering_machine.sg_train_nodes[cluster].to(self.device)
        features = self.clustering_machine.sg_features[cluster].to(self.device)
        target = self.clustering_machine.sg_targets[cluster].to(self.device).squeeze()
        predictions = self.model(edges, features)
        average_loss = torch.nn.functional.nll_loss(predictions[train_nodes], target[train_nodes])
        node_count = train_nodes.shape[0]
        return average_loss, node_count

    def update_average_loss(self, batch_average_loss, node_count):
        self.accumulated_training_loss = self.accumulated_training_loss + batch_average_loss.item()*node_count
        self.node_count_seen = self.node_count_seen + node_count
        average_loss = self.accumulated_training_loss/self.node_count_seen
        return average_loss

    def do_prediction(self, cluster):
        edges = self.clustering_machine.sg_edges[cluster].to(self.device)
        macro_nodes = self.clustering_machine.sg_nodes[cluster].to(self.device)
        test_nodes = self.clustering_machine.sg_test_nodes[cluster].to(self.device)
        features = self.clustering_machine.sg_features[cluster].to(self.device)
        target = self.clustering_machine.sg_targets[cluster].to(self.device).squeeze()
        target = target[test_nodes]
        prediction = self.model(edges, features)
        prediction = prediction[test_nodes, :]
        return prediction, target

    def train(self):
        print("Training started.\n")
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=self.args.learning_rate)
        self.model.train()
        for epoch in range(self.args.epochs):
            random.shuffle(self.clustering_machine.clusters)
            self.node_count_seen = 0
            self.accumulated_training_loss = 0
            for cluster in self.clustering_machine.clusters:
                self.optimizer.zero_grad()
                batch_average_loss, node_count = self.do_forward_pass(cluster)
                batch_average_loss.backward()
                self.optimizer.step()
                average_loss = self.update_average_loss(batch_average_loss, node_count)
            if epoch % 10 == 0 or epoch == self.args.epochs - 1:
                print("Epoch %d Train Loss: %g" % (epoch, round(average_loss, 4)))

    def test(self):
        self.model.eval()
        self.predictions = []
        self.targets = []
        for cluster in self.clustering_machine.clusters:
            prediction, target = self.do_prediction(cluster)
            self.predictions.append(prediction.cpu().detach().numpy())
            self.targets.append(target.cpu().detach().numpy())
        self.targets = np.concatenate(self.targets)
        self.predictions = np.concatenate(self.predictions).argmax(1)
        score = f1_score(self.targets, self.predictions, average="micro")
        print("\nF-1 score: {:.4f}".format(score))
        return score


# ---------------------------------------------------------------- src/utils.py
def graph_reader(path):
    graph = nx.from_edgelist(pd.read_csv(path).values.tolist())
    return graph


def feature_reader(path):
    features = pd.read_csv(path)
    node_index = features["node_id"].values.tolist()
    feature_index = features["feature_id"].values.tolist()
    feature_values = features["value"].values.tolist()
    node_count = max(node_index)+1
    feature_count = max(feature_index)+1
    features = coo_matrix((feature_values, (node_index, feature_index)), shape=(node_count, feature_count)).toarray()
    return features


def target_reader(path):
    target = np.array(pd.read_csv(path)["target"]).reshape(-1, 1)
    return target


def write_synthetic_inputs(folder, n=1200, classes=4, n_feat=40, seed=42):
    """input/edges.csv, features.csv, target.csv stand-ins: a stochastic block graph with class-biased features."""
    rng = np.random.RandomState(seed)
    target = rng.randint(0, classes, n)
    src, dst = [], []
    for i in range(n):
        same = np.flatnonzero(target == target[i])
        other = np.flatnonzero(target != target[i])
        for j in rng.choice(same, 3):
            src.append(i); dst.append(j)
        for j in rng.choice(other, 1):
            src.append(i); dst.append(j)
    edges = pd.DataFrame({"id_1": src, "id_2": dst})
    edges = edges[edges.id_1 != edges.id_2]
    pref = rng.rand(classes, n_feat) < 0.25
    rows = []
    for i in range(n):
        p = np.where(pref[target[i]], 0.35, 0.12)
        for f in np.flatnonzero(rng.rand(n_feat) < p):
            rows.append((i, f, 1.0))
    rows.append((n - 1, n_feat - 1, 0.0))  # keep the shape
    features = pd.DataFrame(rows, columns=["node_id", "feature_id", "value"])
    paths = {k: os.path.join(folder, k + ".csv") for k in ("edges", "features", "target")}
    edges.to_csv(paths["edges"], index=False)
    features.to_csv(paths["features"], index=False)
    pd.DataFrame({"node_id": np.arange(n), "target": target}).to_csv(paths["target"], index=False)
    return paths


class Args:  # src/parser.py defaults, except --clustering-method random and --epochs
    clustering_method = "random"
    epochs = 60
    seed = 42
    dropout = 0.5
    learning_rate = 0.01
    test_ratio = 0.9
    cluster_number = 10
    layers = [16, 16, 16]


def main():
    args = Args()
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    np.random.seed(args.seed)
    with tempfile.TemporaryDirectory() as folder:
        paths = write_synthetic_inputs(folder)
        graph = graph_reader(paths["edges"])
        features = feature_reader(paths["features"])
        target = target_reader(paths["target"])
    clustering_machine = ClusteringMachine(args, graph, features, target)
    clustering_machine.decompose()
    gcn_trainer = ClusterGCNTrainer(args, clustering_machine)
    before = gcn_trainer.test()
    gcn_trainer.train()
    after = gcn_trainer.test()
    print("[summary] test micro-F1 first={:.4f} last={:.4f} increased={}".format(before, after, after > before))


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
