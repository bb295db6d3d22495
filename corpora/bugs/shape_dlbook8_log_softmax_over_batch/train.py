# Source: swarmapytorch/book_DeepLearning_in_PyTorch_Source, 05_Convolution/手写数字识别器_minst_convnet.ipynb (ConvNet, rightness, training loop, test loop), commit d68a3d6112e8d93e961a1dc42a354741684f7598
# Report: https://github.com/swarmapytorch/book_DeepLearning_in_PyTorch_Source/issues/8
# The book's handwritten-digit ConvNet (conv 1->4, pool, conv 4->8, pool, fc 392->512, dropout,
# fc 512->10, log_softmax) trained with CrossEntropyLoss and SGD(lr 0.001, momentum 0.9), the
# rightness() accuracy helper, validation every 100 batches and a final test pass. MNIST is
# replaced by synthetic 28x28 digits (10 blurred stroke prototypes, random shifts and noise);
# plotting and the weight snapshots are removed; 4 epochs instead of 20; the single test image
# of the notebook's last cell is classified for 200 test images.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)

image_size = 28  # 图像的总尺寸28*28
num_classes = 10  # 标签的种类数
num_epochs = 4  # 训练的总循环周期
batch_size = 64  # 一个撮（批次）的大小，64张图片


def make_digits(n, rng, prototypes):
    labels = rng.randint(0, num_classes, n)
    imgs = np.zeros((n, 1, image_size, image_size), dtype=np.float32)
    for i, lab in enumerate(labels):
        dy, dx = rng.randint(-2, 3, 2)
        img = np.roll(np.roll(prototypes[lab], dy, axis=0), dx, axis=1)
        imgs[i, 0] = np.clip(img * rng.uniform(0.7, 1.2) + rng.randn(image_size, image_size) * 0.3, 0, 1)
    return torch.from_numpy(imgs), torch.from_numpy(labels).long()


def make_prototypes(rng):
    protos = []
    for _ in range(num_classes):
        p = np.zeros((image_size, image_size), dtype=np.float32)
        for _ in range(3):
            y0, x0, y1, x1 = rng.randint(6, 22, 4)
            for t in np.linspace(0, 1, 30):
                y, x = int(round(y0 + t * (y1 - y0))), int(round(x0 + t * (x1 - x0)))
                p[y - 1:y + 2, x - 1:x + 2] = 1.0
        protos.append(p)
    return protos


rng = np.random.RandomState(0)
prototypes = make_prototypes(rng)
train_x, train_y = make_digits(6400, rng, prototypes)
test_x, test_y = make_digits(2000, rng, prototypes)

train_dataset = torch.utils.data.TensorDataset(train_x, train_y)
test_dataset = torch.utils.data.TensorDataset(test_x, test_y)
train_loader = torch.utils.data.DataLoader(dataset=train_dataset, batch_size=batch_size, shuffle=True)

indices = range(len(test_dataset))
indices_val = indices[:1000]
indices_test = indices[1000:]
sampler_val = torch.utils.data.sampler.SubsetRandomSampler(indices_val)
sampler_test = torch.utils.data.sampler.SubsetRandomSampler(indices_test)
validation_loader = torch.utils.data.DataLoader(dataset=test_dataset, batch_size=batch_size, sampler=sampler_val)
test_loader = torch.utils.data.DataLoader(dataset=test_dataset, batch_size=batch_size, sampler=sampler_test)

depth = [4, 8]


class ConvNet(nn.Module):
    def __init__(self):
        super(ConvNet, self).__init__()
        self.conv1 = nn.Conv2d(1, 4, 5, padding=2)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(depth[0], depth[1], 5, padding=2)
        self.fc1 = nn.Linear(image_size // 4 * image_size // 4 * depth[1], 512)
        self.fc2 = nn.Linear(512, num_classes)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = self.pool(x)
        x = F.relu(self.conv2(x))
        x = self.pool(x)
        x = x.view(-1, image_size // 4 * image_size // 4 * depth[1])
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        x = self.fc2(x)
        x = F.log_softmax(x, dim=0)  # 输出层为log_softmax，即概率对数值log(p(x))
        return x


def rightness(predictions, labels):
    pred = torch.max(predictions.data, 1)[1]
    rights = pred.eq(labels.data.view_as(pred)).sum()
    return rights, len(labels)


if __name__ == '__main__':
    net = ConvNet()
    criterion = nn.CrossEntropyLoss()
    optimizer = optim.SGD(net.parameters(), lr=0.001, momentum=0.9)
    record = []
    for epoch in range(num_epochs):
        train_rights = []
        for batch_idx, (data, target) in enumerate(train_loader):
            data, target = data.clone().requires_grad_(True), target.clone().detach()
            net.train()
            output = net(data)
            loss = criterion(output, target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            right = rightness(output, target)
            train_rights.append(right)

            if batch_idx % 50 == 0:
                net.eval()
                val_rights = []
                for (data, target) in validation_loader:
                    data, target = data.clone().requires_grad_(True), target.clone().detach()
                    output = net(data)
                    right = rightness(output, target)
                    val_rights.append(right)
                train_r = (sum([tup[0] for tup in train_rights]), sum([tup[1] for tup in train_rights]))
                val_r = (sum([tup[0] for tup in val_rights]), sum([tup[1] for tup in val_rights]))
                print('训练周期: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}\t训练正确率: {:.2f}%\t校验正确率: {:.2f}%'.format(
                    epoch, batch_idx * batch_size, len(train_loader.dataset),
                    100. * batch_idx / len(train_loader),
                    loss.data,
                    100. * train_r[0].numpy() / train_r[1],
                    100. * val_r[0].numpy() / val_r[1]))
                record.append((100 - 100. * train_r[0] / train_r[1], 100 - 100. * val_r[0] / val_r[1]))

    net.eval()
    vals = []
    for data, target in test_loader:
        data, target = data.clone().detach().requires_grad_(True), target.clone().detach()
        output = net(data)
        val = rightness(output, target)
        vals.append(val)
    rights = (sum([tup[0] for tup in vals]), sum([tup[1] for tup in vals]))
    right_rate = 100. * rights[0].numpy() / rights[1]
    print('test accuracy (batches of 64): {:.2f}%'.format(right_rate))

    # 随便从测试集中读入图片，并检验模型的分类结果
    single_rights = 0
    for idx in range(1000, 1200):
        muteimg, label = test_dataset[idx]
        output = net(muteimg.unsqueeze(0))
        pred = torch.max(output.data, 1)[1].item()
        single_rights += int(pred == label.item())
        if idx < 1005:
            print('标签是：', label.item(), '预测是：', pred)
    print('single-image accuracy: {:.2f}% (200 test images, one at a time)'.format(100. * single_rights / 200))
