# Source: THUDM/GraphMAE, graphmae/utils.py (create_norm, create_activation, build_args --norm default None) + graphmae/models/gin.py + graphmae/models/edcoder.py (setup_module, PreModel) + graphmae/models/loss_func.py (sce_loss), commit 77c63386ed89b3f6333c069026401e66cb0bc3a4
# Report: https://github.com/THUDM/GraphMAE/commit/1be594160bb7c1fde0d16ced6af1e88b53612e49 ("fix bug in GIN"; earlier partial fix 011568c "fix the bug in GIN")
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F


def create_activation(name):
    if name == "relu":
        return nn.ReLU()
    elif name == "gelu":
        return nn.GELU()
    elif name == "prelu":
        return nn.PReLU()
    elif name is None:
        return nn.Identity()
    elif name == "elu":
        return nn.ELU()
    else:
        raise NotImplementedError(f"{name} is not implemented.")


def create_norm(name):
    if name == "layernorm":
        return nn.LayerNorm
    elif name == "batchnorm":
        return nn.BatchNorm1d
    else:
        return None


def sce_loss(x, y, alpha=3):
    x = F.normalize(x, p=2, dim=-1)
    y = F.normalize(y, p=2, dim=-1)
    loss = (1 - (x * y).sum(dim=-1)).pow_(alpha)
    loss = loss.mean()
    return loss


class Graph:
    """Stand-in for a DGLGraph: a dense adjacency matrix (row = destination)."""

    def __init__(self, adj):
        self.adj = adj

    def num_nodes(self):
        return self.adj.shape[0]

    def clone(self):
        return Graph(self.adj.clone())


class GIN(nn.Module):
    def __init__(self, in_dim, num_hidden, out_dim, num_layers, dropout, activation, residual, norm,
                 encoding=False, learn_eps=False, aggr="sum"):
        super(GIN, self).__init__()
        self.out_dim = out_dim
        self.num_layers = num_layers
        self.layers = nn.ModuleList()
        self.activation = activation
        self.dropout = dropout

        last_activation = create_activation(activation) if encoding else None
        last_residual = encoding and residual
        last_norm = norm if encoding else None

        if num_layers == 1:
            apply_func = MLP(2, in_dim, num_hidden, out_dim, activation=activation, norm=norm)
            if last_norm:
                apply_func = ApplyNodeFunc(apply_func, norm=norm, activation=activation)
            self.layers.append(GINConv(in_dim, out_dim, apply_func, init_eps=0, learn_eps=learn_eps, residual=last_residual))
        else:
            # input projection (no residual)
            self.layers.append(GINConv(
                in_dim,
                num_hidden,
                ApplyNodeFunc(MLP(2, in_dim, num_hidden, num_hidden, activation=activation, norm=norm), activation=activation, norm=norm),
                init_eps=0,
                learn_eps=learn_eps,
                residual=residual)
            )
            # hidden layers
            for l in range(1, num_layers - 1):
                self.layers.append(GINConv(
                    num_hidden, num_hidden,
                    ApplyNodeFunc(MLP(2, num_hidden, num_hidden, num_hidden, activation=activation, norm=norm), activation=activation, norm=norm),
                    init_eps=0,
                    learn_eps=learn_eps,
                    residual=residual)
                )
            # output projection
            apply_func = MLP(2, num_hidden, num_hidden, out_dim, activation=activation, norm=norm)
            if last_norm:
                apply_func = ApplyNodeFunc(apply_func, activation=activation, norm=norm)

            self.layers.append(GINConv(num_hidden, out_dim, apply_func, init_eps=0, learn_eps=learn_eps, residual=last_residual))

        self.head = nn.Identity()

    def forward(self, g, inputs, return_hidden=False):
        h = inputs
        hidden_list = []
        for l in range(self.num_layers):
            h = F.dropout(h, p=self.dropout, training=self.training)
            h = self.layers[l](g, h)
            hidden_list.append(h)
        # output projection
        if return_hidden:
            return self.head(h), hidden_list
        else:
            return self.head(h)


class GINConv(nn.Module):
    def __init__(self, in_dim, out_dim, apply_func, aggregator_type="sum", init_eps=0, learn_eps=False, residual=False):
        super().__init__()
        self._in_feats = in_dim
        self._out_feats = out_dim
        self.apply_func = apply_func
        self._aggregator_type = aggregator_type
        if learn_eps:
            self.eps = torch.nn.Parameter(torch.FloatTensor([init_eps]))
        else:
            self.register_buffer('eps', torch.FloatTensor([init_eps]))
        if residual:
            if self._in_feats != self._out_feats:
                self.res_fc = nn.Linear(self._in_feats, self._out_feats, bias=False)
            else:
                self.res_fc = nn.Identity()
        else:
            self.register_buffer('res_fc', None)

    def forward(self, graph, feat):
        neigh = graph.adj @ feat  # sum over in-neighbours (copy_src + sum)
        rst = (1 + self.eps) * feat + neigh
        if self.apply_func is not None:
            rst = self.apply_func(rst)
        if self.res_fc is not None:
            rst = rst + self.res_fc(feat)
        return rst


class ApplyNodeFunc(nn.Module):
    """Update the node feature hv with MLP, BN and ReLU."""
    def __init__(self, mlp, norm="batchnorm", activation="relu"):
        super(ApplyNodeFunc, self).__init__()
        self.mlp = mlp
        self.norm = create_norm(norm)(self.mlp.output_dim)
        self.act = create_activation(activation)

    def forward(self, h):
        h = self.mlp(h)
        h = self.norm(h)
        h = self.act(h)
        return h


class MLP(nn.Module):
    """MLP with linear output"""
    def __init__(self, num_layers, input_dim, hidden_dim, output_dim, activation="relu", norm="batchnorm"):
        super(MLP, self).__init__()
        self.linear_or_not = True  # default is linear model
        self.num_layers = num_layers
        self.output_dim = output_dim

        if num_layers < 1:
            raise ValueError("number of layers should be positive!")
        elif num_layers == 1:
            # Linear model
            self.linear = nn.Linear(input_dim, output_dim)
        else:
            # Multi-layer model
            self.linear_or_not = False
            self.linears = torch.nn.ModuleList()
            self.norms = torch.nn.ModuleList()
            self.activations = torch.nn.ModuleList()

            self.linears.append(nn.Linear(input_dim, hidden_dim))
            for layer in range(num_layers - 2):
                self.linears.append(nn.Linear(hidden_dim, hidden_dim))
            self.linears.append(nn.Linear(hidden_dim, output_dim))

            for layer in range(num_layers - 1):
                self.norms.append(create_norm(norm)(hidden_dim))
                self.activations.append(create_activation(activation))

    def forward(self, x):
        if self.linear_or_not:
            # If linear model
            return self.linear(x)
        else:
            # If MLP
            h = x
            for i in range(self.num_layers - 1):
                h = self.norms[i](self.linears[i](h))
                h = self.activations[i](h)
            return self.linears[-1](h)


def setup_module(m_type, enc_dec, in_dim, num_hidden, out_dim, num_layers, dropout, activation, residual, norm):
    if m_type == "gin":
        mod = GIN(in_dim=in_dim, num_hidden=num_hidden, out_dim=out_dim, num_layers=num_layers, dropout=dropout,
                  activation=activation, residual=residual, norm=norm, encoding=(enc_dec == "encoding"))
    else:
        raise NotImplementedError
    return mod


class PreModel(nn.Module):
    def __init__(self, in_dim, num_hidden, num_layers, activation, feat_drop, residual, norm, mask_rate=0.3,
                 encoder_type="gin", decoder_type="gin", loss_fn="sce", replace_rate=0.1, alpha_l=2):
        super(PreModel, self).__init__()
        self._mask_rate = mask_rate
        self._encoder_type = encoder_type
        self._decoder_type = decoder_type
        self._replace_rate = replace_rate
        self._mask_token_rate = 1 - self._replace_rate
        enc_num_hidden = num_hidden
        dec_in_dim = num_hidden
        dec_num_hidden = num_hidden

        # build encoder
        self.encoder = setup_module(m_type=encoder_type, enc_dec="encoding", in_dim=in_dim, num_hidden=enc_num_hidden,
                                    out_dim=enc_num_hidden, num_layers=num_layers, dropout=feat_drop,
                                    activation=activation, residual=residual, norm=norm)
        # build decoder for attribute prediction
        self.decoder = setup_module(m_type=decoder_type, enc_dec="decoding", in_dim=dec_in_dim,
                                    num_hidden=dec_num_hidden, out_dim=in_dim, num_layers=1, dropout=feat_drop,
                                    activation=activation, residual=residual, norm=norm)
        self.enc_mask_token = nn.Parameter(torch.zeros(1, in_dim))
        self.encoder_to_decoder = nn.Linear(dec_in_dim, dec_in_dim, bias=False)
        self.criterion = partial(sce_loss, alpha=alpha_l)

    def encoding_mask_noise(self, g, x, mask_rate=0.3):
        num_nodes = g.num_nodes()
        perm = torch.randperm(num_nodes, device=x.device)
        # random masking
        num_mask_nodes = int(mask_rate * num_nodes)
        mask_nodes = perm[: num_mask_nodes]
        keep_nodes = perm[num_mask_nodes:]

        num_noise_nodes = int(self._replace_rate * num_mask_nodes)
        perm_mask = torch.randperm(num_mask_nodes, device=x.device)
        token_nodes = mask_nodes[perm_mask[: int(self._mask_token_rate * num_mask_nodes)]]
        noise_nodes = mask_nodes[perm_mask[-int(self._replace_rate * num_mask_nodes):]]
        noise_to_be_chosen = torch.randperm(num_nodes, device=x.device)[:num_noise_nodes]
        out_x = x.clone()
        out_x[token_nodes] = 0.0
        out_x[noise_nodes] = x[noise_to_be_chosen]
        out_x[token_nodes] += self.enc_mask_token
        use_g = g.clone()
        return use_g, out_x, (mask_nodes, keep_nodes)

    def forward(self, g, x):
        # ---- attribute reconstruction ----
        loss = self.mask_attr_prediction(g, x)
        loss_item = {"loss": loss.item()}
        return loss, loss_item

    def mask_attr_prediction(self, g, x):
        pre_use_g, use_x, (mask_nodes, keep_nodes) = self.encoding_mask_noise(g, x, self._mask_rate)
        use_g = pre_use_g
        enc_rep, all_hidden = self.encoder(use_g, use_x, return_hidden=True)
        # ---- attribute reconstruction ----
        rep = self.encoder_to_decoder(enc_rep)
        # * remask, re-mask
        rep[mask_nodes] = 0
        recon = self.decoder(pre_use_g, rep)
        x_init = x[mask_nodes]
        x_rec = recon[mask_nodes]
        loss = self.criterion(x_rec, x_init)
        return loss


def make_graph(num_nodes=300, num_classes=4, in_dim=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, num_classes, (num_nodes,), generator=g)
    same = labels[:, None] == labels[None, :]
    prob = torch.where(same, torch.tensor(0.05), torch.tensor(0.005))
    adj = (torch.rand(num_nodes, num_nodes, generator=g) < prob).float()
    adj = torch.triu(adj, 1)
    adj = adj + adj.T
    centers = torch.randn(num_classes, in_dim, generator=g)
    feat = (centers[labels] + torch.randn(num_nodes, in_dim, generator=g) > 0.8).float()
    return Graph(adj), feat, labels


def main():
    torch.manual_seed(0)
    # args as parsed by build_args(): --encoder gin --decoder gin, --norm left at its default (None)
    args = dict(num_hidden=64, num_layers=2, activation="prelu", in_drop=0.2, residual=False, norm=None,
                mask_rate=0.5, encoder="gin", decoder="gin", loss_fn="sce", replace_rate=0.05, alpha_l=3,
                lr=0.001, weight_decay=2e-4, max_epoch=60)
    graph, feat, labels = make_graph()
    model = PreModel(in_dim=feat.shape[1], num_hidden=args["num_hidden"], num_layers=args["num_layers"],
                     activation=args["activation"], feat_drop=args["in_drop"], residual=args["residual"],
                     norm=args["norm"], mask_rate=args["mask_rate"], encoder_type=args["encoder"],
                     decoder_type=args["decoder"], loss_fn=args["loss_fn"], replace_rate=args["replace_rate"],
                     alpha_l=args["alpha_l"])
    optimizer = torch.optim.Adam(model.parameters(), lr=args["lr"], weight_decay=args["weight_decay"])
    for epoch in range(args["max_epoch"]):
        model.train()
        loss, loss_dict = model(graph, feat)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if epoch % 10 == 0 or epoch == args["max_epoch"] - 1:
            print(f"# Epoch {epoch}: train_loss: {loss.item():.4f}")


if __name__ == "__main__":
    main()
