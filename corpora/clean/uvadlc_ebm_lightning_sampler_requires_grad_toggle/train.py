# Source: phlippe/uvadlc_notebooks, docs/tutorial_notebooks/tutorial8/Deep_Energy_Models.ipynb,
# commit 95212a10d9eb7b456a7e781313dd70de2cf4f5c6
# https://github.com/phlippe/uvadlc_notebooks/blob/master/docs/tutorial_notebooks/tutorial8/Deep_Energy_Models.ipynb
#
# Energy-based model in PyTorch Lightning: inside training_step the Sampler switches the CNN to eval(), sets
# requires_grad=False on every parameter, forces torch.set_grad_enabled(True), runs 60 Langevin steps on the input
# images (backward on -model(x).sum(), input grads clamped and applied via .data, grad.detach_()/zero_()),
# then restores requires_grad=True / train mode; the real batch is modified in place (add_ noise, clamp_); the
# loss alpha*(real^2 + fake^2) + (fake - real) is near zero or negative and stays flat ("the training
# continues although the loss is always close to zero"); Adam with beta1 = 0; gradient_clip_val=0.1 in the Trainer;
# StepLR per epoch; a replay buffer of single-image tensors in a Python list; validation on uniform noise.
# Adaptation: torchvision MNIST, tensorboard images and checkpointing are unavailable: 512 synthetic 28x28
# stroke "digits" scaled to [-1, 1]; GenerateCallback/SamplerCallback (image logging) dropped, OutlierCallback
# prints rand_out instead of logging it, and uses on_train_epoch_end (on_epoch_end no longer exists in Lightning 2);
# ModelCheckpoint/LearningRateMonitor/load_from_checkpoint removed; batch 128 -> 32; MCMC steps 60 -> 20;
# max_epochs 60 -> 2; lr 1e-4 (kept).
import random

import numpy as np
import pytorch_lightning as pl
import torch
import torch.nn as nn
import torch.optim as optim
import torch.utils.data as data

device = torch.device("cpu")


def synthetic_digits(n=1024, size=28, seed=0):
    """MNIST stand-in: (n, 1, size, size) strokes in [0, 1] (a bar + a ring at a random place) and a label."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(size, dtype=torch.float32), torch.arange(size, dtype=torch.float32), indexing="ij")
    labels = torch.randint(0, 10, (n,), generator=g)
    cx = 9 + 10 * torch.rand(n, generator=g)
    cy = 9 + 10 * torch.rand(n, generator=g)
    r = 3 + 0.4 * labels.float()
    d = ((xx - cx[:, None, None]) ** 2 + (yy - cy[:, None, None]) ** 2).sqrt()
    ring = torch.exp(-((d - r[:, None, None]) ** 2) / 2.0)
    bar = torch.exp(-((xx - cx[:, None, None] + (labels[:, None, None] % 3 - 1) * (yy - cy[:, None, None])) ** 2) / 1.5)
    bar = bar * (torch.abs(yy - cy[:, None, None]) < r[:, None, None] + 2)
    img = (ring + (labels[:, None, None] >= 5) * bar).clamp(0, 1)
    return img.unsqueeze(1), labels


class Swish(nn.Module):

    def forward(self, x):
        return x * torch.sigmoid(x)


class CNNModel(nn.Module):

    def __init__(self, hidden_features=32, out_dim=1, **kwargs):
        super().__init__()
        # We increase the hidden dimension over layers. Here pre-calculated for simplicity.
        c_hid1 = hidden_features//2
        c_hid2 = hidden_features
        c_hid3 = hidden_features*2

        # Series of convolutions and Swish activation functions
        self.cnn_layers = nn.Sequential(
                nn.Conv2d(1, c_hid1, kernel_size=5, stride=2, padding=4), # [16x16] - Larger padding to get 32x32 image
                Swish(),
                nn.Conv2d(c_hid1, c_hid2, kernel_size=3, stride=2, padding=1), #  [8x8]
                Swish(),
                nn.Conv2d(c_hid2, c_hid3, kernel_size=3, stride=2, padding=1), # [4x4]
                Swish(),
                nn.Conv2d(c_hid3, c_hid3, kernel_size=3, stride=2, padding=1), # [2x2]
                Swish(),
                nn.Flatten(),
                nn.Linear(c_hid3*4, c_hid3),
                Swish(),
                nn.Linear(c_hid3, out_dim)
        )

    def forward(self, x):
        x = self.cnn_layers(x).squeeze(dim=-1)
        return x


class Sampler:

    def __init__(self, model, img_shape, sample_size, max_len=8192):
        """
        Inputs:
            model - Neural network to use for modeling E_theta
            img_shape - Shape of the images to model
            sample_size - Batch size of the samples
            max_len - Maximum number of data points to keep in the buffer
        """
        super().__init__()
        self.model = model
        self.img_shape = img_shape
        self.sample_size = sample_size
        self.max_len = max_len
        self.examples = [(torch.rand((1,)+img_shape)*2-1) for _ in range(self.sample_size)]

    def sample_new_exmps(self, steps=60, step_size=10):
        """
        Function for getting a new batch of "fake" images.
        Inputs:
            steps - Number of iterations in the MCMC algorithm
            step_size - Learning rate nu in the algorithm above
        """
        # Choose 95% of the batch from the buffer, 5% generate from scratch
        n_new = np.random.binomial(self.sample_size, 0.05)
        rand_imgs = torch.rand((n_new,) + self.img_shape) * 2 - 1
        old_imgs = torch.cat(random.choices(self.examples, k=self.sample_size-n_new), dim=0)
        inp_imgs = torch.cat([rand_imgs, old_imgs], dim=0).detach().to(device)

        # Perform MCMC sampling
        inp_imgs = Sampler.generate_samples(self.model, inp_imgs, steps=steps, step_size=step_size)

        # Add new images to the buffer and remove old ones if needed
        self.examples = list(inp_imgs.to(torch.device("cpu")).chunk(self.sample_size, dim=0)) + self.examples
        self.examples = self.examples[:self.max_len]
        return inp_imgs

    @staticmethod
    def generate_samples(model, inp_imgs, steps=60, step_size=10, return_img_per_step=False):
        """
        Function for sampling images for a given model.
        """
        # Before MCMC: set model parameters to "required_grad=False"
        # because we are only interested in the gradients of the input.
        is_training = model.training
        model.eval()
        for p in model.parameters():
            p.requires_grad = False
        inp_imgs.requires_grad = True

        # Enable gradient calculation if not already the case
        had_gradients_enabled = torch.is_grad_enabled()
        torch.set_grad_enabled(True)

        # We use a buffer tensor in which we generate noise each loop iteration.
        # More efficient than creating a new tensor every iteration.
        noise = torch.randn(inp_imgs.shape, device=inp_imgs.device)

        # List for storing generations at each step (for later analysis)
        imgs_per_step = []

        # Loop over K (steps)
        for _ in range(steps):
            # Part 1: Add noise to the input.
            noise.normal_(0, 0.005)
            inp_imgs.data.add_(noise.data)
            inp_imgs.data.clamp_(min=-1.0, max=1.0)

            # Part 2: calculate gradients for the current input.
            out_imgs = -model(inp_imgs)
            out_imgs.sum().backward()
            inp_imgs.grad.data.clamp_(-0.03, 0.03) # For stabilizing and preventing too high gradients

            # Apply gradients to our current samples
            inp_imgs.data.add_(-step_size * inp_imgs.grad.data)
            inp_imgs.grad.detach_()
            inp_imgs.grad.zero_()
            inp_imgs.data.clamp_(min=-1.0, max=1.0)

            if return_img_per_step:
                imgs_per_step.append(inp_imgs.clone().detach())

        # Reactivate gradients for parameters for training
        for p in model.parameters():
            p.requires_grad = True
        model.train(is_training)

        # Reset gradient calculation to setting before this function
        torch.set_grad_enabled(had_gradients_enabled)

        if return_img_per_step:
            return torch.stack(imgs_per_step, dim=0)
        else:
            return inp_imgs


class DeepEnergyModel(pl.LightningModule):

    def __init__(self, img_shape, batch_size, alpha=0.1, lr=1e-4, beta1=0.0, mcmc_steps=20, **CNN_args):
        super().__init__()
        self.save_hyperparameters()

        self.cnn = CNNModel(**CNN_args)
        self.sampler = Sampler(self.cnn, img_shape=img_shape, sample_size=batch_size)
        self.example_input_array = torch.zeros(1, *img_shape)

    def forward(self, x):
        z = self.cnn(x)
        return z

    def configure_optimizers(self):
        # Energy models can have issues with momentum as the loss surfaces changes with its parameters.
        # Hence, we set it to 0 by default.
        optimizer = optim.Adam(self.parameters(), lr=self.hparams.lr, betas=(self.hparams.beta1, 0.999))
        scheduler = optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.97) # Exponential decay over epochs
        return [optimizer], [scheduler]

    def training_step(self, batch, batch_idx):
        # We add minimal noise to the original images to prevent the model from focusing on purely "clean" inputs
        real_imgs, _ = batch
        small_noise = torch.randn_like(real_imgs) * 0.005
        real_imgs.add_(small_noise).clamp_(min=-1.0, max=1.0)

        # Obtain samples
        fake_imgs = self.sampler.sample_new_exmps(steps=self.hparams.mcmc_steps, step_size=10)

        # Predict energy score for all images
        inp_imgs = torch.cat([real_imgs, fake_imgs], dim=0)
        real_out, fake_out = self.cnn(inp_imgs).chunk(2, dim=0)

        # Calculate losses
        reg_loss = self.hparams.alpha * (real_out ** 2 + fake_out ** 2).mean()
        cdiv_loss = fake_out.mean() - real_out.mean()
        loss = reg_loss + cdiv_loss

        # Logging
        self.log('loss', loss)
        self.log('loss_regularization', reg_loss)
        self.log('loss_contrastive_divergence', cdiv_loss)
        self.log('metrics_avg_real', real_out.mean())
        self.log('metrics_avg_fake', fake_out.mean())
        return loss

    def validation_step(self, batch, batch_idx):
        # For validating, we calculate the contrastive divergence between purely random images and unseen examples
        # Note that the validation/test step of energy-based models depends on what we are interested in the model
        real_imgs, _ = batch
        fake_imgs = torch.rand_like(real_imgs) * 2 - 1

        inp_imgs = torch.cat([real_imgs, fake_imgs], dim=0)
        real_out, fake_out = self.cnn(inp_imgs).chunk(2, dim=0)

        cdiv = fake_out.mean() - real_out.mean()
        self.log('val_contrastive_divergence', cdiv)
        self.log('val_fake_out', fake_out.mean())
        self.log('val_real_out', real_out.mean())


class OutlierCallback(pl.Callback):

    def __init__(self, batch_size=1024):
        super().__init__()
        self.batch_size = batch_size
        self.history = []

    def on_train_epoch_end(self, trainer, pl_module):
        with torch.no_grad():
            pl_module.eval()
            rand_imgs = torch.rand((self.batch_size,) + pl_module.hparams["img_shape"]).to(pl_module.device)
            rand_imgs = rand_imgs * 2 - 1.0
            rand_out = pl_module.cnn(rand_imgs).mean()
            pl_module.train()

        metrics = trainer.callback_metrics
        self.history.append((rand_out.item(), metrics['val_contrastive_divergence'].item()))
        print(f"epoch {trainer.current_epoch}: rand_out {rand_out.item():.4f} (score of uniform noise) "
              f"val_contrastive_divergence {metrics['val_contrastive_divergence'].item():.4f}")


def main():
    pl.seed_everything(42, verbose=False)
    images, labels = synthetic_digits(640)
    images = (images - 0.5) / 0.5  # transforms.Normalize((0.5,), (0.5,))
    train_set = data.TensorDataset(images[:512], labels[:512])
    test_set = data.TensorDataset(images[512:], labels[512:])
    train_loader = data.DataLoader(train_set, batch_size=32, shuffle=True, drop_last=True, num_workers=0)
    test_loader = data.DataLoader(test_set, batch_size=64, shuffle=False, drop_last=False, num_workers=0)

    outlier = OutlierCallback()
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=2, gradient_clip_val=0.1,
                         callbacks=[outlier], logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)
    model = DeepEnergyModel(img_shape=(1, 28, 28), batch_size=train_loader.batch_size, lr=1e-4, beta1=0.0)
    with torch.no_grad():
        rand0 = model.cnn(torch.rand((1024, 1, 28, 28)) * 2 - 1).mean().item()
    trainer.fit(model, train_loader, test_loader)
    print(f"rand_out before training {rand0:.4f}")
    print(f"[summary] val_contrastive_divergence first={outlier.history[0][1]:.4f} last={outlier.history[-1][1]:.4f} decreased={outlier.history[-1][1] < outlier.history[0][1]}")


if __name__ == "__main__":
    main()
