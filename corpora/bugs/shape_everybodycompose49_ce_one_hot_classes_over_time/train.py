# Source: tsunrise/everybody-compose, models/lstm.py (DeepBeatsLSTM), utils/model.py (train), utils/metrics.py, preprocess/dataset.py, commit 2b28ba790f32dbd29a1835400f12a85c4b678779
# Report: https://github.com/tsunrise/everybody-compose/pull/49
# DeepBeats: an LSTM that turns a rhythm (note start / duration pairs) into a melody, with
# teacher forcing (the previous note's embedding is concatenated to the beat features).
# The MAESTRO MIDI slices are replaced by synthetic melodies whose next note is the previous
# one moved by an interval set by the beat's duration; sizes are reduced (16 notes, seq 24,
# hidden 64), tensorboard writing and checkpoint files are dropped.
import numpy as np
import torch
import torch.nn as nn
import torch.utils.data

NOTE_START = 0


class ConcatPrev(nn.Module):
    def forward(self, x, y_prev):
        """
        x: input, shape: (batch_size, seq_len, 2)
        y_prev: label, shape: (batch_size, seq_len, embedding_dim),
           y_prev[i] should be the embedding of note label for x[i-1], and y[0] is 0.
        """

        # concat x and y_prev_embed to be X
        X = torch.cat((x, y_prev), dim=2)
        return X


class DeepBeatsLSTM(nn.Module):
    """
    DeepBeats with Teacher Forcing. This is the same as DeepBeats, the label in previous step is used as input in the next step.
    """
    def __init__(self, num_notes, embed_size, hidden_dim):
        super(DeepBeatsLSTM, self).__init__()
        self.note_embedding = nn.Embedding(num_notes, embed_size)
        self.concat_prev = ConcatPrev()
        self.concat_input_fc = nn.Linear(embed_size + 2, embed_size + 2)
        self.concat_input_activation = nn.LeakyReLU()
        self.layer1 = nn.LSTM(embed_size + 2, hidden_dim, batch_first=True)
        self.layer2 = nn.LSTM(hidden_dim, hidden_dim, batch_first=True)
        self.notes_logits_output = nn.Linear(hidden_dim, num_notes)
        self.dropout = nn.Dropout(0.5)
        self.num_notes = num_notes
        self.hidden_dim = hidden_dim

        self._initializer_weights()

    def _default_init_hidden(self, batch_size):
        device = next(self.parameters()).device
        h1_0 = torch.zeros(1, batch_size, self.layer1.hidden_size).to(device)
        c1_0 = torch.zeros(1, batch_size, self.layer1.hidden_size).to(device)
        h2_0 = torch.zeros(1, batch_size, self.layer2.hidden_size).to(device)
        c2_0 = torch.zeros(1, batch_size, self.layer2.hidden_size).to(device)
        return h1_0, c1_0, h2_0, c2_0

    def _initializer_weights(self):
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.constant_(m.bias, 0)

    def forward(self, x, y_prev, init_hidden=None):
        """
        x: input, shape: (batch_size, seq_len, 2)
        y_prev: label, shape: (batch_size, seq_len), range from 0 to num_notes-1
           y_prev[i] should be the note label for x[i-1], and y[0] is 0.
        """
        h1_0, c1_0, h2_0, c2_0 = self._default_init_hidden(x.shape[0]) if init_hidden is None else init_hidden
        # Embedding
        y_prev_embed = self.note_embedding(y_prev)
        X = self.concat_prev(x, y_prev_embed)
        # Concat input
        X_fc = self.concat_input_fc(X)
        X_fc = self.concat_input_activation(X_fc)
        # residual connection
        X = X_fc + X

        X, (h1, c1) = self.layer1(X, (h1_0, c1_0))
        X = self.dropout(X)
        X, (h2, c2) = self.layer2(X, (h2_0, c2_0))
        predicted_notes = self.notes_logits_output(X)
        return predicted_notes, (h1, c1, h2, c2)

    def loss_function(self, pred, target):
        """
        Pred: (batch_size, seq_len, num_notes), logits
        Target: (batch_size, seq_len), range from 0 to num_notes-1
        """
        criterion = nn.CrossEntropyLoss()
        target_one_hot = torch.nn.functional.one_hot(target, self.num_notes).float()
        loss = criterion(pred, target_one_hot)
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
    output, _ = model(input_seq, target_prev_seq)
    return output


def train(n_epochs: int, device: str = "cpu"):
    model_config = {"lr": 3e-3, "seq_len": 24, "batch_size": 32, "n_notes": 16, "embed_dim": 16,
                    "hidden_dim": 64, "clip_grad": 5.0}
    torch.manual_seed(0)
    model = DeepBeatsLSTM(model_config["n_notes"], model_config["embed_dim"], model_config["hidden_dim"]).to(device)

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

        training_metrics = metrics_train.flush_and_reset(epoch)
        validation_metrics = metrics_val.flush_and_reset(epoch)

        print('Epoch: {}/{}.............'.format(epoch, n_epochs), end=' ')
        print("Train Loss: {:.4f}, Val Loss: {:.4f}, Train Acc: {:.4f}, Val Acc: {:.4f}".format(training_metrics["loss"], validation_metrics["loss"], training_metrics["accuracy"], validation_metrics["accuracy"]))

        # save checkpoint with lowest validation loss
        if validation_metrics["loss"] < best_val_loss:
            best_val_loss = validation_metrics["loss"]
    return model


if __name__ == '__main__':
    torch.set_num_threads(1)
    train(n_epochs=8)
