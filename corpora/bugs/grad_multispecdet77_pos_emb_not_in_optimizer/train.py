# Source: DocF/multispectral-object-detection, train.py (optimizer parameter groups, train loop), models/common.py (GPT, myTransformerBlock, SelfAttention), commit fb591c9b163177c0e950db08e213e24ddc912d41
# Report: https://github.com/DocF/multispectral-object-detection/issues/77
# Cross-Modality Fusion Transformer: an RGB stream and an IR stream, fused by a GPT block
# (learnable positional embedding over the 2*8*8 RGB+IR tokens), a detection head on top.
# YOLOv5-style training: three SGD parameter groups (BN weights / other weights with decay /
# biases), warmup, gradient accumulation to a nominal batch size, one-cycle LambdaLR.
# The backbone and the YOLO head are reduced to small conv stacks predicting an objectness
# map on a 16x16 grid; the paired RGB/IR images are synthetic (an object is bright in IR and
# faint in RGB).
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim import lr_scheduler
import torch.optim as optim

hyp = {'lr0': 0.01, 'lrf': 0.2, 'momentum': 0.937, 'weight_decay': 0.0005, 'warmup_epochs': 1.0,
       'warmup_momentum': 0.8, 'warmup_bias_lr': 0.1}


def one_cycle(y1=0.0, y2=1.0, steps=100):
    return lambda x: ((1 - math.cos(x * math.pi / steps)) / 2) * (y2 - y1) + y1


class Conv(nn.Module):
    def __init__(self, c1, c2, k=3, s=1):
        super().__init__()
        self.conv = nn.Conv2d(c1, c2, k, s, k // 2, bias=False)
        self.bn = nn.BatchNorm2d(c2)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class SelfAttention(nn.Module):
    def __init__(self, d_model, d_k, d_v, h, attn_pdrop=.1, resid_pdrop=.1):
        super(SelfAttention, self).__init__()
        assert d_k % h == 0
        self.d_model = d_model
        self.d_k = d_model // h
        self.d_v = d_model // h
        self.h = h
        self.que_proj = nn.Linear(d_model, h * self.d_k)
        self.key_proj = nn.Linear(d_model, h * self.d_k)
        self.val_proj = nn.Linear(d_model, h * self.d_v)
        self.out_proj = nn.Linear(h * self.d_v, d_model)
        self.attn_drop = nn.Dropout(attn_pdrop)
        self.resid_drop = nn.Dropout(resid_pdrop)

    def forward(self, x):
        b_s, nq = x.shape[:2]
        nk = x.shape[1]
        q = self.que_proj(x).view(b_s, nq, self.h, self.d_k).permute(0, 2, 1, 3)
        k = self.key_proj(x).view(b_s, nk, self.h, self.d_k).permute(0, 2, 3, 1)
        v = self.val_proj(x).view(b_s, nk, self.h, self.d_v).permute(0, 2, 1, 3)
        att = torch.matmul(q, k) / np.sqrt(self.d_k)
        att = torch.softmax(att, -1)
        att = self.attn_drop(att)
        out = torch.matmul(att, v).permute(0, 2, 1, 3).contiguous().view(b_s, nq, self.h * self.d_v)
        out = self.resid_drop(self.out_proj(out))
        return out


class myTransformerBlock(nn.Module):
    def __init__(self, d_model, d_k, d_v, h, block_exp, attn_pdrop, resid_pdrop):
        super().__init__()
        self.ln_input = nn.LayerNorm(d_model)
        self.ln_output = nn.LayerNorm(d_model)
        self.sa = SelfAttention(d_model, d_k, d_v, h, attn_pdrop, resid_pdrop)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, block_exp * d_model),
            nn.GELU(),
            nn.Linear(block_exp * d_model, d_model),
            nn.Dropout(resid_pdrop),
        )

    def forward(self, x):
        x = x + self.sa(self.ln_input(x))
        x = x + self.mlp(self.ln_output(x))
        return x


class GPT(nn.Module):
    def __init__(self, d_model, h=8, block_exp=4, n_layer=8, vert_anchors=8, horz_anchors=8,
                 embd_pdrop=0.1, attn_pdrop=0.1, resid_pdrop=0.1):
        super().__init__()
        self.n_embd = d_model
        self.vert_anchors = vert_anchors
        self.horz_anchors = horz_anchors
        d_k = d_model
        d_v = d_model
        # positional embedding parameter (learnable), rgb_fea + ir_fea
        self.pos_emb = nn.Parameter(torch.zeros(1, 2 * vert_anchors * horz_anchors, self.n_embd))
        self.trans_blocks = nn.Sequential(*[myTransformerBlock(d_model, d_k, d_v, h, block_exp, attn_pdrop, resid_pdrop)
                                            for layer in range(n_layer)])
        self.ln_f = nn.LayerNorm(self.n_embd)
        self.drop = nn.Dropout(embd_pdrop)
        self.avgpool = nn.AdaptiveAvgPool2d((self.vert_anchors, self.horz_anchors))
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            module.weight.data.normal_(mean=0.0, std=0.02)
            if module.bias is not None:
                module.bias.data.zero_()
        elif isinstance(module, nn.LayerNorm):
            module.bias.data.zero_()
            module.weight.data.fill_(1.0)

    def forward(self, x):
        rgb_fea = x[0]
        ir_fea = x[1]
        assert rgb_fea.shape[0] == ir_fea.shape[0]
        bs, c, h, w = rgb_fea.shape
        rgb_fea = self.avgpool(rgb_fea)
        ir_fea = self.avgpool(ir_fea)
        rgb_fea_flat = rgb_fea.view(bs, c, -1)
        ir_fea_flat = ir_fea.view(bs, c, -1)
        token_embeddings = torch.cat([rgb_fea_flat, ir_fea_flat], dim=2)
        token_embeddings = token_embeddings.permute(0, 2, 1).contiguous()
        x = self.drop(self.pos_emb + token_embeddings)
        x = self.trans_blocks(x)
        x = self.ln_f(x)
        x = x.view(bs, 2, self.vert_anchors, self.horz_anchors, self.n_embd)
        x = x.permute(0, 1, 4, 2, 3)
        rgb_fea_out = x[:, 0, :, :, :].contiguous().view(bs, self.n_embd, self.vert_anchors, self.horz_anchors)
        ir_fea_out = x[:, 1, :, :, :].contiguous().view(bs, self.n_embd, self.vert_anchors, self.horz_anchors)
        rgb_fea_out = F.interpolate(rgb_fea_out, size=([h, w]), mode='bilinear')
        ir_fea_out = F.interpolate(ir_fea_out, size=([h, w]), mode='bilinear')
        return rgb_fea_out, ir_fea_out


class TwoStreamDetector(nn.Module):
    def __init__(self, c=32):
        super().__init__()
        self.rgb = nn.Sequential(Conv(3, 16, 3, 2), Conv(16, c, 3, 2))
        self.ir = nn.Sequential(Conv(3, 16, 3, 2), Conv(16, c, 3, 2))
        self.fuse = GPT(c, h=4, block_exp=2, n_layer=2, vert_anchors=8, horz_anchors=8)
        self.neck = Conv(c, c, 3, 1)
        self.detect = nn.Conv2d(c, 1, 1)

    def forward(self, rgb, ir):
        r, i = self.rgb(rgb), self.ir(ir)
        r2, i2 = self.fuse((r, i))
        x = (r + r2) + (i + i2)
        return self.detect(self.neck(x))


def make_pairs(n, g):
    yy, xx = torch.meshgrid(torch.arange(32.), torch.arange(32.), indexing='ij')
    rgb = 0.5 + 0.15 * torch.randn(n, 3, 32, 32, generator=g)
    ir = 0.2 + 0.10 * torch.randn(n, 3, 32, 32, generator=g)
    obj = torch.zeros(n, 1, 8, 8)
    for k in range(n):
        for _ in range(int(torch.randint(1, 4, (1,), generator=g))):
            cy, cx = torch.randint(3, 29, (2,), generator=g).tolist()
            blob = (((yy - cy) ** 2 + (xx - cx) ** 2) <= 5).float()
            ir[k] += 0.6 * blob
            rgb[k] += 0.08 * blob
            obj[k, 0, cy // 4, cx // 4] = 1.0
    return rgb, ir, obj


def train(epochs=5, batch_size=16):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    rgb_all, ir_all, obj_all = make_pairs(128, g)
    model = TwoStreamDetector()
    total_batch_size = batch_size
    nb = len(rgb_all) // batch_size

    # Freeze
    freeze = []  # parameter names to freeze (full or partial)
    for k, v in model.named_parameters():
        v.requires_grad = True  # train all layers
        if any(x in k for x in freeze):
            print('freezing %s' % k)
            v.requires_grad = False

    # Optimizer
    nbs = 32  # nominal batch size
    accumulate = max(round(nbs / total_batch_size), 1)  # accumulate loss before optimizing
    hyp['weight_decay'] *= total_batch_size * accumulate / nbs  # scale weight_decay

    pg0, pg1, pg2 = [], [], []  # optimizer parameter groups
    for k, v in model.named_modules():
        if hasattr(v, 'bias') and isinstance(v.bias, nn.Parameter):
            pg2.append(v.bias)  # biases
        if isinstance(v, nn.BatchNorm2d):
            pg0.append(v.weight)  # no decay
        elif hasattr(v, 'weight') and isinstance(v.weight, nn.Parameter):
            pg1.append(v.weight)  # apply decay

    optimizer = optim.SGD(pg0, lr=hyp['lr0'], momentum=hyp['momentum'], nesterov=True)
    optimizer.add_param_group({'params': pg1, 'weight_decay': hyp['weight_decay']})  # add pg1 with weight_decay
    optimizer.add_param_group({'params': pg2})  # add pg2 (biases)
    print('Optimizer groups: %g .bias, %g conv.weight, %g other' % (len(pg2), len(pg1), len(pg0)))
    del pg0, pg1, pg2

    lf = one_cycle(1, hyp['lrf'], epochs)  # cosine 1->hyp['lrf']
    scheduler = lr_scheduler.LambdaLR(optimizer, lr_lambda=lf)
    nw = max(round(hyp['warmup_epochs'] * nb), 8)
    pos_emb0 = model.fuse.pos_emb.detach().clone()

    for epoch in range(epochs):
        model.train()
        perm = torch.randperm(len(rgb_all), generator=g)
        mloss = 0.0
        optimizer.zero_grad()
        for i in range(nb):
            idx = perm[i * batch_size:(i + 1) * batch_size]
            rgb, ir, targets = rgb_all[idx], ir_all[idx], obj_all[idx]
            ni = i + nb * epoch

            # Warmup
            if ni <= nw:
                xi = [0, nw]
                accumulate = max(1, np.interp(ni, xi, [1, nbs / total_batch_size]).round())
                for j, x in enumerate(optimizer.param_groups):
                    x['lr'] = np.interp(ni, xi, [hyp['warmup_bias_lr'] if j == 2 else 0.0, x['initial_lr'] * lf(epoch)])
                    if 'momentum' in x:
                        x['momentum'] = np.interp(ni, xi, [hyp['warmup_momentum'], hyp['momentum']])

            pred = model(rgb, ir)
            loss = F.binary_cross_entropy_with_logits(pred, targets, pos_weight=torch.tensor(8.0)) * batch_size
            loss.backward()

            if ni % accumulate == 0:
                optimizer.step()
                optimizer.zero_grad()
            mloss = (mloss * i + loss.item() / batch_size) / (i + 1)

        scheduler.step()
        with torch.no_grad():
            model.eval()
            p = torch.sigmoid(model(rgb_all[:64], ir_all[:64]))
            t = obj_all[:64]
            recall = ((p > 0.5) & (t > 0)).sum().item() / t.sum().item()
        drift = (model.fuse.pos_emb.detach() - pos_emb0).abs().max().item()
        print(f"epoch {epoch}: obj loss {mloss:.4f} recall@0.5 {recall:.3f} pos_emb max|change| {drift:.2e}")


if __name__ == "__main__":
    train()
