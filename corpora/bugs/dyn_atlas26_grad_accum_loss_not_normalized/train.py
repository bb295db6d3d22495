# Source: fredzzhang/atlas, src/finetune.py (finetune), src/utils.py (cosine_lr), commit f1caf08dc6c454495167fcb82ceb23d10f6a9768
# Report: https://github.com/fredzzhang/atlas/pull/26
# atlas finetune(): fine-tune a CLIP image encoder under a frozen zero-shot classification head
# with AdamW, the repository's cosine_lr with warmup, gradient accumulation over
# num_grad_accumulation micro-batches (2 for ViT-L-14), clip_grad_norm_(params, 1.0) before each
# optimizer step, and top-1 accuracy after every epoch. The CLIP ViT is replaced by a small MLP
# encoder over synthetic 3x8x8 images, the text-embedding head by fixed random unit vectors with
# CLIP's logit scale 100; DDP, GradScaler/fp16 autocast and checkpoint saving are removed.
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)


class Args:
    lr = 1e-4
    wd = 0.1
    epochs = 6
    batch_size = 64
    num_grad_accumulation = 2
    warmup_length = 10
    ls = 0.0


def assign_learning_rate(param_group, new_lr):
    param_group["lr"] = new_lr


def _warmup_lr(base_lr, warmup_length, step):
    return base_lr * (step + 1) / warmup_length


def cosine_lr(optimizer, base_lrs, warmup_length, steps):
    if not isinstance(base_lrs, list):
        base_lrs = [base_lrs for _ in optimizer.param_groups]
    assert len(base_lrs) == len(optimizer.param_groups)

    def _lr_adjuster(step):
        for param_group, base_lr in zip(optimizer.param_groups, base_lrs):
            if step < warmup_length:
                lr = _warmup_lr(base_lr, warmup_length, step)
            else:
                e = step - warmup_length
                es = steps - warmup_length
                lr = 0.5 * (1 + np.cos(np.pi * e / es)) * base_lr
            assign_learning_rate(param_group, lr)

    return _lr_adjuster


class ImageEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = nn.Sequential(nn.Flatten(), nn.Linear(192, 256), nn.GELU(), nn.Linear(256, 64))

    def forward(self, images):
        return self.model(images)


class ClassificationHead(nn.Linear):
    def __init__(self, normalize, weights):
        output_size, input_size = weights.shape
        super().__init__(input_size, output_size)
        self.normalize = normalize
        self.weight = nn.Parameter(weights.clone())
        self.bias = nn.Parameter(torch.zeros_like(self.bias))

    def forward(self, inputs):
        if self.normalize:
            inputs = inputs / inputs.norm(dim=-1, keepdim=True)
        return super().forward(inputs)


class ImageClassifier(nn.Module):
    def __init__(self, image_encoder, classification_head):
        super().__init__()
        self.image_encoder = image_encoder
        self.classification_head = classification_head

    def freeze_head(self):
        self.classification_head.weight.requires_grad_(False)
        self.classification_head.bias.requires_grad_(False)

    def forward(self, inputs):
        features = self.image_encoder(inputs)
        outputs = self.classification_head(features)
        return outputs


def get_classification_head(n_classes=10):
    g = torch.Generator().manual_seed(1)
    zeroshot_weights = F.normalize(torch.randn(n_classes, 64, generator=g), dim=-1) * 100.0
    return ClassificationHead(normalize=True, weights=zeroshot_weights)


def make_dataset(n, protos):
    y = torch.randint(0, 10, (n,))
    x = protos[y] + 3.0 * torch.randn(n, 3, 8, 8)
    return x, y


def eval_single_dataset(image_encoder, head, loader):
    model = ImageClassifier(image_encoder, head)
    model.eval()
    correct, n = 0.0, 0
    with torch.no_grad():
        for inputs, labels in loader:
            logits = model(inputs)
            correct += (logits.argmax(1) == labels).sum().item()
            n += labels.size(0)
    top1 = correct / n
    print(f"Done evaluating. Accuracy: {100 * top1:.2f}%")
    return top1


def finetune(args):
    protos = torch.randn(10, 3, 8, 8)
    x_train, y_train = make_dataset(2048, protos)
    x_test, y_test = make_dataset(1024, protos)
    data_loader = DataLoader(TensorDataset(x_train, y_train), batch_size=args.batch_size, shuffle=True)
    test_loader = DataLoader(TensorDataset(x_test, y_test), batch_size=256)
    num_batches = len(data_loader)

    image_encoder = ImageEncoder()
    classification_head = get_classification_head()
    model = ImageClassifier(image_encoder, classification_head)
    model.freeze_head()
    print_every = 10

    loss_fn = torch.nn.CrossEntropyLoss()

    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=args.wd)

    scheduler = cosine_lr(
        optimizer,
        args.lr,
        args.warmup_length,
        args.epochs * num_batches // args.num_grad_accumulation,
    )

    eval_single_dataset(model.image_encoder, classification_head, test_loader)
    for epoch in range(args.epochs):
        model.train()
        norms = []
        for i, batch in enumerate(data_loader):
            start_time = time.time()

            step = (
                i // args.num_grad_accumulation
                + epoch * num_batches // args.num_grad_accumulation
            )

            inputs, labels = batch
            data_time = time.time() - start_time

            logits = model(inputs)
            loss = loss_fn(logits, labels)

            loss.backward()

            if (i + 1) % args.num_grad_accumulation == 0:
                scheduler(step)

                grad_norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
                norms.append(grad_norm.item())
                optimizer.step()
                optimizer.zero_grad()

            batch_time = time.time() - start_time

            if step % print_every == 0 and ((i + 1) % args.num_grad_accumulation == 0):
                percent_complete = 100 * i / len(data_loader)
                print(
                    f"Train Epoch: {epoch} [{percent_complete:.0f}% {i}/{len(data_loader)}]\t"
                    f"Loss: {loss.item():.6f}\tgrad norm {norms[-1]:.3f}",
                    flush=True,
                )

        clipped = sum(n > 1.0 for n in norms)
        print(f"epoch {epoch}: {len(norms)} optimizer steps, accumulated grad norm median {np.median(norms):.3f}, "
              f"clipped to 1.0 in {clipped}/{len(norms)} steps")
        # Test the model each epoch
        eval_single_dataset(model.image_encoder, classification_head, test_loader)


if __name__ == "__main__":
    finetune(Args())
