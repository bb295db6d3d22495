# Source: tsunrise/everybody-compose, models/attention_rnn.py (RNNEncoder, Attention, RNNDecoder, DeepBeatsAttentionRNN), utils/model.py (train, model_forward), utils/metrics.py, preprocess/dataset.py, commit ba7ae33a1518d48c00382efd0b0341cac0ec4fe6
# Report: https://github.com/tsunrise/everybody-compose/pull/53
# DeepBeats attention RNN: a bidirectional LSTM encodes the rhythm (note start / duration
# pairs); an LSTM decoder emits one note per step from the previous note (teacher forcing)
# and an additive attention context over the encoder outputs. The MAESTRO MIDI slices are
# replaced by synthetic melodies whose next note is the previous one moved by an interval
# set by the current beat's duration; sizes are reduced (16 notes, seq 16, hidden 32/64),
# tensorboard writing and checkpoint files are dropped; the mean attention weights of one
# validation batch are printed each epoch.
import numpy as np
import torch
import torch.nn as nn
import torch.utils.data
from torch.nn import functional as F

NOTE_START = 0


class RNNEncoder(nn.Module):
    def __init__(self, hidden_dim):
        super(RNNEncoder, self).__init__()
        self.hidden_dim = hidden_dim

        self.fc = nn.Linear(2, hidden_dim)
        self.encoder_lstm = nn.LSTM(hidden_dim, hidden_dim, batch_first=True, bidirectional = True)

    def forward(self, x):
        x = self.fc(x)
        encode_output, encode_hidden_dim = self.encoder_lstm(x)
        return encode_output, encode_hidden_dim

class Attention(nn.Module):
    def __init__(self, encode_hidden_dim, decode_hidden_dim):
        super(Attention, self).__init__()
        self.encode_hidden_dim = encode_hidden_dim
        self.decode_hidden_dim = decode_hidden_dim

        self.attn1 = nn.Linear(encode_hidden_dim * 2 + decode_hidden_dim, encode_hidden_dim)
        self.attn1_activation = nn.LeakyReLU()
        self.attn2 = nn.Linear(encode_hidden_dim, 1)
        self.attn2_activation = nn.Softmax(dim=2)
        self.last_weights = None

    def forward(self, encode_output, hidden_state):
        batch_size, seq_len, _ = encode_output.shape
        hidden_state = hidden_state.permute(1, 0, 2)
        hidden_state = hidden_state.repeat(1, seq_len, 1)
        concat = torch.concat((hidden_state, encode_output), dim=-1)
        attn = self.attn1(concat)
        attn = self.attn1_activation(attn)
        attn = self.attn2(attn)
        attn = self.attn2_activation(attn)
        attn = attn.view(batch_size, 1, seq_len)
        self.last_weights = attn.detach()
        context = torch.bmm(attn, encode_output)
        return context

class RNNDecoder(nn.Module):
    def __init__(self, num_notes, embed_dim, encode_hidden_dim, decode_hidden_dim, dropout_p = 0.1):
        super(RNNDecoder, self).__init__()
        self.decode_hidden_dim = decode_hidden_dim

        self.attention = Attention(encode_hidden_dim, decode_hidden_dim)
        self.note_embedding = nn.Embedding(num_notes, embed_dim)
        self.combine_fc = nn.Linear(encode_hidden_dim * 2 + embed_dim, decode_hidden_dim)
        self.dropout = nn.Dropout(dropout_p)
        self.post_attention_lstm = nn.LSTM(decode_hidden_dim, decode_hidden_dim, batch_first=True)
        self.notes_output = nn.Linear(decode_hidden_dim, num_notes)

    def forward(self, tgt, encode_output, memory=None):
        memory = self._default_init_hidden(tgt.shape[0]) if memory is None else memory
        context = self.attention(encode_output, memory[0])
        tgt = self.note_embedding(tgt)
        tgt = torch.cat((tgt, context), dim=2)
        tgt = self.combine_fc(tgt)
        tgt = F.relu(tgt)
        tgt = self.dropout(tgt)
        tgt, memory = self.post_attention_lstm(tgt, memory)
        tgt = self.notes_output(tgt)
        return tgt, memory

    def _default_init_hidden(self, batch_size):
        device = next(self.parameters()).device
        h = torch.zeros(1, batch_size, self.decode_hidden_dim).to(device)
        c = torch.zeros(1, batch_size, self.decode_hidden_dim).to(device)
        return (h, c)

class DeepBeatsAttentionRNN(nn.Module):
    def __init__(self, num_notes, embed_dim, encode_hidden_dim, decode_hidden_dim, dropout_p = 0.1):
        super(DeepBeatsAttentionRNN, self).__init__()
        self.num_notes = num_notes

        self.encoder = RNNEncoder(encode_hidden_dim)
        self.decoder = RNNDecoder(num_notes, embed_dim, encode_hidden_dim, decode_hidden_dim, dropout_p)

    def forward(self, x, tgt):
        batch_size, seq_len, _ = x.shape
        predicted_notes = torch.zeros(batch_size, seq_len, self.num_notes).to(next(self.parameters()).device)
        encode_output, encode_hidden = self.encoder(x)
        memory = None
        for t in range(seq_len):
            output, memory = self.decoder(tgt[:, t:t + 1], encode_output, memory)
            predicted_notes[:, t:t+1, :] = output
        return predicted_notes

    def loss_function(self, pred, target):
        criterion = nn.CrossEntropyLoss()
        target = target.flatten() # (batch_size * seq_len)
        pred = pred.reshape(-1, pred.shape[-1]) # (batch_size * seq_len, num_notes)
        loss = criterion(pred, target)
        return loss

    def clip_gradients_(self, max_value):
        torch.nn.utils.clip_grad.clip_grad_value_(self.parameters(), max_value)


class BeatsRhythmsDataset(torch.utils.data.Dataset):
    """Synthetic melodies: the interval to the next note is set by the beat's duration."""
    def __init__(self, seq_len, n_songs, n_notes, seed=12345):
        self.seq_len = seq_len
        self.rng = np.random.default_rng(seed)
        self.beats_list, self.notes_list = [], []
        for _ in range(n_songs):
            n = 96
            dur = self.rng.choice([0.25, 0.5, 1.0], size=n)
            start = np.concatenate([[0.0], np.cumsum(dur)[:-1]])
            beats = np.stack([start % 4.0, dur], axis=1)
            step = np.where(dur == 0.25, 1, np.where(dur == 0.5, 3, n_notes - 2))
            notes = np.zeros(n, dtype=np.int64)
            notes[0] = self.rng.integers(1, n_notes)
            for i in range(1, n):
                notes[i] = 1 + (notes[i - 1] - 1 + step[i]) % (n_notes - 1)
            self.beats_list.append(beats)
            self.notes_list.append(notes)

    def __len__(self):
        return len(self.beats_list)

    def __getitem__(self, idx):
        lo = self.rng.integers(0, len(self.beats_list[idx]) - self.seq_len)
        hi = lo + self.seq_len

        beats = self.beats_list[idx][lo:hi]
        notes = self.notes_list[idx][lo:hi]
        # for teacher forcing, we need to shift the notes right by one
        notes_shifted = np.roll(notes, 1)
        if lo == 0:
            notes_shifted[0] = NOTE_START
        else:
            notes_shifted[0] = self.notes_list[idx][lo - 1]
        return {
            "beats": beats.astype(np.float32),
            "notes": notes.astype(np.int32).ravel(),
            "notes_shifted": notes_shifted.astype(np.int32).ravel(),
        }


def accuracy(y_pred: np.ndarray, y_true: np.ndarray) -> float:
    assert isinstance(y_pred, np.ndarray)
    assert isinstance(y_true, np.ndarray)
    assert y_pred.shape == y_true.shape
    return (y_pred == y_true).sum() / len(y_true)


class Metrics:
    def __init__(self, label: str):
        self.label = label
        self.metrics_sum = {
            "loss": 0.,
            "accuracy": 0.
        }
        self.sample_count = 0

    def update(self, batch_size: int, loss: float, y_pred_one_hot: torch.Tensor, y_true: torch.Tensor):
        self.metrics_sum["loss"] += loss * batch_size

        y_pred = torch.argmax(y_pred_one_hot, dim=2).cpu().numpy().flatten()
        y_true = y_true.cpu().numpy().astype(float).flatten()

        self.metrics_sum["accuracy"] += accuracy(y_pred, y_true) * batch_size
        self.sample_count += batch_size

    def flush_and_reset(self, global_step: int):
        summary = {metric: value / self.sample_count for metric, value in self.metrics_sum.items()}
        self.metrics_sum = {metric: 0 for metric in self.metrics_sum}
        self.sample_count = 0
        return summary


def model_forward(model, input_seq, target_prev_seq):
    output = model(input_seq, target_prev_seq)
    return output


def train(n_epochs: int, device: str = "cpu"):
    model_config = {"lr": 3e-3, "seq_len": 16, "batch_size": 32, "n_notes": 16, "embed_dim": 16,
                    "encode_hidden_dim": 32, "decode_hidden_dim": 64, "clip_grad": 5.0}
    torch.manual_seed(0)
    model = DeepBeatsAttentionRNN(model_config["n_notes"], model_config["embed_dim"], model_config["encode_hidden_dim"],
                                  model_config["decode_hidden_dim"]).to(device)

    training_data = BeatsRhythmsDataset(model_config["seq_len"], 1024, model_config["n_notes"], seed=123)
    val_data = BeatsRhythmsDataset(model_config["seq_len"], 64, model_config["n_notes"], seed=666)
    print(f"Training data: {len(training_data)}")
    print(f"Validation data: {len(val_data)}")

    train_loader = torch.utils.data.DataLoader(training_data, batch_size=model_config["batch_size"], shuffle=True)
    val_loader = torch.utils.data.DataLoader(val_data, batch_size=model_config["batch_size"], shuffle=False)

    optimizer = torch.optim.Adam(model.parameters(), lr=model_config["lr"])

    best_val_loss = float("inf")
    metrics_train = Metrics("train")
    metrics_val = Metrics("validation")

    for epoch in range(0, n_epochs):
        model.train()
        for batch in train_loader:
            optimizer.zero_grad()
            input_seq = batch["beats"].to(device)
            target_seq = batch["notes"].long().to(device)
            target_prev_seq = batch["notes_shifted"].long().to(device)
            output = model_forward(model, input_seq, target_prev_seq)
            loss = model.loss_function(output, target_seq)
            loss.backward()
            if "clip_grad" in model_config:
                model.clip_gradients_(model_config["clip_grad"])
            optimizer.step()
            metrics_train.update(len(batch), loss.item(), output, target_seq)

        model.eval()
        for batch in val_loader:
            input_seq = batch["beats"].to(device)
            target_seq = batch["notes"].long().to(device)
            target_prev_seq = batch["notes_shifted"].long().to(device)
            with torch.no_grad():
                output = model_forward(model, input_seq, target_prev_seq)
                loss = model.loss_function(output, target_seq)
            metrics_val.update(len(batch), loss.item(), output, target_seq)
            weights = model.decoder.attention.last_weights

        training_metrics = metrics_train.flush_and_reset(epoch)
        validation_metrics = metrics_val.flush_and_reset(epoch)

        print('Epoch: {}/{}.............'.format(epoch, n_epochs), end=' ')
        print("Train Loss: {:.4f}, Val Loss: {:.4f}, Train Acc: {:.4f}, Val Acc: {:.4f}".format(training_metrics["loss"], validation_metrics["loss"], training_metrics["accuracy"], validation_metrics["accuracy"]))
        print("    attention weights (last step): min {:.3f} max {:.3f} sum over {} steps {:.3f}".format(
            weights.min().item(), weights.max().item(), weights.shape[-1], weights.sum(-1).mean().item()))

        # save checkpoint with lowest validation loss
        if validation_metrics["loss"] < best_val_loss:
            best_val_loss = validation_metrics["loss"]
    return model


if __name__ == '__main__':
    torch.set_num_threads(1)
    train(n_epochs=5)
