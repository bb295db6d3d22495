# Source: Amshaker/SwiftFormer, models/swiftformer.py (EfficientAdditiveAttnetion, SwiftFormerEncoder, SwiftFormer), main.py, commit 2d331149678472c72b712fd72edfc94453870798
# Report: https://github.com/Amshaker/SwiftFormer/issues/4
# SwiftFormer image classifier: conv stem, ConvEncoder blocks, one SwiftFormerEncoder (local
# representation + efficient additive attention + MLP) per stage, BatchNorm + classification and
# distillation heads. Widths and depths are reduced (16/32, one block per stage), ImageNet is
# replaced by 32x32 synthetic images of 4 classes, timm/einops helpers by plain torch.
import torch
import torch.nn as nn


def stem(in_chs, out_chs):
    return nn.Sequential(
        nn.Conv2d(in_chs, out_chs // 2, kernel_size=3, stride=2, padding=1),
        nn.BatchNorm2d(out_chs // 2),
        nn.ReLU(),
        nn.Conv2d(out_chs // 2, out_chs, kernel_size=3, stride=2, padding=1),
        nn.BatchNorm2d(out_chs),
        nn.ReLU(), )


class Embedding(nn.Module):
    def __init__(self, patch_size=3, stride=2, padding=1, in_chans=3, embed_dim=768):
        super().__init__()
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=stride, padding=padding)
        self.norm = nn.BatchNorm2d(embed_dim)

    def forward(self, x):
        return self.norm(self.proj(x))


class Mlp(nn.Module):
    def __init__(self, in_features, hidden_features=None, out_features=None, act_layer=nn.GELU, drop=0.):
        super().__init__()
        out_features = out_features or in_features
        hidden_features = hidden_features or in_features
        self.norm1 = nn.BatchNorm2d(in_features)
        self.fc1 = nn.Conv2d(in_features, hidden_features, 1)
        self.act = act_layer()
        self.fc2 = nn.Conv2d(hidden_features, out_features, 1)
        self.drop = nn.Dropout(drop)

    def forward(self, x):
        x = self.norm1(x)
        x = self.fc1(x)
        x = self.act(x)
        x = self.drop(x)
        x = self.fc2(x)
        x = self.drop(x)
        return x


class EfficientAdditiveAttnetion(nn.Module):
    """
    Efficient Additive Attention module for SwiftFormer.
    Input: tensor in shape [B, N, D]
    Output: tensor in shape [B, N, D]
    """

    def __init__(self, in_dims=512, token_dim=256, num_heads=2):
        super().__init__()

        self.to_query = nn.Linear(in_dims, token_dim * num_heads)
        self.to_key = nn.Linear(in_dims, token_dim * num_heads)

        self.w_g = nn.Parameter(torch.randn(token_dim * num_heads, 1))
        self.scale_factor = token_dim ** -0.5
        self.Proj = nn.Linear(token_dim * num_heads, token_dim * num_heads)
        self.final = nn.Linear(token_dim * num_heads, token_dim)

    def forward(self, x):
        query = self.to_query(x)
        key = self.to_key(x)

        query = torch.nn.functional.normalize(query, dim=-1)  # BxNxD
        key = torch.nn.functional.normalize(key, dim=-1)  # BxNxD

        query_weight = query @ self.w_g  # BxNx1 (BxNxD @ Dx1)
        A = query_weight * self.scale_factor  # BxNx1

        A = A.softmax(dim=-1)  # BxNx1

        G = torch.sum(A * query, dim=1)  # BxD

        G = G.unsqueeze(1).expand(-1, key.shape[1], -1)  # BxNxD

        out = self.Proj(G * key) + query  # BxNxD

        out = self.final(out)  # BxNxD

        return out


class SwiftFormerLocalRepresentation(nn.Module):
    def __init__(self, dim, kernel_size=3):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel_size=kernel_size, padding=kernel_size // 2, groups=dim)
        self.norm = nn.BatchNorm2d(dim)
        self.pwconv1 = nn.Conv2d(dim, dim, kernel_size=1)
        self.act = nn.GELU()
        self.pwconv2 = nn.Conv2d(dim, dim, kernel_size=1)
        self.layer_scale = nn.Parameter(torch.ones(dim).unsqueeze(-1).unsqueeze(-1), requires_grad=True)

    def forward(self, x):
        input = x
        x = self.pwconv2(self.act(self.pwconv1(self.norm(self.dwconv(x)))))
        return input + self.layer_scale * x


class SwiftFormerEncoder(nn.Module):
    def __init__(self, dim, mlp_ratio=4., act_layer=nn.GELU, drop=0., layer_scale_init_value=1e-5):
        super().__init__()
        self.local_representation = SwiftFormerLocalRepresentation(dim=dim, kernel_size=3)
        self.attn = EfficientAdditiveAttnetion(in_dims=dim, token_dim=dim, num_heads=1)
        self.linear = Mlp(in_features=dim, hidden_features=int(dim * mlp_ratio), act_layer=act_layer, drop=drop)
        self.layer_scale_1 = nn.Parameter(
            layer_scale_init_value * torch.ones(dim).unsqueeze(-1).unsqueeze(-1), requires_grad=True)
        self.layer_scale_2 = nn.Parameter(
            layer_scale_init_value * torch.ones(dim).unsqueeze(-1).unsqueeze(-1), requires_grad=True)

    def forward(self, x):
        x = self.local_representation(x)
        B, C, H, W = x.shape
        x = x + self.layer_scale_1 * self.attn(x.permute(0, 2, 3, 1).reshape(B, H * W, C)).reshape(B, H, W, C).permute(
            0, 3, 1, 2)
        x = x + self.layer_scale_2 * self.linear(x)
        return x


class SwiftFormer(nn.Module):
    def __init__(self, embed_dims, num_classes=4, layer_scale_init_value=1e-2):
        super().__init__()
        self.patch_embed = stem(3, embed_dims[0])
        network = []
        for i in range(len(embed_dims)):
            network.append(SwiftFormerEncoder(embed_dims[i], layer_scale_init_value=layer_scale_init_value))
            if i < len(embed_dims) - 1:
                network.append(Embedding(in_chans=embed_dims[i], embed_dim=embed_dims[i + 1]))
        self.network = nn.ModuleList(network)
        self.norm = nn.BatchNorm2d(embed_dims[-1])
        self.head = nn.Linear(embed_dims[-1], num_classes)
        self.dist_head = nn.Linear(embed_dims[-1], num_classes)
        self.apply(self._init_weights)

    def _init_weights(self, m):
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.trunc_normal_(m.weight, std=.02)
            if m.bias is not None:
                nn.init.constant_(m.bias, 0)

    def forward(self, x):
        x = self.patch_embed(x)
        for block in self.network:
            x = block(x)
        x = self.norm(x)
        cls_out = self.head(x.flatten(2).mean(-1)), self.dist_head(x.flatten(2).mean(-1))
        if not self.training:
            cls_out = (cls_out[0] + cls_out[1]) / 2
        return cls_out


def make_data(n, gen):
    labels = torch.randint(0, 4, (n,), generator=gen)
    images = 0.5 * torch.randn(n, 3, 32, 32, generator=gen)
    for k in range(n):
        c = int(labels[k])
        y0, x0 = (c // 2) * 16, (c % 2) * 16
        images[k, :, y0 + 4:y0 + 12, x0 + 4:x0 + 12] += 1.0
    return images, labels


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    x_train, y_train = make_data(512, gen)
    x_val, y_val = make_data(128, gen)
    model = SwiftFormer(embed_dims=[16, 32])
    attn = model.network[-1].attn
    w_g0 = attn.w_g.detach().clone()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.05)
    criterion = nn.CrossEntropyLoss()
    for epoch in range(4):
        model.train()
        perm = torch.randperm(len(x_train), generator=gen)
        total, n = 0.0, 0
        for i in range(0, len(perm), 32):
            idx = perm[i:i + 32]
            samples, targets = x_train[idx], y_train[idx]
            outputs, outputs_kd = model(samples)
            loss = (criterion(outputs, targets) + criterion(outputs_kd, targets)) / 2
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(idx)
            n += len(idx)
        model.eval()
        with torch.no_grad():
            acc = (model(x_val).argmax(1) == y_val).float().mean().item()
        print(f"epoch {epoch} train loss {total / n:.4f} val acc {acc:.3f} "
              f"w_g grad norm {attn.w_g.grad.norm().item():.3e} w_g moved {(attn.w_g - w_g0).abs().max().item():.3e}")


if __name__ == "__main__":
    main()
