# Source: KevinMusgrave/pytorch-metric-learning, src/pytorch_metric_learning/losses/pnp_loss.py (PNPLoss), utils/loss_and_miner_utils.py (get_all_pairs_indices), distances/cosine_similarity.py, commit ac607007dc62666f9de850cd5b8e5694ff0da1c2
# Report: https://github.com/KevinMusgrave/pytorch-metric-learning/pull/660
# Deep metric learning with the library's PNPLoss (variant "O"): an embedding MLP trained on
# random mini-batches of a 24-class dataset, with recall@1 on a held-out set. PNPLoss is the
# library's code; BaseMetricLossFunction's reduction is folded into a small __call__, the
# distance and pair-index helpers are re-implemented with the library's semantics.
import torch
import torch.nn as nn
import torch.nn.functional as F


def get_all_pairs_indices(labels):
    matches = (labels.unsqueeze(1) == labels.unsqueeze(0)).byte()
    diffs = matches ^ 1
    matches.fill_diagonal_(0)
    a1_idx, p_idx = torch.where(matches)
    a2_idx, n_idx = torch.where(diffs)
    return a1_idx, p_idx, a2_idx, n_idx


class CosineSimilarity:
    def __call__(self, embeddings):
        e = F.normalize(embeddings, dim=1)
        return e @ e.t()


class PNPLoss(nn.Module):
    VARIANTS = ["Ds", "Dq", "Iu", "Ib", "O"]

    def __init__(self, b=2, alpha=1, anneal=0.01, variant="O"):
        super().__init__()
        self.b = b
        self.alpha = alpha
        self.anneal = anneal
        self.variant = variant
        self.distance = CosineSimilarity()
        if self.variant not in self.VARIANTS:
            raise ValueError(f"variant={variant} but must be one of {self.VARIANTS}")

    def zero_losses(self):
        return {"loss": {"losses": 0, "indices": None, "reduction_type": "already_reduced"}}

    def compute_loss(self, embeddings, labels):
        dtype, device = embeddings.dtype, embeddings.device

        N = labels.size(0)
        a1_idx, p_idx, a2_idx, n_idx = get_all_pairs_indices(labels)
        I_pos = torch.zeros(N, N, dtype=dtype, device=device)
        I_neg = torch.zeros(N, N, dtype=dtype, device=device)
        I_pos[a1_idx, p_idx] = 1
        I_pos[a1_idx, a1_idx] = 1
        I_neg[a2_idx, n_idx] = 1
        N_pos = torch.sum(I_pos, dim=1)
        safe_N = N_pos > 0
        if torch.sum(safe_N) == 0:
            return self.zero_losses()
        sim_all = self.distance(embeddings)

        mask = I_neg.unsqueeze(dim=0).repeat(N, 1, 1)

        sim_all_repeat = sim_all.unsqueeze(dim=1).repeat(1, N, 1)
        # compute the difference matrix
        sim_diff = sim_all_repeat - sim_all_repeat.permute(0, 2, 1)
        # pass through the sigmoid and ignores the relevance score of the query to itself
        sim_sg = self.sigmoid(sim_diff, temp=self.anneal) * mask
        # compute the number of negatives before
        sim_all_rk = torch.sum(sim_sg, dim=-1)

        if self.variant == "Ds":
            sim_all_rk = torch.log(1 + sim_all_rk)
        elif self.variant == "Dq":
            sim_all_rk = 1 / (1 + sim_all_rk) ** (self.alpha)
        elif self.variant == "Iu":
            sim_all_rk = (1 + sim_all_rk) * torch.log(1 + sim_all_rk)
        elif self.variant == "Ib":
            b = self.b
            sim_all_rk = 1 / b**2 * (b * sim_all_rk - torch.log(1 + b * sim_all_rk))
        elif self.variant == "O":
            pass
        else:
            raise Exception(f"variant <{self.variant}> not available!")

        loss = torch.sum(sim_all_rk * I_pos, dim=-1) / N_pos.reshape(-1)
        loss = torch.sum(loss) / N
        if self.variant == "Dq":
            loss = 1 - loss

        return {
            "loss": {
                "losses": loss,
                "indices": torch.where(safe_N)[0],
                "reduction_type": "already_reduced",
            }
        }

    def sigmoid(self, tensor, temp=1.0):
        exponent = -tensor / temp
        # clamp the input tensor for stability
        exponent = torch.clamp(exponent, min=-50, max=50)
        y = 1.0 / (1.0 + torch.exp(exponent))
        return y

    def forward(self, embeddings, labels):
        return self.compute_loss(embeddings, labels)["loss"]["losses"]


def make_data(n, num_classes, gen):
    centers = torch.randn(num_classes, 32, generator=gen) * 1.2
    labels = torch.randint(0, num_classes, (n,), generator=gen)
    return centers[labels] + torch.randn(n, 32, generator=gen), labels


def recall_at_1(emb, labels):
    sim = F.normalize(emb, dim=1) @ F.normalize(emb, dim=1).t()
    sim.fill_diagonal_(-2)
    return (labels[sim.argmax(1)] == labels).float().mean().item()


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    x_train, y_train = make_data(960, 24, gen)
    x_test, y_test = make_data(240, 24, gen)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 16))
    loss_func = PNPLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(4):
        model.train()
        perm = torch.randperm(len(y_train), generator=gen)
        losses, singletons = [], 0
        for i in range(0, len(perm), 32):
            idx = perm[i:i + 32]
            labels = y_train[idx]
            singletons += int((torch.bincount(labels) == 1).sum())
            embeddings = model(x_train[idx])
            loss = loss_func(embeddings, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        model.eval()
        with torch.no_grad():
            r1 = recall_at_1(model(x_test), y_test)
        n_nan = sum(l != l for l in losses)
        print(f"epoch {epoch}: loss {sum(losses) / len(losses):.4f} (nan batches {n_nan}/{len(losses)}, "
              f"anchors without a positive: {singletons}), test recall@1 {r1:.3f}")


if __name__ == "__main__":
    main()
