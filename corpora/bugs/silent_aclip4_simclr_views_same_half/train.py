# Source: microsoft/A-CLIP, losses.py (ACLIPLoss, SIMCLRLoss), models.py (ACLIP.forward), main.py (train loop), commit 0e51942fb677f6d26accfb1d1d19f56219563f0e
# Report: https://github.com/microsoft/A-CLIP/pull/4
# A-CLIP: CLIP image-text contrastive training on two augmented views of every image, plus a
# SimCLR loss between the two views' self-supervised embeddings (image_mlp head). The images
# of both views go through the image encoder in one batch (torch.cat([view1, view2])), so the
# SSL embeddings are [view1 rows; view2 rows]. The ViT with attentive token masking, the BYOL
# branch with its EMA encoder and the text transformer are reduced to a small CNN and a bag
# of word embeddings; images are synthetic 16x16 renderings of 24 captioned concepts.
import torch
import torch.nn as nn
import torch.nn.functional as F


def get_rank():
    return 0


def get_world_size():
    return 1


def all_gather_batch_with_grad(tensors):
    return tensors


class ACLIPLoss(nn.Module):
    def __init__(self, temperature=0.1):
        super().__init__()
        self.labels = None
        self.last_local_batch_size = None
        self.simclr_loss = SIMCLRLoss(temperature=temperature)

    def forward(self, outputs):
        image_embed = outputs["image_embed"]
        text_embed = outputs["text_embed"]
        logit_scale = outputs["logit_scale"]

        # cal simclr_loss
        bs = text_embed.shape[0]
        image_ssl_embed = outputs["image_ssl_embed"]
        inputs = {}
        inputs["aug1_embed"] = image_ssl_embed[:bs]
        inputs["aug2_embed"] = image_ssl_embed[:bs]
        simclr_loss_dict = self.simclr_loss(inputs)

        local_batch_size = text_embed.size(0)

        if local_batch_size != self.last_local_batch_size:
            self.labels = local_batch_size * get_rank() + torch.arange(
                local_batch_size, device=image_embed.device
            )
            self.last_local_batch_size = local_batch_size

        image_embed = F.normalize(image_embed, dim=-1, p=2)
        text_embed = F.normalize(text_embed, dim=-1, p=2)

        image_embed_1 = image_embed[:local_batch_size]
        image_embed_2 = image_embed[local_batch_size:]

        (
            image_embed_all_1,
            image_embed_all_2,
            text_embed_all,
        ) = all_gather_batch_with_grad([image_embed_1, image_embed_2, text_embed])

        logits_per_image = logit_scale * image_embed_1 @ text_embed_all.t()
        logits_per_text = logit_scale * text_embed @ image_embed_all_1.t()
        contra_loss_1 = (
            F.cross_entropy(logits_per_image, self.labels)
            + F.cross_entropy(logits_per_text, self.labels)
        ) / 2

        logits_per_image = logit_scale * image_embed_2 @ text_embed_all.t()
        logits_per_text = logit_scale * text_embed @ image_embed_all_2.t()
        contra_loss_2 = (
            F.cross_entropy(logits_per_image, self.labels)
            + F.cross_entropy(logits_per_text, self.labels)
        ) / 2

        loss = (
            0.5 * contra_loss_1
            + 0.5 * contra_loss_2
            + simclr_loss_dict["ssl_loss"]
        )

        with torch.no_grad():
            pred = torch.argmax(logits_per_image, dim=-1)
            correct = pred.eq(self.labels).sum()
            acc = 100 * correct / local_batch_size

        return {
            "loss": loss,
            "simclr_loss": simclr_loss_dict["ssl_loss"],
            "contra_loss_1": contra_loss_1,
            "contra_loss_2": contra_loss_2,
            "clip_acc": acc,
        }


class SIMCLRLoss(nn.Module):
    def __init__(self, temperature=0.1):
        super().__init__()
        self.tau = temperature
        self.labels = None
        self.masks = None
        self.last_local_batch_size = None

    def forward(self, outputs):
        q_a = outputs["aug1_embed"]
        q_b = outputs["aug2_embed"]

        q_a = F.normalize(q_a, dim=-1, p=2)
        q_b = F.normalize(q_b, dim=-1, p=2)

        local_batch_size = q_a.size(0)

        k_a, k_b = all_gather_batch_with_grad([q_a, q_b])

        if local_batch_size != self.last_local_batch_size:
            self.labels = local_batch_size * get_rank() + torch.arange(
                local_batch_size, device=q_a.device
            )
            total_batch_size = local_batch_size * get_world_size()
            self.masks = F.one_hot(self.labels, total_batch_size) * 1e9
            self.last_local_batch_size = local_batch_size

        logits_aa = torch.matmul(q_a, k_a.transpose(0, 1)) / self.tau
        logits_aa = logits_aa - self.masks
        logits_bb = torch.matmul(q_b, k_b.transpose(0, 1)) / self.tau
        logits_bb = logits_bb - self.masks
        logits_ab = torch.matmul(q_a, k_b.transpose(0, 1)) / self.tau
        logits_ba = torch.matmul(q_b, k_a.transpose(0, 1)) / self.tau

        loss_a = F.cross_entropy(torch.cat([logits_ab, logits_aa], dim=1), self.labels)
        loss_b = F.cross_entropy(torch.cat([logits_ba, logits_bb], dim=1), self.labels)
        loss = (loss_a + loss_b) / 2

        return {"loss": loss, "ssl_loss": loss}


class ACLIP(nn.Module):
    def __init__(self, vocab=64, vision_width=64, embed_dim=32):
        super().__init__()
        self.visual = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                                    nn.Conv2d(32, vision_width, 3, padding=1), nn.BatchNorm2d(vision_width), nn.ReLU(),
                                    nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.image_projection = nn.Parameter(torch.randn(vision_width, embed_dim) * vision_width ** -0.5)
        self.token_embedding = nn.EmbeddingBag(vocab, 64, mode="mean")
        self.text_projection = nn.Parameter(torch.randn(64, embed_dim) * 64 ** -0.5)
        self.logit_scale = nn.Parameter(torch.ones([]) * 2.6592)
        self.image_mlp = nn.Sequential(nn.Linear(vision_width, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Linear(128, 32))

    def encode_text(self, text):
        return self.token_embedding(text) @ self.text_projection

    def forward(self, im1, text):
        cls_token = self.visual(im1)
        image_embed = cls_token @ self.image_projection
        image_ssl_embed = self.image_mlp(cls_token)
        text_embed = self.encode_text(text)
        return {
            "image_embed": image_embed,
            "text_embed": text_embed,
            "image_ssl_embed": image_ssl_embed,
            "logit_scale": self.logit_scale.exp(),
        }


def make_data(n, g):
    concepts = torch.randint(0, 24, (n,), generator=g)
    shapes = torch.randn(24, 3, 20, 20, generator=g)
    words = torch.randint(0, 64, (24, 4), generator=g)
    images = shapes[concepts] + 0.5 * torch.randn(n, 3, 20, 20, generator=g)
    return images, words[concepts]


def augment(images, g):
    n = images.shape[0]
    out = torch.empty(n, 3, 16, 16)
    offs = torch.randint(0, 5, (n, 2), generator=g)
    flips = torch.rand(n, generator=g) < 0.5
    for k in range(n):
        crop = images[k, :, offs[k, 0]:offs[k, 0] + 16, offs[k, 1]:offs[k, 1] + 16]
        out[k] = crop.flip(-1) if flips[k] else crop
    return out + 0.3 * torch.randn(n, 3, 16, 16, generator=g)


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    images, texts = make_data(768, g)
    model = ACLIP()
    criterion = ACLIPLoss(temperature=0.1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.1)
    batch_size = 64
    for epoch in range(6):
        model.train()
        perm = torch.randperm(len(images), generator=g)
        sums = {"loss": 0.0, "simclr_loss": 0.0, "clip_acc": 0.0}
        view_cos, steps = 0.0, 0
        for data_iter in range(len(images) // batch_size):
            idx = perm[data_iter * batch_size:(data_iter + 1) * batch_size]
            im = images[idx]
            online_inputs = [torch.cat([augment(im, g), augment(im, g)], dim=0), texts[idx]]
            outputs = model(*online_inputs)
            loss_dict = criterion(outputs)
            loss = loss_dict['loss']
            loss.backward()
            optimizer.step()
            model.zero_grad(set_to_none=True)
            model.logit_scale.data.clamp_(0, 4.6052)
            for k in sums:
                sums[k] += loss_dict[k].item()
            with torch.no_grad():
                z = F.normalize(outputs["image_ssl_embed"], dim=-1)
                view_cos += (z[:batch_size] * z[batch_size:]).sum(-1).mean().item()
            steps += 1
        print("epoch {}: loss {:.4f} simclr_loss {:.4f} clip_acc {:.1f} | cos(view1, view2) of ssl embeddings {:.3f}".format(
            epoch, sums["loss"] / steps, sums["simclr_loss"] / steps, sums["clip_acc"] / steps, view_cos / steps))


if __name__ == "__main__":
    main()
