# Source: ecmwf/WeatherGenerator, src/weathergen/train/trainer.py (Trainer: model creation, freeze_modules loop, AdamW), src/weathergen/model/model.py (Model: embeds, ae_local_blocks, ae_adapter, q_cells, ae_global_blocks, fe_blocks, print_num_parameters), src/weathergen/model/utils.py (freeze_weights, get_num_parameters), commit 96a81672545fb65eb27371cb372aa5d40ce927d9
# Report: https://github.com/ecmwf/WeatherGenerator/issues/861
# WeatherGenerator fine-tuning: a pretrained encoder (stream embedding, local assimilation
# engine, local->global adapter with learnable per-cell queries q_cells, global assimilation
# engine) is frozen with the freeze_modules regex, and only the forecast engine and the
# prediction head are fine-tuned to predict the next state. Engines are reduced to small MLP
# blocks over 48 HEALPix-like cells; data are synthetic advected fields on a ring of cells.
import re

import numpy as np
import torch
import torch.nn as nn


def get_num_parameters(block):
    nps = filter(lambda p: p.requires_grad, block.parameters())
    return sum([torch.prod(torch.tensor(p.size())) for p in nps])


def freeze_weights(block):
    for p in block.parameters():
        p.requires_grad = False


def mlp_block(dim):
    return nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))


class Model(nn.Module):
    def __init__(self, num_cells=48, dim_in=4, dim_local=32, dim_global=32, num_queries=2):
        super().__init__()
        self.num_cells = num_cells
        self.num_queries = num_queries
        emb = nn.Linear(3 * dim_in, dim_local)
        emb.name = "embed_ERA5"
        self.embeds = nn.ModuleList([emb])
        self.ae_local_blocks = nn.ModuleList([mlp_block(dim_local) for _ in range(2)])
        self.ae_adapter = nn.ModuleList([nn.Linear(dim_local + dim_global, dim_global)])
        # learnable queries
        s = (num_cells, num_queries, dim_global)
        q_cells = torch.rand(s, requires_grad=True) / dim_global
        self.q_cells = torch.nn.Parameter(q_cells, requires_grad=True)
        self.ae_global_blocks = nn.ModuleList([mlp_block(dim_global * num_queries) for _ in range(2)])
        self.fe_blocks = nn.ModuleList([mlp_block(dim_global * num_queries) for _ in range(2)])
        self.pred_heads = nn.ModuleList([nn.Linear(dim_global * num_queries, dim_in)])

    def forward(self, x):
        # x: [B, cells, dim_in]; local window = the cell and its two neighbours on the ring
        ctx = torch.cat([x.roll(1, dims=1), x, x.roll(-1, dims=1)], dim=-1)
        tokens = self.embeds[0](ctx)
        for block in self.ae_local_blocks:
            tokens = tokens + block(tokens)
        q = self.q_cells.unsqueeze(0).expand(x.shape[0], -1, -1, -1)
        t = tokens.unsqueeze(2).expand(-1, -1, self.num_queries, -1)
        g = self.ae_adapter[0](torch.cat([t, q], dim=-1)).flatten(2)
        for block in self.ae_global_blocks:
            g = g + block(g)
        for block in self.fe_blocks:
            g = g + block(g)
        return x + self.pred_heads[0](g)

    def print_num_parameters(self):
        print(f"Total number of trainable parameters: {get_num_parameters(self):,}")
        print(f"  Embedding networks: ERA5 : {get_num_parameters(self.embeds):,}")
        print(f"  Local assimilation engine: {get_num_parameters(self.ae_local_blocks):,}")
        print(f"  Local-global adapter: {get_num_parameters(self.ae_adapter):,}")
        num_params_q_cells = np.prod(self.q_cells.shape) if self.q_cells.requires_grad else 0
        print(f"  Learnable queries: {num_params_q_cells:,}")
        print(f"  Global assimilation engine: {get_num_parameters(self.ae_global_blocks):,}")
        print(f"  Forecast engine: {get_num_parameters(self.fe_blocks):,}")
        print(f"  Prediction heads: {get_num_parameters(self.pred_heads):,}")


def make_fields(n, num_cells, g):
    pos = torch.arange(num_cells, dtype=torch.float32)
    phase = torch.rand(n, 1, 1, generator=g) * 6.28
    amp = 0.5 + torch.rand(n, 1, 4, generator=g)
    k = torch.tensor([1.0, 2.0, 3.0, 1.0])
    x0 = amp * torch.sin(2 * np.pi * k * pos.view(1, -1, 1) / num_cells + phase)
    x1 = amp * torch.sin(2 * np.pi * k * (pos.view(1, -1, 1) - 1.5) / num_cells + phase)
    return x0, x1


class Trainer:
    def __init__(self, cf):
        self.cf = cf
        self.freeze_modules = cf["freeze_modules"]

    def run(self):
        cf = self.cf
        torch.manual_seed(0)
        g = torch.Generator().manual_seed(0)
        self.model = Model()
        # stands in for self.model.load(run_id_contd, epoch_contd): the pretrained encoder

        for name, module in self.model.named_modules():
            name = module.name if hasattr(module, "name") else name
            # avoid the whole model element which has name ''
            if name == "":
                continue
            if re.fullmatch(self.freeze_modules, name) is not None:
                freeze_weights(module)

        self.model.print_num_parameters()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cf["lr"], weight_decay=cf["weight_decay"],
                                           betas=(0.9, 0.95), eps=2e-08)
        start = {n: p.detach().clone() for n, p in self.model.named_parameters()}
        x_all, y_all = make_fields(512, self.model.num_cells, g)
        for epoch in range(cf["num_epochs"]):
            perm = torch.randperm(len(x_all), generator=g)
            total = 0.0
            for i in range(0, len(x_all), cf["batch_size"]):
                idx = perm[i:i + cf["batch_size"]]
                pred = self.model(x_all[idx])
                loss = torch.mean((pred - y_all[idx]) ** 2)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
                total += loss.item() * len(idx)
            print(f"epoch {epoch}: train mse {total / len(x_all):.5f}")
        for part in ["embeds", "ae_local_blocks", "ae_adapter", "q_cells", "ae_global_blocks", "fe_blocks"]:
            change = max((p.detach() - start[n]).abs().max().item() for n, p in self.model.named_parameters()
                         if n.split(".")[0] == part)
            print(f"max |change| of {part}: {change:.3e}")


if __name__ == "__main__":
    cf = {"freeze_modules": ".*global.*|.*local.*|.*adapter.*|.*ERA5.*|q_cells",
          "lr": 1e-3, "weight_decay": 0.1, "num_epochs": 4, "batch_size": 32}
    Trainer(cf).run()
