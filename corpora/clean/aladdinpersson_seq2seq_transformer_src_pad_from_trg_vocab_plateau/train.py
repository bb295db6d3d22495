# Source: aladdinpersson/Machine-Learning-Collection, ML/Pytorch/more_advanced/seq2seq_transformer/seq2seq_transformer.py, ML/Pytorch/more_advanced/seq2seq_transformer/utils.py, commit 65b8c8049560b19ace11ef754cb4dbe5aa415296
# https://github.com/aladdinpersson/Machine-Learning-Collection/blob/master/ML/Pytorch/more_advanced/seq2seq_transformer/seq2seq_transformer.py
#
# Seq2seq translation with nn.Transformer (sequence-first): the source padding index is read from the TARGET
# vocabulary (english.vocab.stoi["<pad>"]), which holds because both vocabularies put <pad> at index 1; only a
# src_key_padding_mask is passed (no tgt_key_padding_mask, no memory_key_padding_mask); the decoder input is
# target[:-1] and the labels target[1:], flattened for CrossEntropyLoss(ignore_index=pad_idx); learned position
# embeddings; ReduceLROnPlateau(patience=10) stepped on the mean TRAINING loss once per epoch; clip_grad_norm 1;
# a greedy translation of a fixed sentence in eval mode at the start of every epoch (before any training in the
# first one); the BucketIterator sorts within batches by source length.
# Adaptation: Multi30k/spacy/torchtext are replaced by a synthetic "German -> English" task (a fixed word-by-word
# dictionary, 5-12 words, 1600 training / 100 test pairs) with a minimal Field /
# vocab (stoi/itos, <unk>=0 <pad>=1 <sos>=2 <eos>=3) and BucketIterator stand-ins; embedding 512 -> 64, heads 8 -> 4,
# encoder/decoder layers 3 -> 2; num_epochs 10000 -> 6; load_model/save_model True -> False (no checkpoint file);
# tensorboard -> stand-in; BLEU on the test set replaced by greedy exact-match and token accuracy on 40 test
# pairs (translate_sentence from utils.py kept); seeds fixed.
import random

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim

random.seed(0)
np.random.seed(0)
torch.manual_seed(0)


class SummaryWriter:
    """tensorboard stand-in."""

    def __init__(self, log_dir=None):
        self.scalars = []

    def add_scalar(self, tag, value, global_step=None):
        self.scalars.append((tag, global_step, float(value)))


# --------------------------------------------------------------------- torchtext / Multi30k stand-ins
GER_WORDS = ["w%02d" % i for i in range(40)]
ENG_WORDS = ["e%02d" % i for i in range(40)]
DICTIONARY = dict(zip(GER_WORDS, [str(w) for w in np.random.RandomState(7).permutation(ENG_WORDS)]))


class Vocab:
    def __init__(self, words):
        self.itos = ["<unk>", "<pad>", "<sos>", "<eos>"] + sorted(set(words))
        self.stoi = {w: i for i, w in enumerate(self.itos)}

    def __len__(self):
        return len(self.itos)


class Field:
    def __init__(self, tokenize, lower=True, init_token="<sos>", eos_token="<eos>"):
        self.tokenize = tokenize
        self.init_token = init_token
        self.eos_token = eos_token
        self.vocab = None

    def build_vocab(self, data, side, max_size=10000, min_freq=2):
        self.vocab = Vocab([w for ex in data for w in getattr(ex, side)])


class Example:
    def __init__(self, src, trg):
        self.src, self.trg = src, trg


def make_pairs(n, rng):
    data = []
    for _ in range(n):
        ger = [GER_WORDS[i] for i in rng.randint(0, len(GER_WORDS), rng.randint(5, 13))]
        eng = [DICTIONARY[w] for w in ger]
        data.append(Example(ger, eng))
    return data


class Batch:
    def __init__(self, src, trg):
        self.src, self.trg = src, trg


class BucketIterator:
    def __init__(self, data, batch_size, sort_key, src_field, trg_field, device):
        self.data, self.batch_size, self.sort_key = data, batch_size, sort_key
        self.src_field, self.trg_field, self.device = src_field, trg_field, device

    @staticmethod
    def numericalize(field, seqs):
        ids = [[field.vocab.stoi[field.init_token]] + [field.vocab.stoi.get(w, 0) for w in s]
               + [field.vocab.stoi[field.eos_token]] for s in seqs]
        out = torch.full((max(len(x) for x in ids), len(ids)), field.vocab.stoi["<pad>"], dtype=torch.long)
        for j, x in enumerate(ids):
            out[: len(x), j] = torch.tensor(x)
        return out.to(self_device(field))

    def __iter__(self):
        order = list(range(len(self.data)))
        random.shuffle(order)
        for i in range(0, len(order), self.batch_size):
            exs = sorted((self.data[k] for k in order[i:i + self.batch_size]), key=self.sort_key, reverse=True)
            yield Batch(self.numericalize(self.src_field, [e.src for e in exs]),
                        self.numericalize(self.trg_field, [e.trg for e in exs]))

    def __len__(self):
        return (len(self.data) + self.batch_size - 1) // self.batch_size


def self_device(field):
    return torch.device("cpu")


def tokenize_ger(text):
    return text.split()


def tokenize_eng(text):
    return text.split()


german = Field(tokenize=tokenize_ger, lower=True, init_token="<sos>", eos_token="<eos>")

english = Field(
    tokenize=tokenize_eng, lower=True, init_token="<sos>", eos_token="<eos>"
)

_rng = np.random.RandomState(0)
train_data, valid_data, test_data = make_pairs(1600, _rng), make_pairs(100, _rng), make_pairs(100, _rng)

german.build_vocab(train_data, "src", max_size=10000, min_freq=2)
english.build_vocab(train_data, "trg", max_size=10000, min_freq=2)


# ------------------------------------------------------------------------------------------ utils.py
def translate_sentence(model, sentence, german, english, device, max_length=50):
    # Load german tokenizer
    if type(sentence) == str:
        tokens = [token.lower() for token in german.tokenize(sentence)]
    else:
        tokens = [token.lower() for token in sentence]

    # Add <SOS> and <EOS> in beginning and end respectively
    tokens.insert(0, german.init_token)
    tokens.append(german.eos_token)

    # Go through each german token and convert to an index
    text_to_indices = [german.vocab.stoi.get(token, 0) for token in tokens]

    # Convert to Tensor
    sentence_tensor = torch.LongTensor(text_to_indices).unsqueeze(1).to(device)

    outputs = [english.vocab.stoi["<sos>"]]
    for i in range(max_length):
        trg_tensor = torch.LongTensor(outputs).unsqueeze(1).to(device)

        with torch.no_grad():
            output = model(sentence_tensor, trg_tensor)

        best_guess = output.argmax(2)[-1, :].item()
        outputs.append(best_guess)

        if best_guess == english.vocab.stoi["<eos>"]:
            break

    translated_sentence = [english.vocab.itos[idx] for idx in outputs]
    # remove start token
    return translated_sentence[1:]


def exact_match(data, model, german, english, device):
    exact, tok_correct, tok_total = 0, 0, 0
    for example in data:
        prediction = translate_sentence(model, example.src, german, english, device)
        prediction = prediction[:-1]  # remove <eos> token
        exact += prediction == example.trg
        tok_correct += sum(p == t for p, t in zip(prediction, example.trg))
        tok_total += len(example.trg)
    return exact / len(data), tok_correct / tok_total


# ------------------------------------------------------------------------------- seq2seq_transformer.py
class Transformer(nn.Module):
    def __init__(
        self,
        embedding_size,
        src_vocab_size,
        trg_vocab_size,
        src_pad_idx,
        num_heads,
        num_encoder_layers,
        num_decoder_layers,
        forward_expansion,
        dropout,
        max_len,
        device,
    ):
        super(Transformer, self).__init__()
        self.src_word_embedding = nn.Embedding(src_vocab_size, embedding_size)
        self.src_position_embedding = nn.Embedding(max_len, embedding_size)
        self.trg_word_embedding = nn.Embedding(trg_vocab_size, embedding_size)
        self.trg_position_embedding = nn.Embedding(max_len, embedding_size)

        self.device = device
        self.transformer = nn.Transformer(
            embedding_size,
            num_heads,
            num_encoder_layers,
            num_decoder_layers,
            forward_expansion,
            dropout,
        )
        self.fc_out = nn.Linear(embedding_size, trg_vocab_size)
        self.dropout = nn.Dropout(dropout)
        self.src_pad_idx = src_pad_idx

    def make_src_mask(self, src):
        src_mask = src.transpose(0, 1) == self.src_pad_idx

        # (N, src_len)
        return src_mask.to(self.device)

    def forward(self, src, trg):
        src_seq_length, N = src.shape
        trg_seq_length, N = trg.shape

        src_positions = (
            torch.arange(0, src_seq_length)
            .unsqueeze(1)
            .expand(src_seq_length, N)
            .to(self.device)
        )

        trg_positions = (
            torch.arange(0, trg_seq_length)
            .unsqueeze(1)
            .expand(trg_seq_length, N)
            .to(self.device)
        )

        embed_src = self.dropout(
            (self.src_word_embedding(src) + self.src_position_embedding(src_positions))
        )
        embed_trg = self.dropout(
            (self.trg_word_embedding(trg) + self.trg_position_embedding(trg_positions))
        )

        src_padding_mask = self.make_src_mask(src)
        trg_mask = self.transformer.generate_square_subsequent_mask(trg_seq_length).to(
            self.device
        )

        out = self.transformer(
            embed_src,
            embed_trg,
            src_key_padding_mask=src_padding_mask,
            tgt_mask=trg_mask,
        )
        out = self.fc_out(out)
        return out


if __name__ == "__main__":
    # We're ready to define everything we need for training our Seq2Seq model
    device = torch.device("cpu")

    load_model = False
    save_model = False

    # Training hyperparameters
    num_epochs = 6
    learning_rate = 3e-4
    batch_size = 32

    # Model hyperparameters
    src_vocab_size = len(german.vocab)
    trg_vocab_size = len(english.vocab)
    embedding_size = 64
    num_heads = 4
    num_encoder_layers = 2
    num_decoder_layers = 2
    dropout = 0.10
    max_len = 100
    forward_expansion = 4
    src_pad_idx = english.vocab.stoi["<pad>"]

    # Tensorboard to get nice loss plot
    writer = SummaryWriter("runs/loss_plot")
    step = 0

    train_iterator = BucketIterator(train_data, batch_size=batch_size, sort_key=lambda x: len(x.src),
                                    src_field=german, trg_field=english, device=device)

    model = Transformer(
        embedding_size,
        src_vocab_size,
        trg_vocab_size,
        src_pad_idx,
        num_heads,
        num_encoder_layers,
        num_decoder_layers,
        forward_expansion,
        dropout,
        max_len,
        device,
    ).to(device)

    optimizer = optim.Adam(model.parameters(), lr=learning_rate)

    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
        optimizer, factor=0.1, patience=10
    )

    pad_idx = english.vocab.stoi["<pad>"]
    criterion = nn.CrossEntropyLoss(ignore_index=pad_idx)

    sentence = " ".join(test_data[0].src)
    history = []

    for epoch in range(num_epochs):
        print(f"[Epoch {epoch} / {num_epochs}]")

        model.eval()
        translated_sentence = translate_sentence(
            model, sentence, german, english, device, max_length=50
        )

        print(f"Translated example sentence: \n {translated_sentence}")
        model.train()
        losses = []

        for batch_idx, batch in enumerate(train_iterator):
            # Get input and targets and get to cuda
            inp_data = batch.src.to(device)
            target = batch.trg.to(device)

            # Forward prop
            output = model(inp_data, target[:-1, :])

            # Output is of shape (trg_len, batch_size, output_dim) but Cross Entropy Loss
            # doesn't take input in that form. For example if we have MNIST we want to have
            # output to be: (N, 10) and targets just (N). Here we can view it in a similar
            # way that we have output_words * batch_size that we want to send in into
            # our cost function, so we need to do some reshapin.
            # Let's also remove the start token while we're at it
            output = output.reshape(-1, output.shape[2])
            target = target[1:].reshape(-1)

            optimizer.zero_grad()

            loss = criterion(output, target)
            losses.append(loss.item())

            # Back prop
            loss.backward()
            # Clip to avoid exploding gradient issues, makes sure grads are
            # within a healthy range
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1)

            # Gradient descent step
            optimizer.step()

            # plot to tensorboard
            writer.add_scalar("Training loss", loss, global_step=step)
            step += 1

        mean_loss = sum(losses) / len(losses)
        scheduler.step(mean_loss)
        history.append(mean_loss)
        print(f"mean training loss {mean_loss:.4f}")

    # running on entire test data takes a while
    model.eval()
    em, tok = exact_match(test_data[1:41], model, german, english, device)
    print(f"Exact match {em * 100:.2f}  token accuracy {tok * 100:.2f}")
    print(f"[summary] mean training loss first={history[0]:.4f} last={history[-1]:.4f} decreased={history[-1] < history[0]}")
    print(f"[summary] test greedy token accuracy {tok * 100:.2f}% (chance {100 / len(ENG_WORDS):.1f}%)")
