# Source: line/open-universe, open_universe/networks/universe/universe_gan.py (UniverseGAN.init_losses, training_step, configure_optimizers), open_universe/losses/gan.py (discriminator_loss, generator_loss, feature_loss), commit 939dd3c12acaac9da5c45d241437169cca3e647a
# Report: https://github.com/line/open-universe/issues/5
# UNIVERSE++ speech enhancement with GAN losses: a condition network estimates clean speech
# y_est from the noisy mix and conditions a score network; two discriminators, a
# multi-period (MPD) and a multi-resolution STFT (MRD) discriminator, are trained with LSGAN
# losses by opt_disc, the generator side by opt_score with score + mel L1 + adversarial +
# feature-matching losses (Lightning manual optimization, written out as a loop). Networks
# are reduced to small 1-D / 2-D conv stacks; audio is synthetic (harmonic "speech" + noise).
import torch
import torch.nn as nn
import torch.nn.functional as F


def discriminator_loss(disc_real_outputs, disc_generated_outputs):
    loss = 0
    r_losses, g_losses = [], []
    for dr, dg in zip(disc_real_outputs, disc_generated_outputs):
        r_loss = torch.mean((1 - dr) ** 2)
        g_loss = torch.mean(dg ** 2)
        loss += r_loss + g_loss
        r_losses.append(r_loss.item())
        g_losses.append(g_loss.item())
    return loss, r_losses, g_losses


def generator_loss(disc_outputs):
    loss = 0
    gen_losses = []
    for dg in disc_outputs:
        l_ = torch.mean((1 - dg) ** 2)
        gen_losses.append(l_)
        loss += l_
    return loss, gen_losses


def feature_loss(fmap_r, fmap_g):
    loss = 0
    for dr, dg in zip(fmap_r, fmap_g):
        for rl, gl in zip(dr, dg):
            loss += torch.mean(torch.abs(rl - gl))
    return loss * 2


class DiscriminatorP(nn.Module):
    def __init__(self, period):
        super().__init__()
        self.period = period
        self.convs = nn.ModuleList([nn.Conv2d(1, 8, (5, 1), (3, 1), padding=(2, 0)),
                                    nn.Conv2d(8, 16, (5, 1), (3, 1), padding=(2, 0))])
        self.conv_post = nn.Conv2d(16, 1, (3, 1), 1, padding=(1, 0))

    def forward(self, x):
        fmap = []
        b, c, t = x.shape
        x = x.view(b, c, t // self.period, self.period)
        for layer in self.convs:
            x = F.leaky_relu(layer(x), 0.1)
            fmap.append(x)
        x = self.conv_post(x)
        fmap.append(x)
        return torch.flatten(x, 1, -1), fmap


class MultiPeriodDiscriminator(nn.Module):
    def __init__(self, periods=(2, 4)):
        super().__init__()
        self.discriminators = nn.ModuleList([DiscriminatorP(p) for p in periods])

    def forward(self, y, y_hat):
        y_d_rs, y_d_gs, fmap_rs, fmap_gs = [], [], [], []
        for d in self.discriminators:
            y_d_r, fmap_r = d(y)
            y_d_g, fmap_g = d(y_hat)
            y_d_rs.append(y_d_r)
            fmap_rs.append(fmap_r)
            y_d_gs.append(y_d_g)
            fmap_gs.append(fmap_g)
        return y_d_rs, y_d_gs, fmap_rs, fmap_gs


class DiscriminatorR(nn.Module):
    def __init__(self, n_fft):
        super().__init__()
        self.n_fft = n_fft
        self.convs = nn.ModuleList([nn.Conv2d(1, 8, 3, padding=1), nn.Conv2d(8, 8, 3, stride=2, padding=1)])
        self.conv_post = nn.Conv2d(8, 1, 3, padding=1)

    def forward(self, x):
        fmap = []
        spec = torch.stft(x.squeeze(1), self.n_fft, hop_length=self.n_fft // 4, window=torch.hann_window(self.n_fft),
                          return_complex=True).abs().unsqueeze(1)
        x = spec
        for layer in self.convs:
            x = F.leaky_relu(layer(x), 0.1)
            fmap.append(x)
        x = self.conv_post(x)
        fmap.append(x)
        return torch.flatten(x, 1, -1), fmap


class MultiResolutionDiscriminator(nn.Module):
    def __init__(self, resolutions=(64, 128)):
        super().__init__()
        self.discriminators = nn.ModuleList([DiscriminatorR(n) for n in resolutions])

    def forward(self, y, y_hat):
        y_d_rs, y_d_gs, fmap_rs, fmap_gs = [], [], [], []
        for d in self.discriminators:
            y_d_r, fmap_r = d(y)
            y_d_g, fmap_g = d(y_hat)
            y_d_rs.append(y_d_r)
            fmap_rs.append(fmap_r)
            y_d_gs.append(y_d_g)
            fmap_gs.append(fmap_g)
        return y_d_rs, y_d_gs, fmap_rs, fmap_gs


class ConditionModel(nn.Module):
    def __init__(self, ch=16):
        super().__init__()
        self.net = nn.Sequential(nn.Conv1d(1, ch, 9, padding=4), nn.PReLU(), nn.Conv1d(ch, ch, 9, padding=4), nn.PReLU())
        self.out = nn.Conv1d(ch, 1, 9, padding=4)

    def forward(self, mix, train=True):
        h = self.net(mix)
        return [h], self.out(h), None


class ScoreModel(nn.Module):
    def __init__(self, ch=16):
        super().__init__()
        self.inp = nn.Conv1d(1 + ch, ch, 9, padding=4)
        self.sig = nn.Linear(1, ch)
        self.out = nn.Conv1d(ch, 1, 9, padding=4)

    def forward(self, x_t, sigma, cond):
        h = F.silu(self.inp(torch.cat([x_t, cond[0]], 1)) + self.sig(sigma[:, None].log())[:, :, None])
        return self.out(h)


def log_spec(x):
    return torch.log1p(torch.stft(x.squeeze(1), 128, hop_length=32, window=torch.hann_window(128), return_complex=True).abs())


class UniverseGAN(nn.Module):
    def __init__(self):
        super().__init__()
        self.score_model = ScoreModel()
        self.condition_model = ConditionModel()
        self.init_losses()
        self.grad_clip_vals = {"mpd": 1000.0, "mrd": 1000.0, "score": 1000.0, "cond": 1000.0}
        self.weights = {"score": 1.0, "mel_l1": 15.0}
        self.global_step = 0
        self.disc_freeze_step = 0

    def init_losses(self):
        # define discriminators. MPD is used by default
        self.loss_mpd = MultiPeriodDiscriminator()
        # define additional discriminators. BigVGAN uses MRD as default
        self.loss_mrd = MultiResolutionDiscriminator()

    def configure_optimizers(self):
        optimizer_gen = torch.optim.AdamW(list(self.score_model.parameters()) + list(self.condition_model.parameters()),
                                          lr=2e-4, betas=(0.8, 0.99), weight_decay=0.01)
        # optimizer discriminator
        params_disc = list(self.loss_mrd.parameters()) + list(
            self.loss_mrd.parameters()
        )
        optimizer_disc = torch.optim.AdamW(params_disc, lr=2e-4, betas=(0.8, 0.99))
        return optimizer_gen, optimizer_disc

    def training_step(self, batch, opt_score, opt_disc):
        mix, target = batch
        target_original = target
        sigma = torch.exp(torch.empty(mix.shape[0]).uniform_(-4, 0))
        z = target.new_zeros(target.shape).normal_()
        x_t = target + sigma[:, None, None] * z
        cond, y_est, _ = self.condition_model(mix, train=True)
        score = self.score_model(x_t, sigma, cond)
        mel_y_est = log_spec(y_est)
        mel_target = log_spec(target_original)

        # Discriminator optimization
        opt_disc.zero_grad()
        # 1. MPD
        y_df_hat_r, y_df_hat_g, _, _ = self.loss_mpd(target_original, y_est.detach())
        loss_disc_f, losses_disc_f_r, losses_disc_f_g = discriminator_loss(y_df_hat_r, y_df_hat_g)
        # 2. MRD
        y_ds_hat_r, y_ds_hat_g, _, _ = self.loss_mrd(target_original, y_est.detach())
        loss_disc_s, losses_disc_s_r, losses_disc_s_g = discriminator_loss(y_ds_hat_r, y_ds_hat_g)
        loss_disc = loss_disc_s + loss_disc_f
        if self.global_step >= self.disc_freeze_step:
            loss_disc.backward()
            grad_norm_mpd = torch.nn.utils.clip_grad_norm_(self.loss_mpd.parameters(), self.grad_clip_vals["mpd"])
            grad_norm_mrd = torch.nn.utils.clip_grad_norm_(self.loss_mrd.parameters(), self.grad_clip_vals["mrd"])
            opt_disc.step()

        # Generator optimization
        opt_score.zero_grad()
        l_score = F.mse_loss(sigma[..., None, None] * score, -z)
        loss_mel = F.l1_loss(mel_y_est, mel_target)
        y_df_hat_r, y_df_hat_g, fmap_f_r, fmap_f_g = self.loss_mpd(target_original, y_est)
        loss_fm_f = feature_loss(fmap_f_r, fmap_f_g)
        loss_gen_f, losses_gen_f = generator_loss(y_df_hat_g)
        y_ds_hat_r, y_ds_hat_g, fmap_s_r, fmap_s_g = self.loss_mrd(target_original, y_est)
        loss_fm_s = feature_loss(fmap_s_r, fmap_s_g)
        loss_gen_s, losses_gen_s = generator_loss(y_ds_hat_g)
        loss_gen = l_score * self.weights["score"] + loss_mel * self.weights["mel_l1"]
        if self.global_step >= self.disc_freeze_step:
            loss_gen = loss_gen + loss_gen_s + loss_gen_f + loss_fm_s + loss_fm_f
        loss_gen.backward()
        torch.nn.utils.clip_grad_norm_(self.score_model.parameters(), self.grad_clip_vals["score"])
        torch.nn.utils.clip_grad_norm_(self.condition_model.parameters(), self.grad_clip_vals["cond"])
        opt_score.step()
        self.global_step += 1
        return loss_disc_f.item(), loss_disc_s.item(), loss_gen_f.item(), loss_mel.item(), grad_norm_mpd.item()


def make_audio(n, length, g):
    t = torch.arange(length) / 8000.0
    f0 = 100 + 150 * torch.rand(n, 1, generator=g)
    env = 0.5 + 0.5 * torch.sin(2 * torch.pi * 3 * t + 6.28 * torch.rand(n, 1, generator=g))
    clean = env * sum(torch.sin(2 * torch.pi * k * f0 * t) / k for k in range(1, 5))
    noise = 0.3 * torch.randn(n, length, generator=g)
    return (clean + noise).unsqueeze(1), clean.unsqueeze(1)


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    mix_all, clean_all = make_audio(96, 1024, g)
    model = UniverseGAN()
    opt_score, opt_disc = model.configure_optimizers()
    mpd0 = [p.detach().clone() for p in model.loss_mpd.parameters()]
    for epoch in range(4):
        perm = torch.randperm(96, generator=g)
        sums = torch.zeros(5)
        for i in range(0, 96, 8):
            idx = perm[i:i + 8]
            sums += torch.tensor(model.training_step((mix_all[idx], clean_all[idx]), opt_score, opt_disc))
        m = sums / 12
        mpd_change = max((p.detach() - q).abs().max().item() for p, q in zip(model.loss_mpd.parameters(), mpd0))
        print(f"epoch {epoch}: loss_mpd {m[0]:.4f} loss_mrd {m[1]:.4f} gen_adv_mpd {m[2]:.4f} mel_l1 {m[3]:.4f} "
              f"| mpd grad norm {m[4]:.3f}, mpd max |change| {mpd_change:.2e}")


if __name__ == "__main__":
    main()
