# Source: GitYCC/crnn-pytorch, src/train.py, src/model.py, src/evaluate.py, src/dataset.py, src/ctc_decoder.py, src/config.py, commit f145a61e20e57a36b8f2d642f93c9ba2890cd042
# https://github.com/GitYCC/crnn-pytorch/blob/master/src/train.py
#
# CRNN text recognition with CTC: the model returns time-major logits (width, batch, class) from a CNN whose feature
# map is flattened and permuted (2, 0, 1), then two bidirectional LSTMs that default to batch_first=False;
# log_softmax over dim 2; class 0 is the CTC blank and characters are labels 1..36; the targets of a batch are
# concatenated into one 1-D tensor with a target_lengths vector; input_lengths are all equal to the number of frames;
# CTCLoss(reduction='sum', zero_infinity=True), so the printed batch loss is divided by the batch size by hand;
# RMSprop, gradient clipping at 5, crnn.train() called inside every train_batch because evaluate() leaves eval mode;
# BatchNorm on two of the seven convolutions only; greedy CTC decoding for validation.
# Adaptation: Synth90k word images replaced by synthetic 1x32x64 "text lines" (each of the 36 characters has a fixed
# random 32x8 glyph; the strings are 2-4 digits placed at a random x offset, noise added) scaled to [-1, 1] as in the
# dataset; the alphabet and the 37 classes are kept; the CNN's channels 64..512 -> 8..32, map_to_seq_hidden 64 -> 32,
# rnn_hidden 256 -> 48, image width 100 -> 64 (15 frames); lr 5e-4 -> 1e-3; 10000 epochs -> 12 epochs of 1000 images,
# eval batch 512 -> 200 images, valid every 40 batches; checkpoint saving and tqdm left out; cpu; seeds fixed.
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.nn import CTCLoss
from torch.utils.data import DataLoader, Dataset


# ---------------------------------------------------------------- src/dataset.py (image source replaced)
class Synth90kDataset(Dataset):
    CHARS = '0123456789abcdefghijklmnopqrstuvwxyz'
    CHAR2LABEL = {char: i + 1 for i, char in enumerate(CHARS)}
    LABEL2CHAR = {label: char for char, label in CHAR2LABEL.items()}

    GLYPHS = np.random.RandomState(7).rand(len(CHARS), 32, 8) > 0.55

    def __init__(self, n, seed, img_height=32, img_width=64):
        rng = np.random.RandomState(seed)
        self.img_height, self.img_width = img_height, img_width
        self.texts, self.images = [], []
        for _ in range(n):
            length = rng.randint(2, 5)
            text = ''.join(rng.choice(list(self.CHARS[:10]), length))  # digits only
            canvas = np.zeros((img_height, img_width), dtype=np.float32)
            x = rng.randint(0, img_width - 9 * length + 1)
            for c in text:
                canvas[:, x:x + 8] = self.GLYPHS[self.CHARS.index(c)]
                x += 9
            canvas = np.clip(canvas * 255 * 0.8 + rng.rand(img_height, img_width) * 60, 0, 255)
            self.texts.append(text)
            self.images.append(canvas)

    def __len__(self):
        return len(self.texts)

    def __getitem__(self, index):
        image = self.images[index]
        image = image.reshape((1, self.img_height, self.img_width))
        image = (image / 127.5) - 1.0

        image = torch.FloatTensor(image)
        text = self.texts[index]
        target = [self.CHAR2LABEL[c] for c in text]
        target_length = [len(target)]

        target = torch.LongTensor(target)
        target_length = torch.LongTensor(target_length)
        return image, target, target_length


def synth90k_collate_fn(batch):
    images, targets, target_lengths = zip(*batch)
    images = torch.stack(images, 0)
    targets = torch.cat(targets, 0)
    target_lengths = torch.cat(target_lengths, 0)
    return images, targets, target_lengths


# ---------------------------------------------------------------- src/model.py (channels reduced)
class CRNN(nn.Module):

    def __init__(self, img_channel, img_height, img_width, num_class,
                 map_to_seq_hidden=64, rnn_hidden=256, leaky_relu=False):
        super(CRNN, self).__init__()

        self.cnn, (output_channel, output_height, output_width) = \
            self._cnn_backbone(img_channel, img_height, img_width, leaky_relu)

        self.map_to_seq = nn.Linear(output_channel * output_height, map_to_seq_hidden)

        self.rnn1 = nn.LSTM(map_to_seq_hidden, rnn_hidden, bidirectional=True)
        self.rnn2 = nn.LSTM(2 * rnn_hidden, rnn_hidden, bidirectional=True)

        self.dense = nn.Linear(2 * rnn_hidden, num_class)

    def _cnn_backbone(self, img_channel, img_height, img_width, leaky_relu):
        assert img_height % 16 == 0
        assert img_width % 4 == 0

        channels = [img_channel, 8, 16, 32, 32, 32, 32, 32]
        kernel_sizes = [3, 3, 3, 3, 3, 3, 2]
        strides = [1, 1, 1, 1, 1, 1, 1]
        paddings = [1, 1, 1, 1, 1, 1, 0]

        cnn = nn.Sequential()

        def conv_relu(i, batch_norm=False):
            # shape of input: (batch, input_channel, height, width)
            input_channel = channels[i]
            output_channel = channels[i+1]

            cnn.add_module(
                f'conv{i}',
                nn.Conv2d(input_channel, output_channel, kernel_sizes[i], strides[i], paddings[i])
            )

            if batch_norm:
                cnn.add_module(f'batchnorm{i}', nn.BatchNorm2d(output_channel))

            relu = nn.LeakyReLU(0.2, inplace=True) if leaky_relu else nn.ReLU(inplace=True)
            cnn.add_module(f'relu{i}', relu)

        conv_relu(0)
        cnn.add_module('pooling0', nn.MaxPool2d(kernel_size=2, stride=2))
        conv_relu(1)
        cnn.add_module('pooling1', nn.MaxPool2d(kernel_size=2, stride=2))
        conv_relu(2)
        conv_relu(3)
        cnn.add_module('pooling2', nn.MaxPool2d(kernel_size=(2, 1)))
        conv_relu(4, batch_norm=True)
        conv_relu(5, batch_norm=True)
        cnn.add_module('pooling3', nn.MaxPool2d(kernel_size=(2, 1)))
        conv_relu(6)

        output_channel, output_height, output_width = \
            channels[-1], img_height // 16 - 1, img_width // 4 - 1
        return cnn, (output_channel, output_height, output_width)

    def forward(self, images):
        # shape of images: (batch, channel, height, width)

        conv = self.cnn(images)
        batch, channel, height, width = conv.size()

        conv = conv.view(batch, channel * height, width)
        conv = conv.permute(2, 0, 1)  # (width, batch, feature)
        seq = self.map_to_seq(conv)

        recurrent, _ = self.rnn1(seq)
        recurrent, _ = self.rnn2(recurrent)

        output = self.dense(recurrent)
        return output  # shape: (seq_len, batch, num_class)


# ---------------------------------------------------------------- src/ctc_decoder.py (greedy)
def _reconstruct(labels, blank=0):
    new_labels = []
    # merge same labels
    previous = None
    for l in labels:
        if l != previous:
            new_labels.append(l)
            previous = l
    # delete blank
    new_labels = [l for l in new_labels if l != blank]

    return new_labels


def greedy_decode(emission_log_prob, blank=0, **kwargs):
    labels = np.argmax(emission_log_prob, axis=-1)
    labels = _reconstruct(labels, blank=blank)
    return labels


def ctc_decode(log_probs, label2char=None, blank=0, method='greedy', beam_size=10):
    emission_log_probs = np.transpose(log_probs.cpu().numpy(), (1, 0, 2))
    decoders = {'greedy': greedy_decode}
    decoder = decoders[method]

    decoded_list = []
    for emission_log_prob in emission_log_probs:
        decoded = decoder(emission_log_prob, blank=blank, beam_size=beam_size)
        if label2char:
            decoded = [label2char[l] for l in decoded]
        decoded_list.append(decoded)
    return decoded_list


# ---------------------------------------------------------------- src/evaluate.py
def evaluate(crnn, dataloader, criterion,
             max_iter=None, decode_method='beam_search', beam_size=10):
    crnn.eval()

    tot_count = 0
    tot_loss = 0
    tot_correct = 0
    wrong_cases = []

    with torch.no_grad():
        for i, data in enumerate(dataloader):
            if max_iter and i >= max_iter:
                break
            device = 'cpu'

            images, targets, target_lengths = [d.to(device) for d in data]

            logits = crnn(images)
            log_probs = torch.nn.functional.log_softmax(logits, dim=2)

            batch_size = images.size(0)
            input_lengths = torch.LongTensor([logits.size(0)] * batch_size)

            loss = criterion(log_probs, targets, input_lengths, target_lengths)

            preds = ctc_decode(log_probs, method=decode_method, beam_size=beam_size)
            reals = targets.cpu().numpy().tolist()
            target_lengths = target_lengths.cpu().numpy().tolist()

            tot_count += batch_size
            tot_loss += loss.item()
            target_length_counter = 0
            for pred, target_length in zip(preds, target_lengths):
                real = reals[target_length_counter:target_length_counter + target_length]
                target_length_counter += target_length
                if pred == real:
                    tot_correct += 1
                else:
                    wrong_cases.append((real, pred))

    evaluation = {
        'loss': tot_loss / tot_count,
        'acc': tot_correct / tot_count,
        'wrong_cases': wrong_cases
    }
    return evaluation


# ---------------------------------------------------------------- src/config.py (reduced)
config = {
    'img_width': 64,
    'img_height': 32,
    'map_to_seq_hidden': 32,
    'rnn_hidden': 48,
    'leaky_relu': False,
    'epochs': 12,
    'train_batch_size': 32,
    'eval_batch_size': 200,
    'lr': 0.001,
    'show_interval': 10,
    'valid_interval': 40,
    'decode_method': 'greedy',
    'beam_size': 10,
}


# ---------------------------------------------------------------- src/train.py
def train_batch(crnn, data, optimizer, criterion, device):
    crnn.train()
    images, targets, target_lengths = [d.to(device) for d in data]

    logits = crnn(images)
    log_probs = torch.nn.functional.log_softmax(logits, dim=2)

    batch_size = images.size(0)
    input_lengths = torch.LongTensor([logits.size(0)] * batch_size)
    target_lengths = torch.flatten(target_lengths)

    loss = criterion(log_probs, targets, input_lengths, target_lengths)

    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(crnn.parameters(), 5)  # gradient clipping with 5
    optimizer.step()
    return loss.item()


def main():
    epochs = config['epochs']
    train_batch_size = config['train_batch_size']
    eval_batch_size = config['eval_batch_size']
    lr = config['lr']
    show_interval = config['show_interval']
    valid_interval = config['valid_interval']
    img_width = config['img_width']
    img_height = config['img_height']

    device = torch.device('cpu')
    print(f'device: {device}')

    train_dataset = Synth90kDataset(1000, seed=1, img_height=img_height, img_width=img_width)
    valid_dataset = Synth90kDataset(200, seed=2, img_height=img_height, img_width=img_width)

    train_loader = DataLoader(dataset=train_dataset, batch_size=train_batch_size, shuffle=True,
                              collate_fn=synth90k_collate_fn)
    valid_loader = DataLoader(dataset=valid_dataset, batch_size=eval_batch_size, shuffle=True,
                              collate_fn=synth90k_collate_fn)

    num_class = len(Synth90kDataset.LABEL2CHAR) + 1
    crnn = CRNN(1, img_height, img_width, num_class,
                map_to_seq_hidden=config['map_to_seq_hidden'],
                rnn_hidden=config['rnn_hidden'],
                leaky_relu=config['leaky_relu'])
    crnn.to(device)

    optimizer = optim.RMSprop(crnn.parameters(), lr=lr)
    criterion = CTCLoss(reduction='sum', zero_infinity=True)
    criterion.to(device)

    first = evaluate(crnn, valid_loader, criterion, decode_method=config['decode_method'], beam_size=config['beam_size'])
    print('valid_evaluation before training: loss={loss}, acc={acc}'.format(**first))
    evaluation = first
    i = 1
    for epoch in range(1, epochs + 1):
        print(f'epoch: {epoch}')
        tot_train_loss = 0.
        tot_train_count = 0
        for train_data in train_loader:
            loss = train_batch(crnn, train_data, optimizer, criterion, device)
            train_size = train_data[0].size(0)

            tot_train_loss += loss
            tot_train_count += train_size
            if i % show_interval == 0:
                print('train_batch_loss[', i, ']: ', loss / train_size)

            if i % valid_interval == 0:
                evaluation = evaluate(crnn, valid_loader, criterion,
                                      decode_method=config['decode_method'],
                                      beam_size=config['beam_size'])
                print('valid_evaluation: loss={loss}, acc={acc}'.format(**evaluation))

            i += 1

        print('train_loss: ', tot_train_loss / tot_train_count)
    print('[summary] valid loss first={:.3f} last={:.3f}; valid exact-match acc first={:.3f} last={:.3f}'.format(
        first['loss'], evaluation['loss'], first['acc'], evaluation['acc']))


if __name__ == '__main__':
    torch.manual_seed(0)
    np.random.seed(0)
    torch.set_num_threads(1)
    main()
