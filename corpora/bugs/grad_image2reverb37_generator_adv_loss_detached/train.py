# Source: nikhilsinghmus/image2reverb, image2reverb/model.py (Image2Reverb.training_step, configure_optimizers), image2reverb/networks.py, commit f855f49d50e7e0d7830e114cc46d54a711e4d5f2
# Report: https://github.com/nikhilsinghmus/image2reverb/issues/37
# Image2Reverb: an image encoder gives a 365-d scene code f, the generator maps [f, noise] to a
# reverb-impulse spectrogram, a conditional discriminator D(spec, f) is trained with LSGAN
# losses; three Adam optimizers (encoder, generator, discriminator) stepped in turn as
# Lightning 1.x does with optimizer_idx. The ResNet50-places365 / depth encoder, the
# GANSynth generator and the discriminator are reduced to small conv nets on 32x32
# spectrograms; the images and IRs are synthetic (room size -> decay time of the IR).
import torch
from torch import nn
import torch.nn.functional as F

# Hyperparameters
G_LR = 4e-4
D_LR = 2e-4
ENC_LR = 1e-5
ADAM_BETA = (0.0, 0.99)
ADAM_EPS = 1e-8
LAMBDA = 100


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = nn.Sequential(nn.Conv2d(3, 16, 4, 2, 1), nn.ReLU(), nn.Conv2d(16, 32, 4, 2, 1), nn.ReLU(),
                                   nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 365))

    def forward(self, x):
        return self.model.forward(x).unsqueeze(-1).unsqueeze(-1), x


class Generator(nn.Module):
    """Non-progressive GANSynth-style generator (reduced)."""
    def __init__(self, latent_size=512):
        super().__init__()
        self.latent_size = latent_size
        self.model = nn.Sequential(
            nn.ConvTranspose2d(latent_size, 64, 4, 1, 0), nn.LeakyReLU(0.2),
            nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(64, 32, 3, 1, 1), nn.LeakyReLU(0.2),
            nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(32, 16, 3, 1, 1), nn.LeakyReLU(0.2),
            nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(16, 1, 3, 1, 1), nn.Tanh())

    def forward(self, x):
        return self.model(x)


class Discriminator(nn.Module):
    def __init__(self, label_size=365):
        super().__init__()
        self._label_size = 365
        self.model = nn.Sequential(nn.Conv2d(1, 32, 3, 1, 1), nn.LeakyReLU(0.2), nn.Conv2d(32, 32, 3, 1, 1), nn.LeakyReLU(0.2), nn.AvgPool2d(2),
                                   nn.Conv2d(32, 32, 3, 1, 1), nn.LeakyReLU(0.2), nn.AvgPool2d(2))
        self.output = nn.Sequential(nn.Conv2d(32 + 8, 32, 3, 1, 1), nn.LeakyReLU(0.2), nn.Conv2d(32, 1, 8))

    def forward(self, x, l):
        d = self.model(x)
        s = list(l.squeeze().shape)
        s[-1] = 512 - s[-1]
        z = torch.cat((l.squeeze(), torch.zeros(s).type_as(x)), -1).reshape(d.shape[0], -1, 8, 8)
        k = torch.cat((d, z), 1)
        return self.output(k)


class Image2Reverb(nn.Module):
    def __init__(self, latent_dimension=512):
        super().__init__()
        self._latent_dimension = latent_dimension
        self.device = torch.device("cpu")
        self.enc = Encoder()
        self.g = Generator(latent_dimension)
        self.d = Discriminator(365)
        self.logs = {}

    def log(self, name, value):
        self.logs.setdefault(name, []).append(float(value.detach()))

    def training_step(self, batch, batch_idx, optimizer_idx):
        spec, label = batch
        spec.requires_grad = True # For the backward pass, seems necessary for now

        # Forward passes through models
        f = self.enc.forward(label)[0]
        z = torch.cat((f, torch.randn((f.shape[0], (self._latent_dimension - f.shape[1]) if f.shape[1] < self._latent_dimension else f.shape[1], f.shape[2], f.shape[3]), device=self.device)), 1)
        fake_spec = self.g(z)
        d_fake = self.d(fake_spec.detach(), f)
        d_real = self.d(spec, f)

        # Train Generator or Encoder
        if optimizer_idx == 0 or optimizer_idx == 1:
            d_fake2 = self.d(fake_spec.detach(), f)
            G_loss1 = F.mse_loss(d_fake2, torch.ones(d_fake2.shape, device=self.device))
            G_loss2 = F.l1_loss(fake_spec, spec)

            G_loss = G_loss1 + (LAMBDA * G_loss2)
            if optimizer_idx == 1:
                self.log("G_adv", G_loss1)
                self.log("G_l1", G_loss2)
                self.log("D_fake", d_fake.mean())
            return G_loss
        else: # Train Discriminator
            l_fakeD = F.mse_loss(d_fake, torch.zeros(d_fake.shape, device=self.device))
            l_realD = F.mse_loss(d_real, torch.ones(d_real.shape, device=self.device))
            D_loss = (l_realD + l_fakeD)
            self.log("D", D_loss)
            return D_loss

    def configure_optimizers(self):
        g_optim = torch.optim.Adam(self.g.parameters(), lr=G_LR, betas=ADAM_BETA, eps=ADAM_EPS)
        d_optim = torch.optim.Adam(self.d.parameters(), lr=D_LR, betas=ADAM_BETA, eps=ADAM_EPS)
        enc_optim = torch.optim.Adam(self.enc.parameters(), lr=ENC_LR, betas=ADAM_BETA, eps=ADAM_EPS)
        return [enc_optim, g_optim, d_optim], []


def make_data(n, g):
    # room "size" in the image sets the decay rate of the impulse response spectrogram
    size = torch.rand(n, generator=g)
    img = size.view(n, 1, 1, 1) * torch.ones(n, 3, 32, 32) + 0.1 * torch.randn(n, 3, 32, 32, generator=g)
    t = torch.linspace(0, 1, 32)
    freq = torch.linspace(0, 1, 32)
    decay = torch.exp(-t.view(1, 1, 1, 32) / (0.05 + 0.4 * size.view(n, 1, 1, 1)) * (1 + freq.view(1, 1, 32, 1)))
    texture = 0.4 * torch.randn(n, 1, 32, 32, generator=g) * decay
    spec = (2 * decay - 1 + texture).clamp(-1, 1)
    return spec, img


def fit(model, epochs=8, batch_size=16):
    """Lightning 1.x automatic optimisation with several optimizers: for every batch, each
    optimizer in turn gets its own training_step(optimizer_idx), with the other optimizers'
    parameters toggled off, then backward, step, zero_grad."""
    optimizers, _ = model.configure_optimizers()
    g = torch.Generator().manual_seed(0)
    spec_all, img_all = make_data(192, g)
    for epoch in range(epochs):
        model.logs = {}
        perm = torch.randperm(192, generator=g)
        for batch_idx in range(192 // batch_size):
            idx = perm[batch_idx * batch_size:(batch_idx + 1) * batch_size]
            batch = (spec_all[idx].clone(), img_all[idx])
            for optimizer_idx, opt in enumerate(optimizers):
                own = {id(p) for group in opt.param_groups for p in group["params"]}
                toggled = [p for p in model.parameters() if id(p) not in own and p.requires_grad]
                for p in toggled:
                    p.requires_grad = False
                loss = model.training_step(batch, batch_idx, optimizer_idx)
                opt.zero_grad()
                loss.backward()
                opt.step()
                for p in toggled:
                    p.requires_grad = True
        m = {k: sum(v) / len(v) for k, v in model.logs.items()}
        print(f"epoch {epoch}: D {m['D']:.4f} G_adv {m['G_adv']:.4f} G_l1 {m['G_l1']:.4f} D(fake) {m['D_fake']:.3f}")


def main():
    torch.manual_seed(0)
    model = Image2Reverb()
    fit(model)


if __name__ == "__main__":
    main()
