# Source: Zasder3/train-CLIP, models/wrapper.py (CLIPWrapper.training_step / configure_optimizers), before the fix for issue #6; fixed file at commit 03641972efbb2fe521e5568e46e2758d00e17f78
# Report: https://github.com/Zasder3/train-CLIP/issues/6
import copy
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class CLIP(nn.Module):
    def __init__(self, image_dim=48, vocab_size=100, embed_dim=32):
        super().__init__()
        self.visual = nn.Sequential(nn.Linear(image_dim, 64), nn.ReLU(), nn.Linear(64, embed_dim))
        self.token_embedding = nn.Embedding(vocab_size, 64)
        self.text_projection = nn.Linear(64, embed_dim)
        self.logit_scale = nn.Parameter(torch.ones([]) * np.log(1 / 0.07))

    def encode_image(self, image):
        return self.visual(image)

    def encode_text(self, text):
        return self.text_projection(self.token_embedding(text).mean(1))


class CLIPWrapper(nn.Module):
    def __init__(self, config, minibatch_size):
        super().__init__()
        self.model = CLIP(**config)
        self.minibatch_size = minibatch_size
        self.global_rank = 0

    def all_gather(self, t):
        return t

    def training_step(self, train_batch, idx, optimizer, lr_scheduler):
        image, text = train_batch
        n = math.ceil(len(image) // self.minibatch_size) if self.minibatch_size > 0 else 1
        image_mbs = torch.chunk(image, n)
        text_mbs = torch.chunk(text, n)

        # calculate original statistics
        with torch.no_grad():
            ims = [F.normalize(self.model.encode_image(im), dim=1) for im in image_mbs]
            txt = [F.normalize(self.model.encode_text(t), dim=1) for t in text_mbs]
            # gather from all GPUs
            ims = self.all_gather(torch.cat(ims))
            txt = self.all_gather(torch.cat(txt))

            if not isinstance(ims[0], list):
                ims = [ims]
                txt = [txt]

            image_logits = torch.cat(ims) @ torch.cat(txt).t() * self.model.logit_scale.exp()
            ground_truth = torch.arange(len(image_logits)).type_as(image_logits).long()
            loss = (F.cross_entropy(image_logits, ground_truth) + F.cross_entropy(image_logits.t(), ground_truth)).div(2)
            acc_i = (torch.argmax(image_logits) == ground_truth).sum()
            acc_t = (torch.argmax(image_logits.t()) == ground_truth).sum()
            log = {'loss': loss.item(), 'acc': ((acc_i + acc_t) / 2 / len(image)).item()}

        optimizer.zero_grad()

        # image loss
        for j, mb in enumerate(image_mbs):
            images_tmp = copy.deepcopy(ims)
            images_tmp[self.global_rank][j * self.minibatch_size:(j + 1) * self.minibatch_size] = F.normalize(self.model.encode_image(mb), dim=1)
            image_logits = torch.cat(images_tmp) @ torch.cat(txt).t() * self.model.logit_scale.exp()
            ground_truth = torch.arange(len(image_logits)).type_as(image_logits).long()
            loss = (F.cross_entropy(image_logits, ground_truth) + F.cross_entropy(image_logits.t(), ground_truth)) / 2
            loss.backward()

        # text loss
        for j, mb in enumerate(text_mbs):
            text_tmp = copy.deepcopy(txt)
            text_tmp[self.global_rank][j * self.minibatch_size:(j + 1) * self.minibatch_size] = F.normalize(self.model.encode_text(mb), dim=1)
            image_logits = torch.cat(ims) @ torch.cat(text_tmp).t() * self.model.logit_scale.exp()
            loss = (F.cross_entropy(image_logits, ground_truth) + F.cross_entropy(image_logits.t(), ground_truth)) / 2
            loss.backward()

        optimizer.step()
        lr_scheduler.step()
        self.model.logit_scale.data.clamp_(-np.log(100), np.log(100))
        return log

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.model.parameters(), lr=5e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.2)
        lr_scheduler = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, T_0=2000)
        return optimizer, lr_scheduler


def make_pairs(n, g, n_concepts=200):
    concept = torch.randint(0, n_concepts, (n,), generator=g)
    img_basis = torch.randn(n_concepts, 48, generator=torch.Generator().manual_seed(1))
    image = img_basis[concept] + 0.3 * torch.randn(n, 48, generator=g)
    text = torch.stack([concept % 100, (concept * 7 + 3) % 100, (concept // 2) % 100], 1)
    return image, text


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    model = CLIPWrapper({}, minibatch_size=16)
    optimizer, lr_scheduler = model.configure_optimizers()
    for idx in range(150):
        batch = make_pairs(64, g)
        log = model.training_step(batch, idx, optimizer, lr_scheduler)
        if idx % 30 == 0 or idx == 149:
            print(f"step {idx} loss {log['loss']:.4f} acc {log['acc']:.4f}")


if __name__ == "__main__":
    main()
