# Source: meijieru/crnn.pytorch, models/crnn.py (BidirectionalLSTM, CRNN), train.py (trainBatch, val), commit 3cc79045b7c5e1b8dbc3a3ea6f26e19e3dc4c8c6
# Report: https://discuss.pytorch.org/t/lstm-change-batch-first-true-loss-does-not-decrease/62364
# CRNN text recogniser as posted in the forum thread (the reduced 5-conv CNN of the post, two
# BidirectionalLSTM blocks, CTC loss divided by the batch size), with the LSTMs switched to
# batch_first=True for a TensorRT export. The LMDB text-line datasets are replaced by synthetic
# 32x48 images of 1-4 glyphs drawn from 5 fixed random templates; channel widths are reduced
# (16/32/32/64/64, nh=64); warp-ctc is replaced by torch.nn.CTCLoss on log-softmax outputs.
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim

NCLASS = 6  # 5 symbols + CTC blank (index 0)
GLYPH_W = 8


class BidirectionalLSTM(nn.Module):

    def __init__(self, nIn, nHidden, nOut):
        super(BidirectionalLSTM, self).__init__()

        self.rnn = nn.LSTM(nIn, nHidden, bidirectional=True, batch_first=True)
        self.embedding = nn.Linear(nHidden * 2, nOut)

    def forward(self, input):
        recurrent, _ = self.rnn(input)
        T, b, h = recurrent.size()
        t_rec = recurrent.contiguous().view(T * b, h)

        output = self.embedding(t_rec)  # [T * b, nOut]
        output = output.view(T, b, -1)

        return output


class CRNN(nn.Module):

    def __init__(self, imgH, nc, nclass, nh, n_rnn=2, leakyRelu=False):
        super(CRNN, self).__init__()
        assert imgH % 16 == 0, 'imgH has to be a multiple of 16'

        ks = [3, 3, 3, 3, 3]
        ps = [1, 1, 1, 1, 0]
        ss = [1, 1, 1, 1, 1]

        nm = [16, 32, 32, 64, 64]

        cnn = nn.Sequential()

        def convRelu(i, batchNormalization=False):
            nIn = nc if i == 0 else nm[i - 1]
            nOut = nm[i]
            cnn.add_module('conv{0}'.format(i),
                           nn.Conv2d(nIn, nOut, ks[i], ss[i], ps[i]))
            if batchNormalization:
                cnn.add_module('batchnorm{0}'.format(i), nn.BatchNorm2d(nOut))
            if leakyRelu:
                cnn.add_module('relu{0}'.format(i),
                               nn.LeakyReLU(0.2, inplace=True))
            else:
                cnn.add_module('relu{0}'.format(i), nn.ReLU(True))

        convRelu(0)
        cnn.add_module('pooling{0}'.format(0), nn.MaxPool2d(2, 2))
        convRelu(1, True)
        convRelu(2)
        cnn.add_module('pooling{0}'.format(2),
                       nn.MaxPool2d((3, 2), (2, 1), (0, 1)))
        convRelu(3, True)
        cnn.add_module('pooling{0}'.format(3),
                       nn.MaxPool2d((3, 2), (2, 1), (0, 1)))
        convRelu(4, True)

        self.cnn = cnn
        self.rnn = nn.Sequential(
            BidirectionalLSTM(nm[-1], nh, nh),
            BidirectionalLSTM(nh, nh, nclass))

    def forward(self, input):
        # conv features
        conv = self.cnn(input)
        b, c, h, w = conv.size()
        assert h == 1, "the height of conv must be 1"
        conv = conv.squeeze(2)
        conv = conv.permute(2, 0, 1)  # [w, b, c]

        # rnn features
        output = self.rnn(conv)

        return output


def make_lines(n, rng, templates):
    imgs = np.zeros((n, 1, 32, 48), dtype=np.float32)
    texts = []
    for k in range(n):
        length = rng.randint(1, 5)
        chars = rng.randint(1, NCLASS, size=length)
        x = rng.randint(0, 48 - length * (GLYPH_W + 2) + 1)
        for ch in chars:
            imgs[k, 0, 4:28, x:x + GLYPH_W] = templates[ch - 1]
            x += GLYPH_W + rng.randint(1, 3)
        imgs[k] += rng.normal(0, 0.2, size=(1, 32, 48))
        texts.append(chars.tolist())
    return torch.from_numpy(imgs), texts


def encode(texts):
    length = torch.IntTensor([len(t) for t in texts])
    text = torch.IntTensor([c for t in texts for c in t])
    return text, length


def decode(preds):
    # greedy CTC decoding of [T, b] argmax indices
    out = []
    for seq in preds.t().tolist():
        chars, prev = [], 0
        for c in seq:
            if c != 0 and c != prev:
                chars.append(c)
            prev = c
        out.append(chars)
    return out


def val(net, images, texts, criterion, batch_size):
    net.eval()
    n_correct = 0
    loss_sum = 0.0
    with torch.no_grad():
        for s in range(0, len(texts), batch_size):
            image = images[s:s + batch_size]
            cpu_texts = texts[s:s + batch_size]
            text, length = encode(cpu_texts)
            preds = net(image)
            preds_size = torch.IntTensor([preds.size(0)] * image.size(0))
            cost = criterion(preds.log_softmax(2), text, preds_size, length) / image.size(0)
            loss_sum += cost.item()
            _, preds = preds.max(2)
            for pred, target in zip(decode(preds), cpu_texts):
                if pred == target:
                    n_correct += 1
    net.train()
    return loss_sum / ((len(texts) + batch_size - 1) // batch_size), n_correct / len(texts)


def trainBatch(net, criterion, optimizer, image, cpu_texts):
    batch_size = image.size(0)
    text, length = encode(cpu_texts)

    preds = net(image)
    preds_size = torch.IntTensor([preds.size(0)] * batch_size)
    cost = criterion(preds.log_softmax(2), text, preds_size, length) / batch_size
    net.zero_grad()
    cost.backward()
    optimizer.step()
    return cost


def main():
    torch.manual_seed(1234)
    rng = np.random.RandomState(1234)
    templates = (rng.rand(NCLASS - 1, 24, GLYPH_W) > 0.5).astype(np.float32)
    train_images, train_texts = make_lines(512, rng, templates)
    test_images, test_texts = make_lines(192, rng, templates)

    crnn = CRNN(32, 1, NCLASS, 64)
    criterion = nn.CTCLoss(reduction='sum', zero_infinity=True)
    optimizer = optim.Adam(crnn.parameters(), lr=1e-2, betas=(0.5, 0.999))

    batch_size = 16
    nepoch = 10
    for epoch in range(nepoch):
        perm = torch.randperm(len(train_texts))
        loss_total, steps = 0.0, 0
        for i in range(0, len(train_texts), batch_size):
            idx = perm[i:i + batch_size]
            image = train_images[idx]
            cpu_texts = [train_texts[j] for j in idx.tolist()]
            cost = trainBatch(crnn, criterion, optimizer, image, cpu_texts)
            loss_total += cost.item()
            steps += 1
        test_loss, accuracy = val(crnn, test_images, test_texts, criterion, batch_size)
        print('[%d/%d] Loss: %f  Test loss: %f, accuracy: %f' %
              (epoch, nepoch, loss_total / steps, test_loss, accuracy))
    # the same 8 test lines recognised in a batch of 8 and in a batch of 32
    crnn.eval()
    with torch.no_grad():
        a = crnn(test_images[:8])
        b = crnn(test_images[:32])[:, :8]
    print('max |logit change| of lines 0-7 between a batch of 8 and a batch of 32: %.4f'
          % (a - b).abs().max().item())


if __name__ == "__main__":
    main()
