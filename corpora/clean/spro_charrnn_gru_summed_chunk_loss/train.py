# Source: spro/char-rnn.pytorch, train.py + model.py + helpers.py + generate.py, commit 282bcb6b15ab3929d6a588b455cfc0f19f32add4
# https://github.com/spro/char-rnn.pytorch
#
# Character-level GRU language model fed one character at a time: the per-character CrossEntropy losses
# are SUMMED over the chunk (loss += criterion(...)) and backpropagated through all chunk_len steps at once;
# gradients are cleared with decoder.zero_grad() (not the optimizer's); hidden state starts from zeros for
# every random chunk; the reported loss is the sum divided by chunk_len. Sampling (generate) runs the model
# without no_grad and samples from output.data.div(temperature).exp().
# Adaptation: the text file is replaced by synthetic English-like text from a small template grammar (no
# files, no unidecode); loss.data[0] -> loss.item() (0-dim tensors in modern PyTorch); Variable kept;
# hidden_size 100 -> 64, chunk_len 200 -> 40, batch_size 100 -> 32, n_epochs 2000 -> 120, print_every 100 -> 30;
# tqdm and save() removed; argparse defaults kept in a parse_args([...]) call.
import argparse
import math
import random
import string
import time

import torch
import torch.nn as nn
from torch.autograd import Variable


# ---- helpers.py ----
all_characters = string.printable
n_characters = len(all_characters)


def char_tensor(string):
    tensor = torch.zeros(len(string)).long()
    for c in range(len(string)):
        try:
            tensor[c] = all_characters.index(string[c])
        except:
            continue
    return tensor


def time_since(since):
    s = time.time() - since
    m = math.floor(s / 60)
    s -= m * 60
    return '%dm %ds' % (m, s)


# ---- model.py ----
class CharRNN(nn.Module):
    def __init__(self, input_size, hidden_size, output_size, model="gru", n_layers=1):
        super(CharRNN, self).__init__()
        self.model = model.lower()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.output_size = output_size
        self.n_layers = n_layers

        self.encoder = nn.Embedding(input_size, hidden_size)
        if self.model == "gru":
            self.rnn = nn.GRU(hidden_size, hidden_size, n_layers)
        elif self.model == "lstm":
            self.rnn = nn.LSTM(hidden_size, hidden_size, n_layers)
        self.decoder = nn.Linear(hidden_size, output_size)

    def forward(self, input, hidden):
        batch_size = input.size(0)
        encoded = self.encoder(input)
        output, hidden = self.rnn(encoded.view(1, batch_size, -1), hidden)
        output = self.decoder(output.view(batch_size, -1))
        return output, hidden

    def init_hidden(self, batch_size):
        if self.model == "lstm":
            return (Variable(torch.zeros(self.n_layers, batch_size, self.hidden_size)),
                    Variable(torch.zeros(self.n_layers, batch_size, self.hidden_size)))
        return Variable(torch.zeros(self.n_layers, batch_size, self.hidden_size))


# ---- generate.py ----
def generate(decoder, prime_str='A', predict_len=100, temperature=0.8, cuda=False):
    hidden = decoder.init_hidden(1)
    prime_input = Variable(char_tensor(prime_str).unsqueeze(0))

    if cuda:
        hidden = hidden.cuda()
        prime_input = prime_input.cuda()
    predicted = prime_str

    # Use priming string to "build up" hidden state
    for p in range(len(prime_str) - 1):
        _, hidden = decoder(prime_input[:,p], hidden)

    inp = prime_input[:,-1]

    for p in range(predict_len):
        output, hidden = decoder(inp, hidden)

        # Sample from the network as a multinomial distribution
        output_dist = output.data.view(-1).div(temperature).exp()
        top_i = torch.multinomial(output_dist, 1)[0]

        # Add predicted character to string and use as next input
        predicted_char = all_characters[top_i]
        predicted += predicted_char
        inp = Variable(char_tensor(predicted_char).unsqueeze(0))
        if cuda:
            inp = inp.cuda()

    return predicted


def synthetic_text(n_sentences, seed=0):
    rng = random.Random(seed)
    subj = ["The king", "What she", "When the man", "The old woman", "Whoever", "The ship", "His brother"]
    verb = ["said", "walked to", "looked at", "would see", "took", "remembered", "sailed past"]
    obj = ["the castle.", "her sister.", "the sea.", "the long road home.", "what was left.", "the white horse."]
    return " ".join("%s %s %s" % (rng.choice(subj), rng.choice(verb), rng.choice(obj))
                    for _ in range(n_sentences))


def main():
    random.seed(0)
    torch.manual_seed(0)
    argparser = argparse.ArgumentParser()
    argparser.add_argument('--model', type=str, default="gru")
    argparser.add_argument('--n_epochs', type=int, default=2000)
    argparser.add_argument('--print_every', type=int, default=100)
    argparser.add_argument('--hidden_size', type=int, default=100)
    argparser.add_argument('--n_layers', type=int, default=2)
    argparser.add_argument('--learning_rate', type=float, default=0.01)
    argparser.add_argument('--chunk_len', type=int, default=200)
    argparser.add_argument('--batch_size', type=int, default=100)
    argparser.add_argument('--shuffle', action='store_true')
    argparser.add_argument('--cuda', action='store_true')
    args = argparser.parse_args(['--n_epochs', '120', '--print_every', '30', '--hidden_size', '64',
                                 '--chunk_len', '40', '--batch_size', '32'])

    file = synthetic_text(2000)
    file_len = len(file)

    def random_training_set(chunk_len, batch_size):
        inp = torch.LongTensor(batch_size, chunk_len)
        target = torch.LongTensor(batch_size, chunk_len)
        for bi in range(batch_size):
            start_index = random.randint(0, file_len - chunk_len)
            end_index = start_index + chunk_len + 1
            chunk = file[start_index:end_index]
            inp[bi] = char_tensor(chunk[:-1])
            target[bi] = char_tensor(chunk[1:])
        inp = Variable(inp)
        target = Variable(target)
        if args.cuda:
            inp = inp.cuda()
            target = target.cuda()
        return inp, target

    def train(inp, target):
        hidden = decoder.init_hidden(args.batch_size)
        if args.cuda:
            hidden = hidden.cuda()
        decoder.zero_grad()
        loss = 0

        for c in range(args.chunk_len):
            output, hidden = decoder(inp[:,c], hidden)
            loss += criterion(output.view(args.batch_size, -1), target[:,c])

        loss.backward()
        decoder_optimizer.step()

        return loss.item() / args.chunk_len

    # Initialize models and start training

    decoder = CharRNN(
        n_characters,
        args.hidden_size,
        n_characters,
        model=args.model,
        n_layers=args.n_layers,
    )
    decoder_optimizer = torch.optim.Adam(decoder.parameters(), lr=args.learning_rate)
    criterion = nn.CrossEntropyLoss()

    start = time.time()
    loss_avg = 0

    print("Training for %d epochs..." % args.n_epochs)
    for epoch in range(1, args.n_epochs + 1):
        loss = train(*random_training_set(args.chunk_len, args.batch_size))
        loss_avg += loss
        if epoch == 1:
            print('first chunk loss %.4f' % loss)

        if epoch % args.print_every == 0:
            print('[%s (%d %d%%) %.4f]' % (time_since(start), epoch, epoch / args.n_epochs * 100, loss))
            print(generate(decoder, 'Wh', 60, cuda=args.cuda), '\n')


if __name__ == '__main__':
    main()
