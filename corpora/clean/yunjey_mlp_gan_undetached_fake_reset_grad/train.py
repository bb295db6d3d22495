# Source: yunjey/pytorch-tutorial, tutorials/03-advanced/generative_adversarial_network/main.py, commit 0500d3df5a2a8080ccfccbc00aca0eacc21818db
# https://github.com/yunjey/pytorch-tutorial
#
# The tutorial's vanilla GAN: the discriminator step scores G(z) WITHOUT detach, so d_loss.backward() also
# fills the generator's gradients; reset_grad() zeroes BOTH optimizers before each backward, so the generator
# step only sees g_loss's gradients. Sigmoid + BCELoss, non-saturating generator loss (real labels for fakes),
# two Adam optimizers at 2e-4, fresh z for the generator step, labels rebuilt every batch.
# Adaptation: MNIST download -> 2000 synthetic 28x28 "digit" images (stroke templates + noise) normalised to
# [-1, 1] like Normalize(0.5, 0.5); num_epochs 200 -> 15; printing every 200 steps -> every 20 steps; the
# module-level script is wrapped in main(); save_image / checkpoints removed; after each epoch a sample check
# prints the gap between the mean generated image and the mean real image.
import torch
import torch.nn as nn


def synthetic_mnist(n, seed):
    g = torch.Generator().manual_seed(1234)
    templates = torch.zeros(10, 28, 28)
    for c in range(10):
        for _ in range(4):
            r, col = torch.randint(4, 20, (2,), generator=g).tolist()
            if torch.rand(1, generator=g).item() < 0.5:
                templates[c, r:r + 3, col:col + 8] = 1.0
            else:
                templates[c, r:r + 8, col:col + 3] = 1.0
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 10, (n,), generator=g)
    X = (templates[y] + 0.1 * torch.randn(n, 28, 28, generator=g)).clamp(0, 1)
    return (X.unsqueeze(1) - 0.5) / 0.5, y


def main():
    torch.manual_seed(0)
    # Device configuration
    device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')

    # Hyper-parameters
    latent_size = 64
    hidden_size = 256
    image_size = 784
    num_epochs = 15
    batch_size = 100

    # MNIST dataset
    mnist = torch.utils.data.TensorDataset(*synthetic_mnist(2000, seed=1))

    # Data loader
    data_loader = torch.utils.data.DataLoader(dataset=mnist,
                                              batch_size=batch_size,
                                              shuffle=True)
    real_mean = mnist.tensors[0].reshape(-1, image_size).mean(0)

    # Discriminator
    D = nn.Sequential(
        nn.Linear(image_size, hidden_size),
        nn.LeakyReLU(0.2),
        nn.Linear(hidden_size, hidden_size),
        nn.LeakyReLU(0.2),
        nn.Linear(hidden_size, 1),
        nn.Sigmoid())

    # Generator
    G = nn.Sequential(
        nn.Linear(latent_size, hidden_size),
        nn.ReLU(),
        nn.Linear(hidden_size, hidden_size),
        nn.ReLU(),
        nn.Linear(hidden_size, image_size),
        nn.Tanh())

    # Device setting
    D = D.to(device)
    G = G.to(device)

    # Binary cross entropy loss and optimizer
    criterion = nn.BCELoss()
    d_optimizer = torch.optim.Adam(D.parameters(), lr=0.0002)
    g_optimizer = torch.optim.Adam(G.parameters(), lr=0.0002)

    def reset_grad():
        d_optimizer.zero_grad()
        g_optimizer.zero_grad()

    def sample_gap():
        with torch.no_grad():
            fake = G(torch.randn(1000, latent_size, generator=torch.Generator().manual_seed(7)))
        return (fake.mean(0) - real_mean).abs().mean().item()

    print('before training: mean-image gap {:.4f}'.format(sample_gap()))
    # Start training
    total_step = len(data_loader)
    for epoch in range(num_epochs):
        for i, (images, _) in enumerate(data_loader):
            images = images.reshape(batch_size, -1).to(device)

            # Create the labels which are later used as input for the BCE loss
            real_labels = torch.ones(batch_size, 1).to(device)
            fake_labels = torch.zeros(batch_size, 1).to(device)

            # ================================================================== #
            #                      Train the discriminator                       #
            # ================================================================== #

            # Compute BCE_Loss using real images where BCE_Loss(x, y): - y * log(D(x)) - (1-y) * log(1 - D(x))
            # Second term of the loss is always zero since real_labels == 1
            outputs = D(images)
            d_loss_real = criterion(outputs, real_labels)
            real_score = outputs

            # Compute BCELoss using fake images
            # First term of the loss is always zero since fake_labels == 0
            z = torch.randn(batch_size, latent_size).to(device)
            fake_images = G(z)
            outputs = D(fake_images)
            d_loss_fake = criterion(outputs, fake_labels)
            fake_score = outputs

            # Backprop and optimize
            d_loss = d_loss_real + d_loss_fake
            reset_grad()
            d_loss.backward()
            d_optimizer.step()

            # ================================================================== #
            #                        Train the generator                         #
            # ================================================================== #

            # Compute loss with fake images
            z = torch.randn(batch_size, latent_size).to(device)
            fake_images = G(z)
            outputs = D(fake_images)

            # We train G to maximize log(D(G(z)) instead of minimizing log(1-D(G(z)))
            # For the reason, see the last paragraph of section 3. https://arxiv.org/pdf/1406.2661.pdf
            g_loss = criterion(outputs, real_labels)

            # Backprop and optimize
            reset_grad()
            g_loss.backward()
            g_optimizer.step()

            if (i+1) % 20 == 0:
                print('Epoch [{}/{}], Step [{}/{}], d_loss: {:.4f}, g_loss: {:.4f}, D(x): {:.2f}, D(G(z)): {:.2f}'
                      .format(epoch, num_epochs, i+1, total_step, d_loss.item(), g_loss.item(),
                              real_score.mean().item(), fake_score.mean().item()))
        print('epoch {} mean-image gap {:.4f}'.format(epoch, sample_gap()))


if __name__ == '__main__':
    main()
