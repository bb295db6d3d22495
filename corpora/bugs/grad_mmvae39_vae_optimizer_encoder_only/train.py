# Source: zdebruine/MMVAE, src/cmmvae/models/cmmvae_model.py (CMMVAEModel.training_step, configure_optimizers), src/cmmvae/modules/cmmvae.py, src/cmmvae/modules/vae.py, src/cmmvae/modules/base/components.py (Encoder), commit 1c844476599b41b219f4f452f0ec2347a9758102
# Report: https://github.com/zdebruine/MMVAE/issues/39
# CMMVAE: species experts (human / mouse) map gene expression to a shared space, a shared VAE
# encodes / decodes it, adversarial heads try to tell the species from the VAE's hidden
# representations; Lightning manual optimisation with one Adam per expert, one for the VAE and
# one per adversarial. Lightning is written out (manual_backward = backward, clip_gradients =
# clip_grad_norm_ over the optimizer's parameters); the CELLxGENE loaders are replaced by
# synthetic counts from a shared 8-d cell state, the conditional latent layers are dropped.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.distributions import Normal, kl_divergence

N_GENES = {"human": 120, "mouse": 100}
BATCH_SIZE = 32


class FCBlock(nn.Module):
    def __init__(self, layers, return_hidden=False):
        super().__init__()
        self.return_hidden = return_hidden
        self.fc_layers = nn.ModuleList(
            [nn.Sequential(nn.Linear(n_in, n_out), nn.BatchNorm1d(n_out), nn.ReLU())
             for n_in, n_out in zip(layers[:-1], layers[1:])])

    def forward(self, x):
        hidden_representations = []
        for layer in self.fc_layers:
            x = layer(x)
            hidden_representations.append(x)
        if self.return_hidden:
            return x, hidden_representations
        return x


class Encoder(nn.Module):
    def __init__(self, latent_dim, layers, var_eps=1e-4):
        super().__init__()
        self.fc = FCBlock(layers, return_hidden=True)
        n_hidden = layers[-1]
        self.mean_encoder = nn.Linear(n_hidden, latent_dim)
        self.var_encoder = nn.Linear(n_hidden, latent_dim)
        self.var_eps = var_eps

    def forward(self, x):
        q, hidden_representations = self.fc(x)
        q_m = self.mean_encoder(q)
        q_v = torch.exp(self.var_encoder(q)) + self.var_eps
        dist = Normal(q_m, q_v.sqrt())
        latent = dist.rsample()
        return dist, latent, hidden_representations


class VAE(nn.Module):
    def __init__(self, encoder_layers, decoder_layers, latent_dim):
        super().__init__()
        self.encoder = Encoder(latent_dim, encoder_layers)
        self.decoder = nn.Sequential(FCBlock(decoder_layers[:-1]), nn.Linear(decoder_layers[-2], decoder_layers[-1]))

    def forward(self, x, metadata):
        qz, z, hidden_representations = self.encoder(x)
        pz = Normal(torch.zeros_like(z), torch.ones_like(z))
        xhat = self.decoder(z)
        return qz, pz, z, xhat, hidden_representations

    def elbo(self, qz, pz, x, xhat, kl_weight):
        z_kl_div = kl_divergence(qz, pz).sum(dim=-1)
        recon_loss = F.mse_loss(xhat, x, reduction="sum")
        loss = recon_loss + kl_weight * z_kl_div.mean()
        return {"recon_loss": recon_loss / x.numel(), "kl_loss": z_kl_div.mean(), "loss": loss}


class Expert(nn.Module):
    def __init__(self, n_genes, shared_dim):
        super().__init__()
        self.encoder = FCBlock([n_genes, 64, shared_dim])
        self.decoder = nn.Sequential(FCBlock([shared_dim, 64]), nn.Linear(64, n_genes))

    def encode(self, x):
        return self.encoder(x)

    def decode(self, x):
        return self.decoder(x)


class CMMVAE(nn.Module):
    def __init__(self, vae, experts, adversarials):
        super().__init__()
        self.vae = vae
        self.experts = experts
        self.adversarials = nn.ModuleList(adversarials)

    def forward(self, x, metadata, expert_id):
        shared_x = self.experts[expert_id].encode(x)
        qz, pz, z, shared_xhat, hidden_representations = self.vae(shared_x, metadata)
        xhats = {expert_id: self.experts[expert_id].decode(shared_xhat)}
        return qz, pz, z, xhats, hidden_representations


class CMMVAEModel(nn.Module):
    def __init__(self, module, adv_weight):
        super().__init__()
        self.module = module
        self.adversarial_criterion = nn.BCELoss(reduction="sum")
        self.adv_weight = adv_weight
        self.batch_size = BATCH_SIZE
        self.kl_weight = 1.0
        self.logs = {}
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
                nn.init.zeros_(m.bias)

    def manual_backward(self, loss, retain_graph=False):
        loss.backward(retain_graph=retain_graph)

    def clip_gradients(self, optimizer, gradient_clip_val, gradient_clip_algorithm="norm"):
        params = [p for group in optimizer.param_groups for p in group["params"]]
        torch.nn.utils.clip_grad_norm_(params, gradient_clip_val)

    def training_step(self, batch, batch_idx):
        x, metadata, expert_id = batch

        human_label = torch.zeros(self.batch_size, 1)
        mouse_label = torch.ones(self.batch_size, 1)

        expert_labels = human_label if expert_id == "human" else mouse_label
        trick_labels = human_label if expert_id == "mouse" else mouse_label

        # Retrieve optimizers
        optims = self.get_optimizers(zero_all=True)
        expert_optimizer = optims["experts"][expert_id]
        vae_optimizer = optims["vae"]
        adversarial_optimizers = optims["adversarials"]

        # Perform forward pass and compute the loss
        qz, pz, z, xhats, hidden_representations = self.module(x, metadata, expert_id)

        # Calculate reconstruction loss
        loss_dict = self.module.vae.elbo(qz, pz, x, xhats[expert_id], self.kl_weight)

        # Train adversarial networks
        adversarial_loss = None
        for i, (hidden_rep, adv) in enumerate(zip(hidden_representations, self.module.adversarials)):
            adv_output = adv(hidden_rep)
            current_discriminator_loss = self.adversarial_criterion(adv_output, expert_labels)
            loss_dict[f"adv_{i}"] = current_discriminator_loss
            self.manual_backward(current_discriminator_loss, retain_graph=True)
            adversarial_optimizers[i].step()

        for i, (hidden_rep, adv) in enumerate(zip(hidden_representations, self.module.adversarials)):
            adv_output = adv(hidden_rep)
            current_adversarial_loss = self.adversarial_criterion(adv_output, trick_labels)
            if adversarial_loss is None:
                adversarial_loss = current_adversarial_loss
            else:
                adversarial_loss += current_adversarial_loss

        loss_dict["adversarial_loss"] = adversarial_loss
        loss = loss_dict["loss"] + self.adv_weight * adversarial_loss

        # Backpropagation for encoder and decoder
        self.manual_backward(loss)

        # Clip gradients for stability
        self.clip_gradients(vae_optimizer, gradient_clip_val=0.5, gradient_clip_algorithm="norm")
        self.clip_gradients(expert_optimizer, gradient_clip_val=0.5, gradient_clip_algorithm="norm")

        # Update the weights
        vae_optimizer.step()
        expert_optimizer.step()

        for k in ("recon_loss", "kl_loss"):
            self.logs.setdefault((expert_id, k), []).append(loss_dict[k].item())

    def get_optimizers(self, zero_all=False):
        optimizers = self.optimizer_list
        if zero_all:
            for optim in optimizers:
                optim.zero_grad()

        def replace_indices_with_optimizers(mapping, optimizer_list):
            if isinstance(mapping, dict):
                return {key: replace_indices_with_optimizers(value, optimizer_list) for key, value in mapping.items()}
            return optimizer_list[mapping]

        return replace_indices_with_optimizers(self.optimizer_map, optimizers)

    def configure_optimizers(self):
        optimizers = {}
        optimizers["experts"] = {
            expert_id: torch.optim.Adam(self.module.experts[expert_id].parameters(), lr=1e-3, weight_decay=1e-6)
            for expert_id in self.module.experts
        }
        optimizers["vae"] = torch.optim.Adam(
            self.module.vae.encoder.parameters(), lr=1e-3, weight_decay=1e-6
        )
        optimizers["adversarials"] = {
            i: torch.optim.Adam(module.parameters(), lr=1e-3, weight_decay=1e-6)
            for i, module in enumerate(self.module.adversarials)
        }
        optimizer_list = []
        self.optimizer_map = convert_to_flat_list_and_map(optimizers, optimizer_list)
        return optimizer_list


def convert_to_flat_list_and_map(d, flat_list=None):
    if flat_list is None:
        flat_list = []
    map_dict = {}
    for key, value in d.items():
        if isinstance(value, dict):
            map_dict[key] = convert_to_flat_list_and_map(value, flat_list)
        else:
            flat_list.append(value)
            map_dict[key] = len(flat_list) - 1
    return map_dict


def make_species_data(rng, n_cells=256):
    data = {}
    for species, n_genes in N_GENES.items():
        state = rng.normal(size=(n_cells, 8))
        loading = rng.normal(size=(8, n_genes)) / np.sqrt(8)
        expr = np.log1p(np.exp(state @ loading + rng.normal(scale=0.3, size=(n_cells, n_genes))))
        data[species] = torch.tensor(expr, dtype=torch.float32)
    return data


def main():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    data = make_species_data(rng)
    shared_dim = 64
    experts = nn.ModuleDict({k: Expert(n, shared_dim) for k, n in N_GENES.items()})
    vae = VAE(encoder_layers=[shared_dim, 48, 32], decoder_layers=[16, 32, 48, shared_dim], latent_dim=16)
    adversarials = [nn.Sequential(nn.Linear(48, 16), nn.ReLU(), nn.Linear(16, 1), nn.Sigmoid()),
                    nn.Sequential(nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 1), nn.Sigmoid())]
    model = CMMVAEModel(CMMVAE(vae, experts, adversarials), adv_weight=0.1)
    model.optimizer_list = model.configure_optimizers()
    model.train()
    n_batches = 256 // BATCH_SIZE
    for epoch in range(12):
        model.logs = {}
        perms = {k: torch.randperm(256) for k in N_GENES}
        batch_idx = 0
        for b in range(n_batches):
            for expert_id in N_GENES:
                idx = perms[expert_id][b * BATCH_SIZE:(b + 1) * BATCH_SIZE]
                model.training_step((data[expert_id][idx], None, expert_id), batch_idx)
                batch_idx += 1
        m = {k: float(np.mean(v)) for k, v in model.logs.items()}
        print(f"epoch {epoch}: recon human {m[('human', 'recon_loss')]:.4f} mouse {m[('mouse', 'recon_loss')]:.4f} "
              f"kl human {m[('human', 'kl_loss')]:.3f} mouse {m[('mouse', 'kl_loss')]:.3f}")


if __name__ == "__main__":
    main()
