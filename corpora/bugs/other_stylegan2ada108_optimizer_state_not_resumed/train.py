# Report: https://github.com/NVlabs/stylegan2-ada-pytorch/issues/108
import copy
import io

import torch
import torch.nn as nn
import torch.nn.functional as F


class Generator(nn.Module):
    def __init__(self, z_dim=8, img_dim=16):
        super().__init__()
        self.z_dim = z_dim
        self.net = nn.Sequential(nn.Linear(z_dim, 64), nn.LeakyReLU(0.2), nn.Linear(64, img_dim))

    def forward(self, z):
        return self.net(z)


class Discriminator(nn.Module):
    def __init__(self, img_dim=16):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(img_dim, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1))

    def forward(self, img):
        return self.net(img)


def real_images(batch, gen):
    base = torch.linspace(-1, 1, 16)
    return torch.sin(3 * base + torch.rand(batch, 1, generator=gen) * 6) + 0.05 * torch.randn(batch, 16, generator=gen)


def training_loop(num_kimg, resume_pkl=None, seed=0, batch_gpu=32):
    torch.manual_seed(seed)
    data_gen = torch.Generator().manual_seed(seed)
    G, D = Generator(), Discriminator()
    G_ema = copy.deepcopy(G).eval()
    if resume_pkl is not None:
        resume_data = torch.load(io.BytesIO(resume_pkl), weights_only=False)
        for name, module in [('G', G), ('D', D), ('G_ema', G_ema)]:
            module.load_state_dict(resume_data[name])
        data_gen.set_state(resume_data['data_rng'])
        torch.set_rng_state(resume_data['torch_rng'])
    G_opt = torch.optim.Adam(G.parameters(), lr=0.0025, betas=(0.0, 0.99), eps=1e-8)
    D_opt = torch.optim.Adam(D.parameters(), lr=0.0025, betas=(0.0, 0.99), eps=1e-8)
    log = []
    for cur_tick in range(num_kimg):
        real = real_images(batch_gpu, data_gen)
        z = torch.randn(batch_gpu, G.z_dim)
        loss_Dgen = F.softplus(D(G(z).detach())).mean()
        loss_Dreal = F.softplus(-D(real)).mean()
        D_opt.zero_grad(set_to_none=True)
        (loss_Dgen + loss_Dreal).backward()
        D_opt.step()
        before = [p.detach().clone() for p in G.parameters()]
        loss_Gmain = F.softplus(-D(G(torch.randn(batch_gpu, G.z_dim)))).mean()
        G_opt.zero_grad(set_to_none=True)
        loss_Gmain.backward()
        G_opt.step()
        step = torch.cat([(p.detach() - b).abs().flatten() for p, b in zip(G.parameters(), before)])
        with torch.no_grad():
            for p_ema, p in zip(G_ema.parameters(), G.parameters()):
                p_ema.copy_(p.lerp(p_ema, 0.99))
        log.append((loss_Gmain.item(), step.mean().item(), ((step - 0.0025).abs() < 1e-6).float().mean().item()))
    snapshot_data = dict(G=G.state_dict(), D=D.state_dict(), G_ema=G_ema.state_dict(),
                         data_rng=data_gen.get_state(), torch_rng=torch.get_rng_state())
    buf = io.BytesIO()
    torch.save(snapshot_data, buf)
    return buf.getvalue(), log, torch.cat([p.detach().flatten() for p in G.parameters()])


def main():
    _, full, G_full = training_loop(num_kimg=400)
    snapshot, first, _ = training_loop(num_kimg=200)
    _, resumed, G_resumed = training_loop(num_kimg=200, resume_pkl=snapshot)
    for i in (0, 1, 10):
        print(f"tick {200 + i}: uninterrupted G mean|dW| {full[200 + i][1]:.5f} (weights moved by exactly lr: {full[200 + i][2]:.0%}) | "
              f"resumed G mean|dW| {resumed[i][1]:.5f} (weights moved by exactly lr: {resumed[i][2]:.0%})")
    print(f"final loss_G uninterrupted {full[-1][0]:.4f} resumed {resumed[-1][0]:.4f}; "
          f"max |G_resumed - G_uninterrupted| {(G_resumed - G_full).abs().max().item():.6f}")


if __name__ == "__main__":
    main()
