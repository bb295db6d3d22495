# Source: ShannonAI/dice_loss_for_NLP, loss/dice_loss.py (DiceLoss), tasks/pos/train.py (compute_loss, training_step, validation_step), commit d437bb999185535df46fdb74d1f2f57161331b44
# Report: https://github.com/ShannonAI/dice_loss_for_NLP/issues/8
# Part-of-speech tagging trained with the repository's DiceLoss (with_logits, smooth 1e-4,
# alpha 0, reduction mean) over the flattened token logits, with the token mask passed so that
# padding positions do not count. The BERT encoder becomes an embedding + BiLSTM tagger over a
# synthetic tagged language (12 tags, 300 word types, sentences of 6-20 tokens padded to 24);
# Lightning, the tokenizer and the metric classes are replaced by a plain loop and token accuracy.
from typing import Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)


class DiceLoss(nn.Module):
    def __init__(self,
                 smooth: Optional[float] = 1e-4,
                 square_denominator: Optional[bool] = False,
                 with_logits: Optional[bool] = True,
                 ohem_ratio: float = 0.0,
                 alpha: float = 0.0,
                 reduction: Optional[str] = "mean",
                 index_label_position=True) -> None:
        super(DiceLoss, self).__init__()

        self.reduction = reduction
        self.with_logits = with_logits
        self.smooth = smooth
        self.square_denominator = square_denominator
        self.ohem_ratio = ohem_ratio
        self.alpha = alpha
        self.index_label_position = index_label_position

    def forward(self, input: Tensor, target: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        logits_size = input.shape[-1]

        if logits_size != 1:
            loss = self._multiple_class(input, target, logits_size, mask=mask)
        else:
            raise NotImplementedError

        if self.reduction == "mean":
            return loss.mean()
        if self.reduction == "sum":
            return loss.sum()
        return loss

    def _compute_dice_loss(self, flat_input, flat_target):
        flat_input = ((1 - flat_input) ** self.alpha) * flat_input
        interection = torch.sum(flat_input * flat_target, -1)
        if not self.square_denominator:
            loss = 1 - ((2 * interection + self.smooth) /
                        (flat_input.sum() + flat_target.sum() + self.smooth))
        else:
            loss = 1 - ((2 * interection + self.smooth) /
                        (torch.sum(torch.square(flat_input, ), -1) + torch.sum(torch.square(flat_target), -1) + self.smooth))

        return loss

    def _multiple_class(self, input, target, logits_size, mask=None):
        flat_input = input
        flat_target = F.one_hot(target, num_classes=logits_size).float() if self.index_label_position else target.float()
        flat_input = torch.nn.Softmax(dim=1)(flat_input) if self.with_logits else flat_input

        if mask is not None:
            mask = mask.float()
            flat_input = flat_input * mask
            flat_target = flat_target * mask
        else:
            mask = torch.ones_like(target)

        loss = None
        for label_idx in range(logits_size):
            flat_input_idx = flat_input[:, label_idx]
            flat_target_idx = flat_target[:, label_idx]

            loss_idx = self._compute_dice_loss(flat_input_idx.view(-1, 1), flat_target_idx.view(-1, 1))
            if loss is None:
                loss = loss_idx
            else:
                loss += loss_idx
        return loss


NUM_TAGS = 12
VOCAB = 300
MAX_LEN = 24


class Tagger(nn.Module):
    def __init__(self, num_classes=NUM_TAGS, vocab=VOCAB, dim=64):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, padding_idx=0)
        self.lstm = nn.LSTM(dim, dim, batch_first=True, bidirectional=True)
        self.classifier = nn.Linear(2 * dim, num_classes)

    def forward(self, input_ids, attention_mask):
        h, _ = self.lstm(self.emb(input_ids))
        return self.classifier(h)


def make_lexicon(rng):
    word_tag = rng.randint(0, NUM_TAGS, VOCAB)
    word_tag[0] = 0
    ambiguous = rng.rand(VOCAB) < 0.3
    return word_tag, ambiguous


def make_corpus(n, rng, word_tag, ambiguous):
    ids = np.zeros((n, MAX_LEN), dtype=np.int64)
    tags = np.zeros((n, MAX_LEN), dtype=np.int64)
    mask = np.zeros((n, MAX_LEN), dtype=np.int64)
    for i in range(n):
        length = rng.randint(6, 21)
        words = rng.randint(1, VOCAB, length)
        t = word_tag[words].copy()
        # an ambiguous word takes the tag that follows its left neighbour's tag
        for j in range(1, length):
            if ambiguous[words[j]]:
                t[j] = (t[j - 1] + 1) % NUM_TAGS
        ids[i, :length], tags[i, :length], mask[i, :length] = words, t, 1
    return torch.from_numpy(ids), torch.from_numpy(tags), torch.from_numpy(mask)


num_classes = NUM_TAGS
loss_fct = DiceLoss(with_logits=True, smooth=1e-4, ohem_ratio=0.0, alpha=0.0,
                    square_denominator=False, index_label_position=True, reduction="mean")


def compute_loss(logits, labels, attention_mask):
    loss = loss_fct(logits.view(-1, num_classes), labels.view(-1), mask=attention_mask.view(-1))
    return loss


def token_accuracy(model, ids, tags, mask):
    model.eval()
    with torch.no_grad():
        pred = model(ids, mask).argmax(-1)
    m = mask.bool()
    return (pred[m] == tags[m]).float().mean().item()


if __name__ == "__main__":
    rng = np.random.RandomState(0)
    word_tag, ambiguous = make_lexicon(rng)
    train_ids, train_tags, train_mask = make_corpus(2000, rng, word_tag, ambiguous)
    dev_ids, dev_tags, dev_mask = make_corpus(400, rng, word_tag, ambiguous)
    model = Tagger()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    batch_size = 32
    for epoch in range(6):
        model.train()
        perm = torch.randperm(len(train_ids))
        total = 0.0
        for b in range(0, len(perm), batch_size):
            idx = perm[b:b + batch_size]
            output_logits = model(train_ids[idx], train_mask[idx])
            loss = compute_loss(output_logits, train_tags[idx], train_mask[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
        acc = token_accuracy(model, dev_ids, dev_tags, dev_mask)
        print(f"epoch {epoch}: train dice loss {total / (len(perm) // batch_size):.4f} dev token acc {acc:.4f}")
