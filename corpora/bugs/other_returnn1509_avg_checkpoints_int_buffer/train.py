# Source: rwth-i6/returnn, tools/torch_avg_checkpoints.py (merge_checkpoints), returnn/torch/engine.py (checkpoint layout {"model", "epoch", "step", ...}), commit 870826b907e82b030e343b9170a3e23bdf7e92c1
# Report: https://github.com/rwth-i6/returnn/pull/1509
# A RETURNN-style PyTorch training run saves one checkpoint per epoch ({"model": state_dict,
# "epoch", "step", "effective_learning_rate"}); at the end the last checkpoints are averaged
# with tools/torch_avg_checkpoints.py's merge_checkpoints and the averaged model is
# evaluated. The acoustic model is reduced to a frame classifier (conv front-end with
# BatchNorm + feed-forward) on synthetic 40-dim "log-mel" frames of 8 phone classes.
from __future__ import annotations

import os
import tempfile
from collections import defaultdict
from typing import Any, Dict, Optional, Sequence

import torch
from torch import nn
import torch.nn.functional as F


def merge_checkpoints(in_ckpts: Sequence[str], out_ckpt: str, extra_state: Optional[Dict[str, Any]] = None):
    """
    Merge checkpoints
    """
    out_model_state: Dict[str, torch.Tensor] = {}
    out_model_state_num: Dict[str, int] = defaultdict(int)
    out_state: Dict[str, Any] = {"model": out_model_state, "merged_epochs": [], "merged_steps": []}
    for in_ckpt in in_ckpts:
        print("read ckpt:", os.path.basename(in_ckpt))
        torch_version = tuple(int(s) for s in str(torch.__version__).split("+")[0].split(".")[:2])
        load_kwargs = dict(map_location=torch.device("cpu"), mmap=True)
        if torch_version < (2, 1):
            load_kwargs.pop("mmap")  # mmap flag only introduced from 2.1.0 onwards
        in_state = torch.load(in_ckpt, **load_kwargs)
        assert isinstance(in_state, dict)

        assert "model" in in_state and isinstance(in_state["model"], dict)
        covered_keys = {"model"}
        for k, v in in_state["model"].items():
            k: str
            v: torch.Tensor
            if k in out_model_state:
                out_model_state[k] += v
            else:
                out_model_state[k] = v
            out_model_state_num[k] += 1

        # Take max value of the following
        for k in ["epoch", "step"]:
            covered_keys.add(k)
            if k in in_state:
                if k in out_state:
                    out_state[k] = max(out_state[k], in_state[k])
                else:
                    out_state[k] = in_state[k]

        # Extend list of following
        for k in ["merged_epochs", "merged_steps"]:
            covered_keys.add(k)
            if k in in_state:
                out_state[k].extend(in_state[k])
        out_state["merged_epochs"].append(in_state.get("epoch"))
        out_state["merged_steps"].append(in_state.get("step"))

        # Take first value of all remaining keys
        for k, v in in_state.items():
            if k in covered_keys:
                continue
            if k not in out_state:
                out_state[k] = v

    # Average
    for k in out_model_state:
        out_model_state[k] /= out_model_state_num[k]

    if extra_state:
        out_state.update(extra_state)

    print("save ckpt:", os.path.basename(out_ckpt))
    torch.save(out_state, out_ckpt)


class Model(nn.Module):
    def __init__(self, in_dim=40, num_classes=8):
        super().__init__()
        self.conv = nn.Conv1d(in_dim, 64, 5, padding=2)
        self.bn = nn.BatchNorm1d(64)
        self.ff = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, num_classes))

    def forward(self, x):  # x: [B, T, F]
        h = F.relu(self.bn(self.conv(x.transpose(1, 2)))).transpose(1, 2)
        return self.ff(h)


def make_data(n, g):
    means = torch.randn(8, 40, generator=torch.Generator().manual_seed(42))
    y = torch.randint(0, 8, (n, 1), generator=g).repeat(1, 50)
    for i in range(n):  # piecewise-constant phone sequences
        cuts = sorted(torch.randint(1, 49, (4,), generator=g).tolist())
        for a, b in zip([0] + cuts, cuts + [50]):
            y[i, a:b] = int(torch.randint(0, 8, (1,), generator=g))
    x = means[y] + 1.5 * torch.randn(n, 50, 40, generator=g)
    return x, y


def frame_error_rate(model, x, y):
    model.eval()
    with torch.no_grad():
        fer = (model(x).argmax(-1) != y).float().mean().item()
    model.train()
    return fer


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x_train, y_train = make_data(512, g)
    x_dev, y_dev = make_data(128, g)
    model = Model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    ckpt_dir = tempfile.mkdtemp()
    step = 0
    ckpts = []
    for epoch in range(1, 7):
        perm = torch.randperm(512, generator=g)
        for i in range(0, 512, 32):
            idx = perm[i:i + 32]
            loss = F.cross_entropy(model(x_train[idx]).flatten(0, 1), y_train[idx].flatten())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
        filename = os.path.join(ckpt_dir, "epoch.%03i.pt" % epoch)
        torch.save({"model": model.state_dict(), "epoch": epoch, "step": step,
                    "effective_learning_rate": optimizer.param_groups[0]["lr"]}, filename)
        ckpts.append(filename)
        print(f"epoch {epoch}: train loss {loss.item():.4f} dev FER {frame_error_rate(model, x_dev, y_dev):.4f}")

    avg_file = os.path.join(ckpt_dir, "avg.pt")
    merge_checkpoints(in_ckpts=ckpts[-3:], out_ckpt=avg_file)
    avg_state = torch.load(avg_file)
    avg_model = Model()
    avg_model.load_state_dict(avg_state["model"])
    print(f"averaged epochs {avg_state['merged_epochs']}: dev FER {frame_error_rate(avg_model, x_dev, y_dev):.4f}")


if __name__ == "__main__":
    main()
