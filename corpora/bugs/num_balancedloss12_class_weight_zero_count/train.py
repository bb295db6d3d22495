# Source: fcakyon/balanced-loss, balanced_loss/losses.py (focal_loss, Loss), commit 1c71f91775b1ad7c689bbbebd6c7a67b844e0154
# Report: https://github.com/fcakyon/balanced-loss/pull/12
# A 6-class classifier trained with the class-balanced focal loss of the balanced-loss package,
# with samples_per_class counted from the training labels as in the package README. The library
# code is the package's; the model is a small MLP on synthetic tabular features, and the training
# split happens to contain no sample of the rarest class.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def focal_loss(logits, labels, alpha=None, gamma=2):
    """Compute the focal loss between `logits` and the ground truth `labels`.
    Focal loss = -alpha_t * (1-pt)^gamma * log(pt)
    where pt is the probability of being classified to the true class.
    pt = p (if true class), otherwise pt = 1 - p. p = sigmoid(logit).
    """
    bc_loss = F.binary_cross_entropy_with_logits(input=logits, target=labels, reduction="none")

    if gamma == 0.0:
        modulator = 1.0
    else:
        modulator = torch.exp(-gamma * labels * logits - gamma * torch.log(1 + torch.exp(-1.0 * logits)))

    loss = modulator * bc_loss

    if alpha is not None:
        weighted_loss = alpha * loss
        focal_loss = torch.sum(weighted_loss)
    else:
        focal_loss = torch.sum(loss)

    focal_loss /= torch.sum(labels)
    return focal_loss


class Loss(torch.nn.Module):
    def __init__(
        self,
        loss_type: str = "cross_entropy",
        beta: float = 0.999,
        fl_gamma=2,
        samples_per_class=None,
        class_balanced=False,
    ):
        super(Loss, self).__init__()

        if class_balanced is True and samples_per_class is None:
            raise ValueError("samples_per_class cannot be None when class_balanced is True")

        self.loss_type = loss_type
        self.beta = beta
        self.fl_gamma = fl_gamma
        self.samples_per_class = samples_per_class
        self.class_balanced = class_balanced

    def forward(
        self,
        logits: torch.tensor,
        labels: torch.tensor,
    ):
        batch_size = logits.size(0)
        num_classes = logits.size(1)
        labels_one_hot = F.one_hot(labels, num_classes).float()

        if self.class_balanced:
            effective_num = 1.0 - np.power(self.beta, self.samples_per_class)
            weights = (1.0 - self.beta) / np.array(effective_num)
            weights = weights / np.sum(weights) * num_classes
            weights = torch.tensor(weights, device=logits.device).float()

            if self.loss_type != "cross_entropy":
                weights = weights.unsqueeze(0)
                weights = weights.repeat(batch_size, 1) * labels_one_hot
                weights = weights.sum(1)
                weights = weights.unsqueeze(1)
                weights = weights.repeat(1, num_classes)
        else:
            weights = None

        if self.loss_type == "focal_loss":
            cb_loss = focal_loss(logits, labels_one_hot, alpha=weights, gamma=self.fl_gamma)
        elif self.loss_type == "cross_entropy":
            cb_loss = F.cross_entropy(input=logits, target=labels_one_hot, weight=weights)
        elif self.loss_type == "binary_cross_entropy":
            cb_loss = F.binary_cross_entropy_with_logits(input=logits, target=labels_one_hot, weight=weights)
        elif self.loss_type == "softmax_binary_cross_entropy":
            pred = logits.softmax(dim=1)
            cb_loss = F.binary_cross_entropy(input=pred, target=labels_one_hot, weight=weights)
        return cb_loss


def make_data(n, rng, class_probs):
    labels = rng.choice(len(class_probs), size=n, p=class_probs)
    centers = np.random.RandomState(7).normal(0, 1.5, size=(len(class_probs), 12))
    x = centers[labels] + rng.normal(0, 1.0, size=(n, 12))
    return torch.tensor(x, dtype=torch.float32), torch.tensor(labels)


def main():
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    num_classes = 6
    x_train, y_train = make_data(600, rng, [0.45, 0.3, 0.12, 0.08, 0.05, 0.0])
    x_val, y_val = make_data(200, rng, [0.44, 0.3, 0.12, 0.08, 0.05, 0.01])
    samples_per_class = np.bincount(y_train.numpy(), minlength=num_classes).tolist()
    print("samples_per_class", samples_per_class)

    model = nn.Sequential(nn.Linear(12, 64), nn.ReLU(), nn.Linear(64, num_classes))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    criterion = Loss(
        loss_type="focal_loss",
        samples_per_class=samples_per_class,
        beta=0.999,  # class-balanced loss beta
        fl_gamma=2,  # focal loss gamma
        class_balanced=True,
    )
    for epoch in range(5):
        model.train()
        perm = torch.randperm(len(y_train))
        losses = []
        for i in range(0, len(perm), 50):
            idx = perm[i:i + 50]
            loss = criterion(model(x_train[idx]), y_train[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        model.eval()
        with torch.no_grad():
            acc = (model(x_val).argmax(1) == y_val).float().mean().item()
        print(f"epoch {epoch}: train loss {np.mean(losses):.4f} val acc {acc:.3f} "
              f"first-layer weights finite {bool(torch.isfinite(model[0].weight).all())}")


if __name__ == "__main__":
    main()
