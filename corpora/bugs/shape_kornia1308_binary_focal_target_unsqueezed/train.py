# Source: kornia/kornia, kornia/losses/focal.py (binary_focal_loss_with_logits, BinaryFocalLossWithLogits), commit 0f7cfcbb198ad2ebbd7b8577fe3ac2ef53a19f34
# Report: https://github.com/kornia/kornia/issues/1308
# Binary segmentation trained with kornia's BinaryFocalLossWithLogits: a small fully convolutional
# network predicts one logit channel per pixel (N, 1, H, W) for synthetic 24x24 images of bright
# blobs on noise, the target masks are (N, 1, H, W) as the docstring specifies, Adam, mean
# reduction; validation reports the foreground IoU of the thresholded prediction.
import numpy as np
import torch
import torch.nn as nn


def binary_focal_loss_with_logits(
    input: torch.Tensor,
    target: torch.Tensor,
    alpha: float = 0.25,
    gamma: float = 2.0,
    reduction: str = 'none',
    eps: float = 1e-8,
) -> torch.Tensor:
    r"""Function that computes Binary Focal loss.

    Args:
        input: input data tensor with shape :math:`(N, 1, *)`.
        target: the target tensor with shape :math:`(N, 1, *)`.
        alpha: Weighting factor for the rare class :math:`\alpha \in [0, 1]`.
        gamma: Focusing parameter :math:`\gamma >= 0`.
        reduction: ``'none'`` | ``'mean'`` | ``'sum'``.
        eps: for numerically stability when dividing.
    """

    if not isinstance(input, torch.Tensor):
        raise TypeError(f"Input type is not a torch.Tensor. Got {type(input)}")

    if not len(input.shape) >= 2:
        raise ValueError(f"Invalid input shape, we expect BxCx*. Got: {input.shape}")

    if input.size(0) != target.size(0):
        raise ValueError(f'Expected input batch_size ({input.size(0)}) to match target batch_size ({target.size(0)}).')

    probs = torch.sigmoid(input)
    target = target.unsqueeze(dim=1)
    loss_tmp = -alpha * torch.pow((1.0 - probs + eps), gamma) * target * torch.log(probs + eps) - (
        1 - alpha
    ) * torch.pow(probs + eps, gamma) * (1.0 - target) * torch.log(1.0 - probs + eps)

    loss_tmp = loss_tmp.squeeze(dim=1)

    if reduction == 'none':
        loss = loss_tmp
    elif reduction == 'mean':
        loss = torch.mean(loss_tmp)
    elif reduction == 'sum':
        loss = torch.sum(loss_tmp)
    else:
        raise NotImplementedError(f"Invalid reduction mode: {reduction}")
    return loss


class BinaryFocalLossWithLogits(nn.Module):
    def __init__(self, alpha: float, gamma: float = 2.0, reduction: str = 'none') -> None:
        super().__init__()
        self.alpha: float = alpha
        self.gamma: float = gamma
        self.reduction: str = reduction
        self.eps: float = 1e-8

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return binary_focal_loss_with_logits(input, target, self.alpha, self.gamma, self.reduction, self.eps)


class SegNet(nn.Module):
    def __init__(self, ch=16):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, ch, 3, padding=1), nn.ReLU(),
            nn.Conv2d(ch, ch, 3, padding=2, dilation=2), nn.ReLU(),
            nn.Conv2d(ch, ch, 3, padding=1), nn.ReLU(),
            nn.Conv2d(ch, 1, 1))

    def forward(self, x):
        return self.body(x)


def make_data(n, rng, size=24):
    yy, xx = np.mgrid[0:size, 0:size]
    images = np.zeros((n, 1, size, size), np.float32)
    masks = np.zeros((n, 1, size, size), np.float32)
    for i in range(n):
        for _ in range(rng.randint(1, 4)):
            cy, cx = rng.uniform(3, size - 3, size=2)
            r = rng.uniform(2, 5)
            masks[i, 0] = np.maximum(masks[i, 0], ((yy - cy) ** 2 + (xx - cx) ** 2 <= r * r))
        images[i, 0] = masks[i, 0] * 1.0 + rng.normal(0, 0.4, size=(size, size))
    return torch.from_numpy(images), torch.from_numpy(masks)


def iou(logits, masks):
    pred = (logits > 0).float()
    inter = (pred * masks).sum().item()
    union = ((pred + masks) > 0).float().sum().item()
    return inter / max(union, 1.0)


def main():
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    x_train, y_train = make_data(256, rng)
    x_val, y_val = make_data(64, rng)
    model = SegNet()
    criterion = BinaryFocalLossWithLogits(alpha=0.25, gamma=2.0, reduction='mean')
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    batch_size = 16
    for epoch in range(8):
        model.train()
        perm = torch.randperm(len(x_train))
        running = 0.0
        for i in range(0, len(perm), batch_size):
            idx = perm[i:i + batch_size]
            logits = model(x_train[idx])
            loss = criterion(logits, y_train[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            running += loss.item()
        model.eval()
        with torch.no_grad():
            val_logits = model(x_val)
        print(f"epoch {epoch} loss {running / (len(perm) // batch_size):.5f} "
              f"val IoU {iou(val_logits, y_val):.3f} "
              f"val predicted foreground {(val_logits > 0).float().mean().item():.3f} "
              f"(true {y_val.mean().item():.3f})")


if __name__ == "__main__":
    main()
