# Source: AntixK/PyTorch-VAE, experiment.py + models/vanilla_vae.py + run.py + configs/vae.yaml, commit a6896b944c918dd7030e7d795a8c13e5c6345ec7
# https://github.com/AntixK/PyTorch-VAE
#
# VanillaVAE trained through the repository's LightningModule VAEXperiment: training loss = MSE + kld_weight
# * KLD with kld_weight = 0.00025 from the config, while validation uses M_N = 1.0; the loss dict returns
# detached parts (and the KLD with a flipped sign) for logging; Adam + ExponentialLR(gamma 0.95) returned as
# ([optims], [scheds]) from a try/except chain that probes optional config keys; Tanh decoder output
# against [0, 1] images; sample_images() runs generate/sample after validation without no_grad.
# Adaptation: no CelebA download / torchvision: synthetic 64x64 "face-like" RGB images (an ellipse with two
# eyes, random colours/positions, in [0, 1]); hidden_dims [32..512] -> [8, 16, 32, 64, 128] (the config's
# optional hidden_dims argument) and latent_dim 128 -> 32 for CPU, so decode's hard-coded view(-1, 512, 2, 2)
# uses the last hidden width; max_epochs 100 -> 4, 512 train / 128 val images; run.py's Trainer without
# GPUs/DDP, logger, checkpoints or progress bar; save_image calls dropped (the tensors are still computed);
# the epoch's logged metrics are printed in on_validation_epoch_end; training_step loses its optimizer_idx
# argument (Lightning 2.x refuses it) and sets it to 0 inside.
import torch
from torch import nn, optim
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset
from typing import List
import pytorch_lightning as pl
from pytorch_lightning import Trainer

Tensor = torch.Tensor


class BaseVAE(nn.Module):
    def __init__(self) -> None:
        super(BaseVAE, self).__init__()


class VanillaVAE(BaseVAE):

    def __init__(self,
                 in_channels: int,
                 latent_dim: int,
                 hidden_dims: List = None,
                 **kwargs) -> None:
        super(VanillaVAE, self).__init__()

        self.latent_dim = latent_dim

        modules = []
        if hidden_dims is None:
            hidden_dims = [32, 64, 128, 256, 512]
        self.last_dim = hidden_dims[-1]

        # Build Encoder
        for h_dim in hidden_dims:
            modules.append(
                nn.Sequential(
                    nn.Conv2d(in_channels, out_channels=h_dim,
                              kernel_size= 3, stride= 2, padding  = 1),
                    nn.BatchNorm2d(h_dim),
                    nn.LeakyReLU())
            )
            in_channels = h_dim

        self.encoder = nn.Sequential(*modules)
        self.fc_mu = nn.Linear(hidden_dims[-1]*4, latent_dim)
        self.fc_var = nn.Linear(hidden_dims[-1]*4, latent_dim)


        # Build Decoder
        modules = []

        self.decoder_input = nn.Linear(latent_dim, hidden_dims[-1] * 4)

        hidden_dims.reverse()

        for i in range(len(hidden_dims) - 1):
            modules.append(
                nn.Sequential(
                    nn.ConvTranspose2d(hidden_dims[i],
                                       hidden_dims[i + 1],
                                       kernel_size=3,
                                       stride = 2,
                                       padding=1,
                                       output_padding=1),
                    nn.BatchNorm2d(hidden_dims[i + 1]),
                    nn.LeakyReLU())
            )



        self.decoder = nn.Sequential(*modules)

        self.final_layer = nn.Sequential(
                            nn.ConvTranspose2d(hidden_dims[-1],
                                               hidden_dims[-1],
                                               kernel_size=3,
                                               stride=2,
                                               padding=1,
                                               output_padding=1),
                            nn.BatchNorm2d(hidden_dims[-1]),
                            nn.LeakyReLU(),
                            nn.Conv2d(hidden_dims[-1], out_channels= 3,
                                      kernel_size= 3, padding= 1),
                            nn.Tanh())

    def encode(self, input: Tensor) -> List[Tensor]:
        result = self.encoder(input)
        result = torch.flatten(result, start_dim=1)

        # Split the result into mu and var components
        # of the latent Gaussian distribution
        mu = self.fc_mu(result)
        log_var = self.fc_var(result)

        return [mu, log_var]

    def decode(self, z: Tensor) -> Tensor:
        result = self.decoder_input(z)
        result = result.view(-1, self.last_dim, 2, 2)
        result = self.decoder(result)
        result = self.final_layer(result)
        return result

    def reparameterize(self, mu: Tensor, logvar: Tensor) -> Tensor:
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return eps * std + mu

    def forward(self, input: Tensor, **kwargs) -> List[Tensor]:
        mu, log_var = self.encode(input)
        z = self.reparameterize(mu, log_var)
        return  [self.decode(z), input, mu, log_var]

    def loss_function(self,
                      *args,
                      **kwargs) -> dict:
        recons = args[0]
        input = args[1]
        mu = args[2]
        log_var = args[3]

        kld_weight = kwargs['M_N'] # Account for the minibatch samples from the dataset
        recons_loss =F.mse_loss(recons, input)


        kld_loss = torch.mean(-0.5 * torch.sum(1 + log_var - mu ** 2 - log_var.exp(), dim = 1), dim = 0)

        loss = recons_loss + kld_weight * kld_loss
        return {'loss': loss, 'Reconstruction_Loss':recons_loss.detach(), 'KLD':-kld_loss.detach()}

    def sample(self,
               num_samples:int,
               current_device: int, **kwargs) -> Tensor:
        z = torch.randn(num_samples,
                        self.latent_dim)

        z = z.to(current_device)

        samples = self.decode(z)
        return samples

    def generate(self, x: Tensor, **kwargs) -> Tensor:
        return self.forward(x)[0]


class VAEXperiment(pl.LightningModule):

    def __init__(self,
                 vae_model: BaseVAE,
                 params: dict) -> None:
        super(VAEXperiment, self).__init__()

        self.model = vae_model
        self.params = params
        self.curr_device = None
        self.hold_graph = False
        try:
            self.hold_graph = self.params['retain_first_backpass']
        except:
            pass

    def forward(self, input: Tensor, **kwargs) -> Tensor:
        return self.model(input, **kwargs)

    def training_step(self, batch, batch_idx):
        optimizer_idx = 0  # Lightning 2.x rejects an optimizer_idx argument (single optimizer here)
        real_img, labels = batch
        self.curr_device = real_img.device

        results = self.forward(real_img, labels = labels)
        train_loss = self.model.loss_function(*results,
                                              M_N = self.params['kld_weight'], #al_img.shape[0]/ self.num_train_imgs,
                                              optimizer_idx=optimizer_idx,
                                              batch_idx = batch_idx)

        self.log_dict({key: val.item() for key, val in train_loss.items()}, sync_dist=True)

        return train_loss['loss']

    def validation_step(self, batch, batch_idx, optimizer_idx = 0):
        real_img, labels = batch
        self.curr_device = real_img.device

        results = self.forward(real_img, labels = labels)
        val_loss = self.model.loss_function(*results,
                                            M_N = 1.0, #real_img.shape[0]/ self.num_val_imgs,
                                            optimizer_idx = optimizer_idx,
                                            batch_idx = batch_idx)

        self.log_dict({f"val_{key}": val.item() for key, val in val_loss.items()}, sync_dist=True)

    def on_validation_epoch_end(self) -> None:
        m = self.trainer.callback_metrics
        if 'val_loss' in m:
            print('epoch %d  val_loss %.5f  val_Reconstruction_Loss %.5f  val_KLD %.3f' % (
                self.current_epoch, m['val_loss'], m['val_Reconstruction_Loss'], m['val_KLD']))

    def on_validation_end(self) -> None:
        self.sample_images()

    def sample_images(self):
        # Get sample reconstruction image
        test_input, test_label = next(iter(self.trainer.val_dataloaders))
        test_input = test_input.to(self.curr_device)
        test_label = test_label.to(self.curr_device)

        recons = self.model.generate(test_input, labels = test_label)
        try:
            samples = self.model.sample(144,
                                        self.curr_device,
                                        labels = test_label)
        except Warning:
            pass

    def configure_optimizers(self):

        optims = []
        scheds = []

        optimizer = optim.Adam(self.model.parameters(),
                               lr=self.params['LR'],
                               weight_decay=self.params['weight_decay'])
        optims.append(optimizer)
        # Check if more than 1 optimizer is required (Used for adversarial training)
        try:
            if self.params['LR_2'] is not None:
                optimizer2 = optim.Adam(getattr(self.model,self.params['submodel']).parameters(),
                                        lr=self.params['LR_2'])
                optims.append(optimizer2)
        except:
            pass

        try:
            if self.params['scheduler_gamma'] is not None:
                scheduler = optim.lr_scheduler.ExponentialLR(optims[0],
                                                             gamma = self.params['scheduler_gamma'])
                scheds.append(scheduler)

                # Check if another scheduler is required for the second optimizer
                try:
                    if self.params['scheduler_gamma_2'] is not None:
                        scheduler2 = optim.lr_scheduler.ExponentialLR(optims[1],
                                                                      gamma = self.params['scheduler_gamma_2'])
                        scheds.append(scheduler2)
                except:
                    pass
                return optims, scheds
        except:
            return optims


def synthetic_faces(n, seed):
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, 64), torch.linspace(-1, 1, 64), indexing='ij')
    imgs = torch.empty(n, 3, 64, 64)
    for i in range(n):
        cx, cy = (torch.rand(2, generator=g) * 0.4 - 0.2).tolist()
        rx, ry = (0.45 + 0.2 * torch.rand(2, generator=g)).tolist()
        skin, bg = torch.rand(3, 1, 1, generator=g), torch.rand(3, 1, 1, generator=g) * 0.5
        face = (((xx - cx) / rx) ** 2 + ((yy - cy) / ry) ** 2 < 1).float()
        eyes = ((((xx - cx - 0.18) ** 2 + (yy - cy + 0.15) ** 2) < 0.006) |
                (((xx - cx + 0.18) ** 2 + (yy - cy + 0.15) ** 2) < 0.006)).float()
        img = bg * (1 - face) + skin * face
        imgs[i] = img * (1 - eyes) + 0.05 * eyes
    return imgs.clamp(0, 1)


def main():
    config = {
        'model_params': {'name': 'VanillaVAE', 'in_channels': 3, 'latent_dim': 32,
                         'hidden_dims': [8, 16, 32, 64, 128]},
        'data_params': {'train_batch_size': 64, 'val_batch_size': 64, 'patch_size': 64},
        'exp_params': {'LR': 0.005, 'weight_decay': 0.0, 'scheduler_gamma': 0.95,
                       'kld_weight': 0.00025, 'manual_seed': 1265},
        'trainer_params': {'max_epochs': 4},
    }
    pl.seed_everything(config['exp_params']['manual_seed'], True)

    model = VanillaVAE(**config['model_params'])
    experiment = VAEXperiment(model, config['exp_params'])

    train_imgs, val_imgs = synthetic_faces(512, 1), synthetic_faces(128, 2)
    train_loader = DataLoader(TensorDataset(train_imgs, torch.zeros(512)),
                              batch_size=config['data_params']['train_batch_size'], shuffle=True)
    val_loader = DataLoader(TensorDataset(val_imgs, torch.zeros(128)),
                            batch_size=config['data_params']['val_batch_size'], shuffle=False)

    runner = Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, accelerator='cpu', devices=1,
                     **config['trainer_params'])

    print(f"======= Training {config['model_params']['name']} =======")
    runner.fit(experiment, train_dataloaders=train_loader, val_dataloaders=val_loader)


if __name__ == '__main__':
    main()
