# Source: allenai/satlaspretrain_models, satlaspretrain_models/models/heads.py, commit 398d1e1861d7fefbc35a9e90210f6351b0c28a6d
# Report: https://github.com/allenai/satlaspretrain_models/issues/5
# Fine-tuning a SatlasPretrain backbone with the SimpleHead for the 'segment' task (land-cover
# classes per pixel). The Swin backbone + FPN is reduced to a small conv encoder; the imagery is
# synthetic 4-class 32x32 tiles.
import torch


class SimpleHead(torch.nn.Module):
    def __init__(self, task, backbone_channels, num_categories=2):
        super(SimpleHead, self).__init__()

        self.task_type = task

        use_channels = backbone_channels[0][1]
        num_layers = 2
        self.num_outputs = num_categories
        if self.num_outputs is None:
            if self.task_type == 'regress':
                self.num_outputs = 1
            else:
                self.num_outputs = 2

        layers = []
        for _ in range(num_layers-1):
            layer = torch.nn.Sequential(
                torch.nn.Conv2d(use_channels, use_channels, 3, padding=1),
                torch.nn.ReLU(inplace=True),
            )
            layers.append(layer)

        if self.task_type == 'segment':
            layers.append(torch.nn.Conv2d(use_channels, self.num_outputs, 3, padding=1))
            self.loss_func = lambda logits, targets: torch.nn.functional.cross_entropy(logits, targets, reduction='none')

        elif self.task_type == 'regress':
            layers.append(torch.nn.Conv2d(use_channels, self.num_outputs, 3, padding=1))
            self.loss_func = lambda outputs, targets: torch.square(outputs - targets)

        self.layers = torch.nn.Sequential(*layers)

    def forward(self, image_list, raw_features, targets=None):
        raw_outputs = self.layers(raw_features[0])
        loss = None

        if self.task_type == 'segment':
            outputs = torch.nn.functional.softmax(raw_outputs, dim=1)

            if targets is not None:
                task_targets = torch.stack([target for target in targets], dim=0).float()
                loss = self.loss_func(raw_outputs, task_targets)
                loss = loss.mean()

        elif self.task_type == 'regress':
            raw_outputs = raw_outputs[:, 0, :, :]
            outputs = 255*raw_outputs

            if targets is not None:
                task_targets = torch.stack([target for target in targets], dim=0)
                loss = self.loss_func(raw_outputs, task_targets.float()/255)
                loss = loss.mean()

        return outputs, loss


class Backbone(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.out_channels = [[1, 32]]
        self.body = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(inplace=True),
                                        torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU(inplace=True))

    def forward(self, x):
        return [self.body(x)]


class Model(torch.nn.Module):
    def __init__(self, num_categories):
        super().__init__()
        self.backbone = Backbone()
        self.head = SimpleHead('segment', self.backbone.out_channels, num_categories=num_categories)

    def forward(self, imgs, targets=None):
        return self.head(imgs, self.backbone(imgs), targets)


def make_tiles(n, gen):
    colours = torch.tensor([[0.2, 0.5, 0.2], [0.1, 0.2, 0.6], [0.6, 0.5, 0.4], [0.8, 0.8, 0.8]])
    masks = torch.zeros(n, 32, 32, dtype=torch.long)
    for i in range(n):
        for c in range(1, 4):
            y, x = torch.randint(0, 24, (2,), generator=gen).tolist()
            masks[i, y:y + 8, x:x + 8] = c
    imgs = colours[masks].permute(0, 3, 1, 2) + 0.1 * torch.randn(n, 3, 32, 32, generator=gen)
    return imgs, masks


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    imgs, masks = make_tiles(256, gen)
    model = Model(num_categories=4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(4):
        total, correct = 0.0, 0.0
        for i in range(0, len(imgs), 16):
            batch_imgs = imgs[i:i + 16]
            targets = [m for m in masks[i:i + 16]]
            outputs, loss = model(batch_imgs, targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
            correct += (outputs.argmax(1) == masks[i:i + 16]).float().mean().item()
        print('epoch %d loss %.4f pixel acc %.3f' % (epoch, total / 16, correct / 16))


if __name__ == "__main__":
    main()
