# Source: Selen-Suyue/DensePolicy2D, policy/policy.py (DSP.forward, RestNet18, random_mask_qpos), train.py, commit 9a5d9e5b6472ad7b9232096994325dae0cbb1695
# Report: https://github.com/Selen-Suyue/DensePolicy2D/issues/3
# DSP (dense policy) imitation learning: two camera images (top, hand), stored channels-last
# (batch, cam, H, W, C) as in the dataset, go through two ResNet encoders; their features and
# the masked proprioception condition a transformer that predicts an action chunk coarse-to-
# fine. Real robot demonstrations are replaced by synthetic scenes whose actions depend on the
# colour of the target block; the ResNet-18s are narrowed, BERT is a small TransformerEncoder,
# torchvision Resize/Normalize are written with interpolate and the ImageNet constants.
import math
import random

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F

IMAGENET_MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
IMAGENET_STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)


def transform(x, size=(32, 32)):
    x = F.interpolate(x, size=size, mode="bilinear", align_corners=False)
    return (x - IMAGENET_MEAN) / IMAGENET_STD


class RestNetBasicBlock(nn.Module):
    def __init__(self, in_channels, out_channels, stride):
        super(RestNetBasicBlock, self).__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=stride, padding=1)
        self.bn1 = nn.GroupNorm(out_channels//16, out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, kernel_size=3, stride=stride, padding=1)
        self.bn2 = nn.GroupNorm(out_channels//16, out_channels)

    def forward(self, x):
        output = self.conv1(x)
        output = F.relu(self.bn1(output))
        output = self.conv2(output)
        output = self.bn2(output)
        return F.relu(x + output)


class RestNetDownBlock(nn.Module):
    def __init__(self, in_channels, out_channels, stride):
        super(RestNetDownBlock, self).__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=stride[0], padding=1)
        self.bn1 = nn.GroupNorm(out_channels//16, out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, kernel_size=3, stride=stride[1], padding=1)
        self.bn2 = nn.GroupNorm(out_channels//16, out_channels)
        self.extra = nn.Sequential(
            nn.Conv2d(in_channels, out_channels, kernel_size=1, stride=stride[0], padding=0),
            nn.GroupNorm(out_channels//16, out_channels))

    def forward(self, x):
        extra_x = self.extra(x)
        output = self.conv1(x)
        out = F.relu(self.bn1(output))
        out = self.conv2(out)
        out = self.bn2(out)
        return F.relu(extra_x + out)


class RestNet18(nn.Module):
    def __init__(self, out_dim=32):
        super(RestNet18, self).__init__()
        self.conv1 = nn.Conv2d(3, 16, kernel_size=7, stride=2, padding=3)
        self.layer1 = nn.Sequential(RestNetBasicBlock(16, 16, 1))
        self.layer2 = nn.Sequential(RestNetDownBlock(16, 32, [2, 1]))
        self.avgpool = nn.AdaptiveAvgPool2d(output_size=(1, 1))
        self.fc = nn.Linear(32, out_dim)

    def forward(self, x):
        out = self.conv1(x)
        out = self.layer1(out)
        out = self.layer2(out)
        out = self.avgpool(out)
        out = out.reshape(x.shape[0], -1)
        return self.fc(out)


def random_mask_qpos(qpos, mask_ratio=0.3):
    mask = (torch.rand_like(qpos) > mask_ratio).float()
    return qpos * mask


class DSP(nn.Module):
    def __init__(self, num_action=4, obs_feature_dim=64, action_dim=6):
        super().__init__()
        self.resnet18_cam1 = RestNet18(obs_feature_dim // 2)
        self.resnet18_cam2 = RestNet18(obs_feature_dim // 2)
        self.num_action = num_action
        self.action_projection = nn.Linear(obs_feature_dim, action_dim)
        layer = nn.TransformerEncoderLayer(obs_feature_dim, 4, obs_feature_dim * 4, dropout=0.0, batch_first=True)
        self.cross_attention = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.upsample = nn.Upsample(scale_factor=2, mode='linear')
        self.qpos_projection = nn.Linear(action_dim, obs_feature_dim)

    def process_qpos(self, qpos):
        qpos_masked = random_mask_qpos(qpos)
        qpos_projected = self.qpos_projection(qpos_masked)
        return qpos_projected.unsqueeze(1)

    def forward(self, imgtop, imghand, actions=None, qpos=None, batch_size=24):
        batch_size, cam_len, height, width, channels = imgtop.shape
        imgtop = imgtop.float()/255.0
        imghand = imghand.float()/255.0

        imgtop_transformed = transform(imgtop.reshape(-1, channels, height, width))
        imghand_transformed = transform(imghand.reshape(-1, channels, height, width))

        imgtop_features = self.resnet18_cam1(imgtop_transformed)
        imghand_features = self.resnet18_cam2(imghand_transformed)

        readout = torch.cat((imgtop_features, imghand_features), dim=-1)

        condition_qpos = self.process_qpos(qpos)
        condition = readout.unsqueeze(1)
        condition = torch.cat([condition, condition_qpos], dim=1)

        action_pred = torch.zeros(condition.size(0), 1, condition.size(2), device=condition.device)
        target_len = actions.shape[1] if actions is not None else self.num_action
        while action_pred.shape[1] < target_len:
            action_pred = self.upsample(action_pred.transpose(1, 2)).transpose(1, 2)
            input_action = torch.cat([action_pred, condition], dim=1)
            attention_output = self.cross_attention(input_action)
            action_pred = attention_output[:, :action_pred.shape[1], :]
        action_pred = self.action_projection(action_pred[:, :target_len, :])

        if actions is not None:
            loss = F.mse_loss(action_pred, actions, reduction='none')
            loss = loss.reshape(loss.shape[0], -1).mean(dim=1)
            return loss.mean()
        return action_pred


def make_demos(n, rng, size=32, horizon=4, action_dim=6):
    yy, xx = np.mgrid[0:size, 0:size]
    proj = rng.randn(3, horizon * action_dim).astype(np.float32)
    top = np.zeros((n, 1, size, size, 3), dtype=np.uint8)
    hand = np.zeros((n, 1, size, size, 3), dtype=np.uint8)
    actions = np.zeros((n, horizon, action_dim), dtype=np.float32)
    qpos = rng.uniform(-1, 1, size=(n, action_dim)).astype(np.float32)
    for k in range(n):
        colour = rng.uniform(0, 1, size=3)
        for img, scale in ((top, 1.0), (hand, 1.6)):
            bg = rng.uniform(0.3, 0.5, size=3)
            cy, cx = rng.uniform(8, 24, size=2)
            r = rng.uniform(4, 7) * scale
            block = (np.abs(yy - cy) <= r) & (np.abs(xx - cx) <= r)
            pic = np.where(block[..., None], colour, bg) + rng.normal(0, 0.03, size=(size, size, 3))
            img[k, 0] = np.clip(pic * 255, 0, 255).astype(np.uint8)
        actions[k] = ((colour - 0.5) @ proj).reshape(horizon, action_dim) + 0.1 * qpos[k]
    return [torch.from_numpy(a) for a in (top, hand, actions, qpos)]


def main():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    train = make_demos(480, rng)
    rng_val = np.random.RandomState(0)
    val = make_demos(480 + 120, rng_val)
    val = [t[480:] for t in val]

    print(f"val action MSE of predicting the mean action: {F.mse_loss(val[2].mean(0, keepdim=True).expand_as(val[2]), val[2]).item():.6f}")
    policy = DSP()
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-3, betas=[0.95, 0.999], weight_decay=1e-6)
    batch_size = 48
    for epoch in range(12):
        policy.train()
        perm = torch.randperm(len(train[0]))
        avg_loss = 0
        for start in range(0, len(perm), batch_size):
            idx = perm[start:start + batch_size]
            imgtop, imghand, action_data, qpos = (t[idx] for t in train)
            loss = policy(imgtop=imgtop, imghand=imghand, actions=action_data, qpos=qpos,
                          batch_size=action_data.shape[0])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            avg_loss += loss.item()
        avg_loss /= math.ceil(len(perm) / batch_size)
        policy.eval()
        with torch.no_grad():
            pred = policy(imgtop=val[0], imghand=val[1], qpos=val[3])
            val_mse = F.mse_loss(pred, val[2]).item()
        print(f"Train loss (epoch {epoch}): {avg_loss:.6f}  val action MSE: {val_mse:.6f}")


if __name__ == "__main__":
    main()
