# Source: EleutherAI/elk, elk/training/train.py (train), elk/training/ccs.py (CCS, fit, score, train_loop_adam), elk/training/losses.py (ccs_squared_loss), commit b5c3ea05da6e3ee5fa7feff642f271b14343fe3f
# Report: https://github.com/EleutherAI/elk/issues/5
# Eliciting latent knowledge: hidden states of a language model for the two halves of a
# contrast pair (x0 = "...? No", x1 = "...? Yes") are extracted for every layer; per layer a
# supervised logistic-regression probe and an unsupervised CCS probe are fit on the train
# split and scored on the validation split. The hidden states (normally extracted from a
# Hugging Face model and cached as train_hiddens.pt / validation_hiddens.pt) are
# synthetic: a truth direction flips sign with the label, plus a prompt-independent
# offset and noise; the validation split, like BoolQ's, has more "yes" answers.
import random
from copy import deepcopy
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
import torch.nn as nn
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, roc_auc_score

N_LAYERS, D = 2, 16


def ccs_squared_loss(logit0: torch.Tensor, logit1: torch.Tensor) -> torch.Tensor:
    p0, p1 = logit0.sigmoid(), logit1.sigmoid()
    consistency = (p0 - (1 - p1)).square().mean()
    confidence = torch.min(p0, p1).square().mean()
    return consistency + confidence


class EvalResult(NamedTuple):
    loss: float
    acc: float
    cal_acc: float
    auroc: float


@dataclass
class TrainParams:
    num_epochs: int = 1000
    num_tries: int = 10
    lr: float = 1e-2
    weight_decay: float = 0.01


class CCS(nn.Module):
    def __init__(self, in_features: int, *, device: str = "cpu"):
        super().__init__()
        self.probe = nn.Sequential(nn.Linear(in_features, 1, device=device))
        self.device = device
        self.loss = ccs_squared_loss

    def reset_parameters(self):
        for layer in self.probe:
            if isinstance(layer, nn.Linear):
                layer.reset_parameters()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.probe(x)

    def fit(self, data, lr=1e-2, num_epochs=300, num_tries=3, weight_decay=0.01) -> float:
        train_params = TrainParams(num_epochs=num_epochs, num_tries=num_tries, lr=lr,
                                   weight_decay=weight_decay)
        best_loss = torch.inf
        best_state: dict[str, torch.Tensor] = {}
        x0, x1 = data
        for _ in range(train_params.num_tries):
            self.reset_parameters()
            loss = self.train_loop_adam(x0, x1, train_params)
            if loss < best_loss:
                best_loss = loss
                best_state = deepcopy(self.probe.state_dict())
        self.probe.load_state_dict(best_state)
        return best_loss

    @torch.no_grad()
    def score(self, data, labels: torch.Tensor) -> EvalResult:
        logit0, logit1 = map(self, data)
        p0, p1 = logit0.sigmoid(), logit1.sigmoid()
        pred_probs = 0.5 * (p0 + (1 - p1))

        # Calibrated accuracy
        cal_thresh = pred_probs.float().quantile(labels.float().mean())
        cal_preds = pred_probs.gt(cal_thresh).squeeze(1).to(int)
        raw_preds = pred_probs.gt(0.5).squeeze(1).to(int)

        auroc = float(roc_auc_score(labels.tolist(), pred_probs.tolist()))
        cal_acc = cal_preds.eq(labels.reshape(-1)).float().mean()
        raw_acc = raw_preds.eq(labels.reshape(-1)).float().mean()

        return EvalResult(
            loss=self.loss(logit0, logit1).item(),
            acc=torch.max(raw_acc, 1 - raw_acc).item(),
            cal_acc=torch.max(cal_acc, 1 - cal_acc).item(),
            auroc=max(auroc, 1 - auroc),
        )

    def train_loop_adam(self, x0, x1, train_params: TrainParams) -> float:
        optimizer = torch.optim.AdamW(self.parameters(), lr=train_params.lr,
                                      weight_decay=train_params.weight_decay)
        loss = torch.inf
        for _ in range(train_params.num_epochs):
            optimizer.zero_grad()
            logit0, logit1 = self(x0), self(x1)
            loss = self.loss(logit0, logit1)
            loss.backward()
            optimizer.step()
        return float(loss)


def load_hidden_states(n, p_yes, seed):
    g = torch.Generator().manual_seed(seed)
    truth = torch.randn(N_LAYERS, D, generator=torch.Generator().manual_seed(7))
    truth = truth / truth.norm(dim=-1, keepdim=True)
    offset = torch.randn(N_LAYERS, 2 * D, generator=torch.Generator().manual_seed(8))
    labels = (torch.rand(n, generator=g) < p_yes).long()
    sign = (2 * labels - 1).float()[:, None, None]
    x1 = 1.5 * sign * truth + 0.8 * torch.randn(n, N_LAYERS, D, generator=g)
    x0 = -1.5 * sign * truth + 0.8 * torch.randn(n, N_LAYERS, D, generator=g)
    hiddens = torch.cat([x0, x1], dim=-1) + offset
    return hiddens, labels.tolist()


def train(args):
    # Reproducibility
    np.random.seed(args["seed"])
    random.seed(args["seed"])
    torch.manual_seed(args["seed"])

    # load the hidden states extracted from the model
    train_hiddens, train_labels = load_hidden_states(400, 0.5, seed=1)
    val_hiddens, val_labels = load_hidden_states(300, 0.8, seed=2)
    assert len(set(train_labels)) > 1
    assert len(set(val_labels)) > 1

    train_hiddens -= train_hiddens.float().mean(dim=0)
    val_hiddens -= val_hiddens.float().mean(dim=0)

    L = train_hiddens.shape[1]

    # Do the last layer first- useful for debugging, maybe change later
    val_layers = list(val_hiddens.unbind(1))
    train_layers = list(train_hiddens.unbind(1))
    val_layers.reverse()
    train_layers.reverse()

    print("layer train_loss loss acc cal_acc auroc lr_auroc lr_acc")
    for n, (train_h, val_h) in enumerate(zip(train_layers, val_layers)):
        lr_model = LogisticRegression(max_iter=10000, C=0.1)
        lr_model.fit(train_h, train_labels)

        lr_preds = lr_model.predict_proba(val_h)[:, 1]
        lr_acc = accuracy_score(val_labels, lr_preds > 0.5)
        lr_auroc = roc_auc_score(val_labels, lr_preds)

        x0, x1 = train_h.chunk(2, dim=-1)
        val_x0, val_x1 = val_h.chunk(2, dim=-1)

        ccs_model = CCS(in_features=x0.shape[-1])
        train_loss = ccs_model.fit(data=(x0, x1), weight_decay=args["weight_decay"])
        val_result = ccs_model.score((val_x0, val_x1), torch.tensor(val_labels))
        stats = [train_loss, *val_result, lr_auroc, lr_acc]
        print(" ".join([str(L - n)] + [f"{s:.4f}" for s in stats]))


def main():
    train({"seed": 42, "weight_decay": 0.01})


if __name__ == "__main__":
    main()
