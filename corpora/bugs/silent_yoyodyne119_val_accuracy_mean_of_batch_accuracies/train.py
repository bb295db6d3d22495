# Source: CUNY-CL/yoyodyne, yoyodyne/models/base.py (BaseEncoderDecoder: training_step, validation_step, validation_epoch_end, configure_optimizers, _get_loss_func), yoyodyne/models/lstm.py (LSTMEncoderDecoder), yoyodyne/models/modules/lstm.py (LSTMEncoder, LSTMDecoder), yoyodyne/evaluators.py (Evaluator), yoyodyne/data/batches.py, yoyodyne/train.py (_get_callbacks), commit 8894f30d96fcecc7d34c7e5d14bf2895929a7691
# Report: https://github.com/CUNY-CL/yoyodyne/issues/119
# yoyodyne: a character-level LSTM encoder-decoder for string transduction (morphological
# inflection and the like), trained with Adam on NLL with teacher forcing; every epoch the
# validation set is greedily decoded, exact-match accuracy and loss are reduced over the
# validation steps, and ModelCheckpoint keeps the checkpoint with the best val_accuracy. The
# PyTorch Lightning Trainer is replaced by a plain loop that calls training_step /
# validation_step / validation_epoch_end the way it does; the TSV data become synthetic
# transduction pairs (the target is the source reversed through a fixed letter mapping).
import copy
import math
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch
from torch import nn
from torch.nn import functional

PAD, START, END = 0, 1, 2
LETTERS = 12
VOCAB = 3 + LETTERS


class PaddedTensor:
    def __init__(self, tensorlist: List[torch.Tensor], pad_idx: int):
        pad_len = max(len(tensor) for tensor in tensorlist)
        self.padded = torch.stack([functional.pad(t, (0, pad_len - len(t)), "constant", pad_idx) for t in tensorlist])
        self.mask = self.padded == pad_idx

    def __len__(self) -> int:
        return len(self.padded)

    def lengths(self) -> torch.Tensor:
        return (self.mask == 0).sum(dim=1).cpu()


class PaddedBatch:
    def __init__(self, source, target=None):
        self.source = source
        self.target = target

    def __len__(self) -> int:
        return len(self.source)


class Evaluator:
    """Evaluates predictions."""

    def val_accuracy(self, predictions: torch.Tensor, golds: torch.Tensor, end_idx: int, pad_idx: int) -> float:
        """Computes the exact word match accuracy."""
        # Gets the max val at each dim2 in predictions.
        vals, predictions = torch.max(predictions, dim=2)
        # Finalizes the predictions.
        predictions = self.finalize_predictions(predictions, end_idx, pad_idx)
        return self.accuracy(predictions, golds, pad_idx)

    @staticmethod
    def accuracy(predictions: torch.Tensor, golds: torch.Tensor, pad_idx: int) -> float:
        if predictions.size(1) > golds.size(1):
            predictions = predictions[:, : golds.size(1)]
        elif predictions.size(1) < golds.size(1):
            num_pads = (0, golds.size(1) - predictions.size(1))
            predictions = functional.pad(predictions, num_pads, "constant", pad_idx)
        # Gets the count of exactly matching tensors in the batch.
        # -> B x max_seq_len.
        corr_count = torch.where((predictions.to(golds.device) == golds).all(dim=1))[0].size()[0]
        # Gets the batch size (total_count).
        total_count = predictions.size(0)
        return corr_count / total_count

    @staticmethod
    def finalize_predictions(predictions: torch.Tensor, end_idx: int, pad_idx: int) -> torch.Tensor:
        """Cuts off tensors at the first end_idx, and replaces the rest of the predictions with pad_idx."""
        if predictions.size(0) == 1:
            return predictions
        for i, x in enumerate(predictions):
            EOS = (x == end_idx).nonzero(as_tuple=False)
            if len(EOS) > 0 and EOS[0].item() < len(x):
                EOS = EOS[0]
            else:
                continue
            EOS[EOS == 0] = 1
            chars, *_ = torch.split(x, EOS)
            pads = torch.ones(len(x) - len(chars), device=chars.device) * pad_idx
            pads[0] = end_idx
            with torch.inference_mode():
                predictions[i] = torch.cat((chars, pads))
        return predictions


class LSTMEncoder(nn.Module):
    def __init__(self, num_embeddings, embedding_size, hidden_size, pad_idx, dropout, layers=1, bidirectional=True):
        super().__init__()
        self.pad_idx = pad_idx
        self.embeddings = nn.Embedding(num_embeddings, embedding_size)
        nn.init.constant_(self.embeddings.weight[pad_idx], 0.0)
        self.dropout_layer = nn.Dropout(p=dropout)
        self.module = nn.LSTM(embedding_size, hidden_size, num_layers=layers, batch_first=True,
                              bidirectional=bidirectional)
        self.output_size = hidden_size * (2 if bidirectional else 1)

    def forward(self, source: PaddedTensor) -> torch.Tensor:
        embedded = self.dropout_layer(self.embeddings(source.padded))
        # Packs embedded source symbols into a PackedSequence.
        packed = nn.utils.rnn.pack_padded_sequence(embedded, source.lengths(), batch_first=True, enforce_sorted=False)
        # -> B x seq_len x encoder_dim, (h0, c0).
        packed_outs, (H, C) = self.module(packed)
        encoded, _ = nn.utils.rnn.pad_packed_sequence(packed_outs, batch_first=True, padding_value=self.pad_idx)
        return encoded


class Attention(nn.Module):
    """Attention module (Luong et al. 2015, concat attention)."""

    def __init__(self, encoder_outputs_size, hidden_size):
        super().__init__()
        # MLP to run over encoder_outputs.
        self.M = nn.Linear(encoder_outputs_size + hidden_size, hidden_size)
        self.V = nn.Linear(hidden_size, 1)

    def forward(self, hidden, encoder_outputs, mask):
        # Gets last hidden layer.
        hidden = hidden[:, -1, :].unsqueeze(1)
        # Repeats hidden to be copied for each encoder output of shape B x seq_len x decoder_dim.
        hidden = hidden.repeat(1, encoder_outputs.size(1), 1)
        # Gets the scores of each time step in the output.
        attention_scores = self.score(hidden, encoder_outputs)
        # Masks the scores with -inf at each padded character.
        attention_scores.data.masked_fill_(mask, -math.inf)
        # -> B x 1 x seq_len
        weights = nn.functional.softmax(attention_scores, dim=1).unsqueeze(1)
        # -> B x 1 x decoder_dim
        weighted = torch.bmm(weights, encoder_outputs)
        return weighted, weights

    def score(self, hidden, encoder_outputs):
        concat = torch.cat([encoder_outputs, hidden], 2)
        m = self.M(concat)
        scores = self.V(torch.tanh((m)))
        return scores.squeeze(2)


class LSTMDecoder(nn.Module):
    def __init__(self, num_embeddings, embedding_size, hidden_size, pad_idx, dropout, decoder_input_size, layers=1):
        super().__init__()
        self.embeddings = nn.Embedding(num_embeddings, embedding_size)
        nn.init.constant_(self.embeddings.weight[pad_idx], 0.0)
        self.dropout_layer = nn.Dropout(p=dropout)
        self.module = nn.LSTM(decoder_input_size + embedding_size, hidden_size, num_layers=layers, batch_first=True)

    def forward(self, symbol, last_hiddens, encoder_out, encoder_mask):
        embedded = self.dropout_layer(self.embeddings(symbol))
        # Get the index of the last unmasked tensor.
        last_encoder_out_idxs = (~encoder_mask).sum(dim=1) - 1
        last_encoder_out_idxs = last_encoder_out_idxs.view(encoder_out.size(0), 1, 1)
        last_encoder_out_idxs = last_encoder_out_idxs.expand(-1, -1, encoder_out.size(-1))
        # -> B x 1 x encoder_dim.
        last_encoder_out = torch.gather(encoder_out, 1, last_encoder_out_idxs)
        output, hiddens = self.module(torch.cat((embedded, last_encoder_out), 2), last_hiddens)
        output = self.dropout_layer(output)
        return output, hiddens


class LSTMAttentiveDecoder(LSTMDecoder):
    def __init__(self, *args, attention_input_size, **kwargs):
        super().__init__(*args, **kwargs)
        self.attention = Attention(attention_input_size, self.module.hidden_size)

    def forward(self, symbol, last_hiddens, encoder_out, encoder_mask):
        embedded = self.dropout_layer(self.embeddings(symbol))
        last_h0, last_c0 = last_hiddens
        context, attention_weights = self.attention(last_h0.transpose(0, 1), encoder_out, encoder_mask)
        output, hiddens = self.module(torch.cat((embedded, context), 2), last_hiddens)
        output = self.dropout_layer(output)
        return output, hiddens


class LSTMEncoderDecoder(nn.Module):
    def __init__(self, *, pad_idx, start_idx, end_idx, vocab_size, target_vocab_size, learning_rate=0.001,
                 beta1=0.9, beta2=0.999, dropout=0.2, label_smoothing=None, teacher_forcing=True,
                 max_target_length=128, decoder_layers=1, embedding_size=128, encoder_layers=1, hidden_size=512):
        super().__init__()
        self.pad_idx, self.start_idx, self.end_idx = pad_idx, start_idx, end_idx
        self.target_vocab_size = target_vocab_size
        self.learning_rate, self.beta1, self.beta2 = learning_rate, beta1, beta2
        self.label_smoothing = label_smoothing
        self.teacher_forcing = teacher_forcing
        self.max_target_length = max_target_length
        self.decoder_layers = decoder_layers
        self.hidden_size = hidden_size
        self.evaluator = Evaluator()
        self.loss_func = nn.NLLLoss(ignore_index=self.pad_idx, reduction="mean")
        self.source_encoder = LSTMEncoder(vocab_size, embedding_size, hidden_size, pad_idx, dropout, encoder_layers)
        self.decoder = LSTMAttentiveDecoder(target_vocab_size, embedding_size, hidden_size, pad_idx, dropout,
                                            self.source_encoder.output_size, decoder_layers,
                                            attention_input_size=self.source_encoder.output_size)
        # Initial hidden state whose parameters are shared across all examples.
        self.h0 = nn.Parameter(torch.rand(self.hidden_size))
        self.c0 = nn.Parameter(torch.rand(self.hidden_size))
        self.classifier = nn.Linear(self.hidden_size, self.target_vocab_size)
        self.log_softmax = nn.LogSoftmax(dim=2)
        self.logged: Dict[str, float] = {}

    def log(self, name, value, **kwargs):
        self.logged[name] = value.item() if isinstance(value, torch.Tensor) else value

    def init_hiddens(self, batch_size: int, num_layers: int) -> Tuple[torch.Tensor, torch.Tensor]:
        return (self.h0.repeat(num_layers, batch_size, 1), self.c0.repeat(num_layers, batch_size, 1))

    def _get_predicted(self, predictions: torch.Tensor) -> torch.Tensor:
        assert len(predictions.size()) == 3
        _, indices = torch.max(predictions, dim=2)
        return indices

    def decode(self, encoder_out, encoder_mask, teacher_forcing: bool, target: Optional[torch.Tensor] = None):
        batch_size = encoder_mask.shape[0]
        decoder_hiddens = self.init_hiddens(batch_size, self.decoder_layers)
        # Feed in the first decoder input, as a start tag.
        decoder_input = torch.tensor([self.start_idx], dtype=torch.long).repeat(batch_size).unsqueeze(1)
        predictions = []
        num_steps = target.size(1) if target is not None else self.max_target_length
        # Tracks when each sequence has decoded an EOS.
        finished = torch.zeros(batch_size)
        for t in range(num_steps):
            decoder_output, decoder_hiddens = self.decoder(decoder_input, decoder_hiddens, encoder_out, encoder_mask)
            logits = self.classifier(decoder_output)
            output = self.log_softmax(logits)
            predictions.append(output.squeeze(1))
            # In teacher forcing mode the next input is the gold symbol for this step.
            if teacher_forcing:
                decoder_input = target[:, t].unsqueeze(1)
            # Otherwise we pass the top pred to the next timestep (greedy decoding).
            else:
                decoder_input = self._get_predicted(output)
                finished = torch.logical_or(finished, (decoder_input == self.end_idx))
                if finished.all():
                    if target is None or decoder_input.size(-1) >= target.size(-1):
                        break
        predictions = torch.stack(predictions)
        return predictions

    def forward(self, batch: PaddedBatch) -> torch.Tensor:
        encoder_out = self.source_encoder(batch.source)
        predictions = self.decode(
            encoder_out,
            batch.source.mask,
            self.teacher_forcing if self.training else False,
            batch.target.padded if batch.target else None,
        )
        # -> B x seq_len x target_vocab_size.
        predictions = predictions.transpose(0, 1)
        return predictions

    def training_step(self, batch: PaddedBatch, batch_idx: int) -> torch.Tensor:
        # -> B x seq_len x target_vocab_size.
        predictions = self(batch)
        target_padded = batch.target.padded
        # -> B x target_vocab_size x seq_len. For loss.
        predictions = predictions.transpose(1, 2)
        loss = self.loss_func(predictions, target_padded)
        self.log("train_loss", loss, batch_size=len(batch), on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch: PaddedBatch, batch_idx: int) -> Dict:
        # Greedy decoding.
        # -> B x seq_len x target_vocab_size.
        target_padded = batch.target.padded
        greedy_predictions = self(batch)
        accuracy = self.evaluator.val_accuracy(greedy_predictions, target_padded, self.end_idx, self.pad_idx)
        # -> B x target_vocab_size x seq_len. For loss.
        greedy_predictions = greedy_predictions.transpose(1, 2)
        # Truncates predictions to the size of the target.
        greedy_predictions = torch.narrow(greedy_predictions, 2, 0, target_padded.size(1))
        loss = self.loss_func(greedy_predictions, target_padded)
        return {"val_accuracy": accuracy, "val_loss": loss}

    def validation_epoch_end(self, validation_step_outputs: Dict) -> Dict:
        """Computes average loss and average accuracy."""
        keys = validation_step_outputs[0].keys()
        # Shortens name to do comprehension below.
        V = validation_step_outputs
        metrics = {k: sum([v[k] for v in V]) / len(V) for k in keys}
        for metric, value in metrics.items():
            self.log(metric, value, prog_bar=True)
        return metrics

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.learning_rate, betas=(self.beta1, self.beta2))


def make_pairs(n, rng, table):
    pairs = []
    for _ in range(n):
        src = rng.randint(3, VOCAB, size=rng.randint(3, 9))
        tgt = table[src[::-1]]
        pairs.append((torch.tensor(src.tolist()), torch.tensor(tgt.tolist() + [END])))
    return pairs


def collate(items) -> PaddedBatch:
    return PaddedBatch(PaddedTensor([s for s, _ in items], PAD), PaddedTensor([t for _, t in items], PAD))


def loader(pairs, batch_size, shuffle, rng=None):
    order = rng.permutation(len(pairs)) if shuffle else np.arange(len(pairs))
    return [collate([pairs[i] for i in order[s:s + batch_size]]) for s in range(0, len(pairs), batch_size)]


def train(max_epochs=12, batch_size=32, seed=0):
    torch.manual_seed(seed)
    rng = np.random.RandomState(seed)
    table = np.concatenate([np.arange(3), 3 + rng.permutation(LETTERS)])
    train_pairs = make_pairs(640, rng, table)
    dev_pairs = make_pairs(33, rng, table)
    model = LSTMEncoderDecoder(pad_idx=PAD, start_idx=START, end_idx=END, vocab_size=VOCAB,
                               target_vocab_size=VOCAB, embedding_size=32, hidden_size=64, dropout=0.2,
                               learning_rate=0.003)
    optimizer = model.configure_optimizers()
    best_score, best_path, best_state = -1.0, None, None
    for epoch in range(max_epochs):
        model.train()
        losses = []
        for batch_idx, batch in enumerate(loader(train_pairs, batch_size, True, rng)):
            optimizer.zero_grad()
            loss = model.training_step(batch, batch_idx)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        model.eval()
        with torch.no_grad():
            outputs = [model.validation_step(b, i) for i, b in enumerate(loader(dev_pairs, batch_size, False))]
            metrics = model.validation_epoch_end(outputs)
        # ModelCheckpoint(monitor="val_accuracy", mode="max", save_top_k=1).
        if metrics["val_accuracy"] > best_score:
            best_score = metrics["val_accuracy"]
            best_path = f"model-epoch={epoch:02d}-val_accuracy={best_score:.2f}.ckpt"
            best_state = copy.deepcopy(model.state_dict())
        print(f"Epoch {epoch}: train_loss {np.mean(losses):.4f}  val_loss {float(metrics['val_loss']):.4f}  "
              f"val_accuracy {metrics['val_accuracy']:.4f}")
    print(f"Best checkpoint: {best_path}")
    return best_state


if __name__ == "__main__":
    torch.set_num_threads(1)
    train()
