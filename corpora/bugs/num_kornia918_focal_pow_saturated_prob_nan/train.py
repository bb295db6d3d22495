# Source: kornia/kornia, kornia/losses/focal.py (binary_focal_loss_with_logits, BinaryFocalLossWithLogits), commit cdb5ebff3bb558426f77d6e6cfa5bd2e26f83c15
# Report: https://github.com/kornia/kornia/issues/918
# Frame-wise sound event detection trained with kornia's BinaryFocalLossWithLogits (gamma 0.5):
# a small 1-D convolutional network reads a synthetic 16-band log-mel-like feature sequence and
# predicts one event logit per frame (N, 1, T); the frame labels are (N, T). Adam, mean
# reduction; the validation frame F1 is printed each epoch.
import numpy as np
import torch
import torch.nn as nn


def binary_focal_loss_with_logits(
        input: torch.Tensor,
        target: torch.Tensor,
        alpha: float = 0.25,
        gamma: float = 2.0,
        reduction: str = 'none',
        eps: float = 1e-8) -> torch.Tensor:
    r"""Function that computes Binary Focal loss.

    Args:
        input (torch.Tensor): input data tensor with shape :math:`(N, 1, *)`.
        target (torch.Tensor): the target tensor with shape :math:`(N, 1, *)`.
        alpha (float): Weighting factor for the rare class :math:`\alpha \in [0, 1]`.
        gamma (float): Focusing parameter :math:`\gamma >= 0`.
        reduction (str, optional): ``'none'`` | ``'mean'`` | ``'sum'``.
        eps (float): for numerically stability when dividing. Default: 1e-8.
    """

    if not isinstance(input, torch.Tensor):
        raise TypeError("Input type is not a torch.Tensor. Got {}"
                        .format(type(input)))

    if not len(input.shape) >= 2:
        raise ValueError("Invalid input shape, we expect BxCx*. Got: {}"
                         .format(input.shape))

    if input.size(0) != target.size(0):
        raise ValueError('Expected input batch_size ({}) to match target batch_size ({}).'
                         .format(input.size(0), target.size(0)))

    probs = torch.sigmoid(input)
    target = target.unsqueeze(dim=1)
    loss_tmp = -alpha * torch.pow((1. - probs), gamma) * target * torch.log(probs + eps) \
               - (1 - alpha) * torch.pow(probs, gamma) * (1. - target) * torch.log(1. - probs + eps)
    loss_tmp = loss_tmp.squeeze(dim=1)

    if reduction == 'none':
        loss = loss_tmp
    elif reduction == 'mean':
        loss = torch.mean(loss_tmp)
    elif reduction == 'sum':
        loss = torch.sum(loss_tmp)
    else:
        raise NotImplementedError("Invalid reduction mode: {}"
                                  .format(reduction))
    return loss


class BinaryFocalLossWithLogits(nn.Module):
    def __init__(self, alpha: float, gamma: float = 2.0, reduction: str = 'none') -> None:
        super(BinaryFocalLossWithLogits, self).__init__()
        self.alpha: float = alpha
        self.gamma: float = gamma
        self.reduction: str = reduction
        self.eps: float = 1e-8

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return binary_focal_loss_with_logits(input, target, self.alpha, self.gamma, self.reduction, self.eps)


class FrameDetector(nn.Module):
    def __init__(self, bands=16, ch=32):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv1d(bands, ch, 5, padding=2), nn.ReLU(),
            nn.Conv1d(ch, ch, 5, padding=2), nn.ReLU(),
            nn.Conv1d(ch, 1, 1))

    def forward(self, x):
        return self.net(x)


def make_clips(n, rng, bands=16, frames=64):
    feats = rng.normal(0, 1, size=(n, bands, frames)).astype(np.float32)
    labels = np.zeros((n, frames), np.float32)
    for i in range(n):
        for _ in range(rng.randint(1, 3)):
            start = rng.randint(0, frames - 12)
            length = rng.randint(4, 12)
            labels[i, start:start + length] = 1.0
        feats[i, 4:9] += 6.0 * labels[i]
    return torch.from_numpy(feats), torch.from_numpy(labels)


def frame_f1(logits, labels):
    pred = (logits[:, 0] > 0).float()
    tp = (pred * labels).sum().item()
    fp = (pred * (1 - labels)).sum().item()
    fn = ((1 - pred) * labels).sum().item()
    return 2 * tp / max(2 * tp + fp + fn, 1.0)


def main():
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    x_train, y_train = make_clips(256, rng)
    x_val, y_val = make_clips(64, rng)
    model = FrameDetector()
    criterion = BinaryFocalLossWithLogits(alpha=0.5, gamma=0.5, reduction='mean')
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    batch_size = 32
    for epoch in range(10):
        model.train()
        perm = torch.randperm(len(x_train))
        losses = []
        for i in range(0, len(perm), batch_size):
            idx = perm[i:i + batch_size]
            logits = model(x_train[idx])
            loss = criterion(logits, y_train[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        model.eval()
        with torch.no_grad():
            val_logits = model(x_val)
        print(f"epoch {epoch} loss first/last batch {losses[0]:.5f}/{losses[-1]:.5f} "
              f"val frame F1 {frame_f1(val_logits, y_val):.3f} "
              f"max |logit| {val_logits.abs().max().item():.1f}")


if __name__ == "__main__":
    main()
