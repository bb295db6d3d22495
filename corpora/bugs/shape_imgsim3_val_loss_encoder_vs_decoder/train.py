# Source: oke-aditya/image_similarity, image_similarity/torch_engine.py + torch_model.py + torch_train.py, commit 3215f5932f11f1c7c52f87bda99745be24b03632
# Report: https://github.com/oke-aditya/image_similarity/pull/3
# Image similarity with a convolutional auto-encoder: ConvEncoder (5 conv/maxpool stages) and
# ConvDecoder (5 transposed convs) trained with MSELoss and AdamW on (image, image) pairs, a
# validation step after every epoch, "best model" saving, and an embedding of the whole dataset
# from the encoder. The animals image folder is replaced by synthetic 3x64x64 images of coloured
# blobs; checkpoints are kept in memory instead of written to disk.
import random
import time

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils.data import Dataset

torch.set_num_threads(1)


class config:
    SEED = 42
    TRAIN_RATIO = 0.75
    LEARNING_RATE = 1e-3
    EPOCHS = 4
    TRAIN_BATCH_SIZE = 16
    TEST_BATCH_SIZE = 16
    FULL_BATCH_SIZE = 16
    EMBEDDING_SHAPE = (1, 256, 2, 2)


def seed_everything(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class FolderDataset(Dataset):
    """Synthetic stand-in for the image folder: returns (image, image) like the original."""

    def __init__(self, n_images, size=64):
        g = torch.Generator().manual_seed(0)
        yy, xx = torch.meshgrid(torch.arange(size).float(), torch.arange(size).float(), indexing="ij")
        imgs = torch.zeros(n_images, 3, size, size)
        for i in range(n_images):
            for _ in range(3):
                cy, cx = torch.rand(2, generator=g) * size
                r = 6 + torch.rand(1, generator=g) * 10
                colour = torch.rand(3, generator=g)
                blob = torch.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r ** 2))
                imgs[i] += colour[:, None, None] * blob
        self.imgs = imgs.clamp(0, 1)

    def __len__(self):
        return len(self.imgs)

    def __getitem__(self, idx):
        tensor_image = self.imgs[idx]
        return tensor_image, tensor_image


class ConvEncoder(nn.Module):
    """
    A simple Convolutional Encoder Model
    """

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, (3, 3), padding=(1, 1))
        self.relu1 = nn.ReLU(inplace=True)
        self.maxpool1 = nn.MaxPool2d((2, 2))

        self.conv2 = nn.Conv2d(16, 32, (3, 3), padding=(1, 1))
        self.relu2 = nn.ReLU(inplace=True)
        self.maxpool2 = nn.MaxPool2d((2, 2))

        self.conv3 = nn.Conv2d(32, 64, (3, 3), padding=(1, 1))
        self.relu3 = nn.ReLU(inplace=True)
        self.maxpool3 = nn.MaxPool2d((2, 2))

        self.conv4 = nn.Conv2d(64, 128, (3, 3), padding=(1, 1))
        self.relu4 = nn.ReLU(inplace=True)
        self.maxpool4 = nn.MaxPool2d((2, 2))

        self.conv5 = nn.Conv2d(128, 256, (3, 3), padding=(1, 1))
        self.relu5 = nn.ReLU(inplace=True)
        self.maxpool5 = nn.MaxPool2d((2, 2))

    def forward(self, x):
        # Downscale the image with conv maxpool etc.
        x = self.maxpool1(self.relu1(self.conv1(x)))
        x = self.maxpool2(self.relu2(self.conv2(x)))
        x = self.maxpool3(self.relu3(self.conv3(x)))
        x = self.maxpool4(self.relu4(self.conv4(x)))
        x = self.maxpool5(self.relu5(self.conv5(x)))
        return x


class ConvDecoder(nn.Module):
    """
    A simple Convolutional Decoder Model
    """

    def __init__(self):
        super().__init__()
        self.deconv1 = nn.ConvTranspose2d(256, 128, (2, 2), stride=(2, 2))
        self.relu1 = nn.ReLU(inplace=True)

        self.deconv2 = nn.ConvTranspose2d(128, 64, (2, 2), stride=(2, 2))
        self.relu2 = nn.ReLU(inplace=True)

        self.deconv3 = nn.ConvTranspose2d(64, 32, (2, 2), stride=(2, 2))
        self.relu3 = nn.ReLU(inplace=True)

        self.deconv4 = nn.ConvTranspose2d(32, 16, (2, 2), stride=(2, 2))
        self.relu4 = nn.ReLU(inplace=True)

        self.deconv5 = nn.ConvTranspose2d(16, 3, (2, 2), stride=(2, 2))
        self.relu5 = nn.ReLU(inplace=True)

    def forward(self, x):
        x = self.relu1(self.deconv1(x))
        x = self.relu2(self.deconv2(x))
        x = self.relu3(self.deconv3(x))
        x = self.relu4(self.deconv4(x))
        x = self.relu5(self.deconv5(x))
        return x


def train_step(encoder, decoder, train_loader, loss_fn, optimizer, device):
    """
    Performs a single training step
    """
    encoder.train()
    decoder.train()

    for batch_idx, (train_img, target_img) in enumerate(train_loader):
        train_img = train_img.to(device)
        target_img = target_img.to(device)

        optimizer.zero_grad()

        enc_output = encoder(train_img)
        dec_output = decoder(enc_output)

        loss = loss_fn(dec_output, target_img)
        loss.backward()

        optimizer.step()

    return loss.item()


def val_step(encoder, decoder, val_loader, loss_fn, device):
    """
    Performs a single validation step
    """
    encoder.eval()
    decoder.eval()

    with torch.no_grad():
        for batch_idx, (train_img, target_img) in enumerate(val_loader):
            train_img = train_img.to(device)
            target_img = target_img.to(device)

            enc_output = encoder(train_img)
            dec_output = decoder(enc_output)

            loss = loss_fn(enc_output, dec_output)

    return loss.item()


def create_embedding(encoder, full_loader, embedding_dim, device):
    encoder.eval()
    embedding = torch.randn(embedding_dim)

    with torch.no_grad():
        for batch_idx, (train_img, target_img) in enumerate(full_loader):
            train_img = train_img.to(device)
            enc_output = encoder(train_img).cpu()
            embedding = torch.cat((embedding, enc_output), 0)

    return embedding


def main():
    t0 = time.time()
    device = "cpu"
    print("Setting Seed for the run, seed = {}".format(config.SEED))
    seed_everything(config.SEED)

    full_dataset = FolderDataset(128)
    train_size = int(config.TRAIN_RATIO * len(full_dataset))
    val_size = len(full_dataset) - train_size
    train_dataset, val_dataset = torch.utils.data.random_split(full_dataset, [train_size, val_size])

    train_loader = torch.utils.data.DataLoader(
        train_dataset, batch_size=config.TRAIN_BATCH_SIZE, shuffle=True, drop_last=True
    )
    val_loader = torch.utils.data.DataLoader(val_dataset, batch_size=config.TEST_BATCH_SIZE)
    full_loader = torch.utils.data.DataLoader(full_dataset, batch_size=config.FULL_BATCH_SIZE)

    loss_fn = nn.MSELoss()
    encoder = ConvEncoder()
    decoder = ConvDecoder()
    encoder.to(device)
    decoder.to(device)

    autoencoder_params = list(encoder.parameters()) + list(decoder.parameters())
    optimizer = optim.AdamW(autoencoder_params, lr=config.LEARNING_RATE)

    max_loss = 9999
    saved = {}
    print("------------ Training started ------------")
    for epoch in range(config.EPOCHS):
        train_loss = train_step(encoder, decoder, train_loader, loss_fn, optimizer, device=device)
        print(f"Epochs = {epoch}, Training Loss : {train_loss}")
        val_loss = val_step(encoder, decoder, val_loader, loss_fn, device=device)

        # Simple Best Model saving
        if val_loss < max_loss:
            print("Validation Loss decreased, saving new best model")
            saved["encoder"] = {k: v.clone() for k, v in encoder.state_dict().items()}
            saved["decoder"] = {k: v.clone() for k, v in decoder.state_dict().items()}

        print(f"Epochs = {epoch}, Validation Loss : {val_loss}")

    print("Training Done")
    embedding = create_embedding(encoder, full_loader, config.EMBEDDING_SHAPE, device)
    flattened_embedding = embedding.numpy().reshape((embedding.shape[0], -1))
    print("embedding", flattened_embedding.shape)
    print("done in %.1fs" % (time.time() - t0))


if __name__ == "__main__":
    main()
