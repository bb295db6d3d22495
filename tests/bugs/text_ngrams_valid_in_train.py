"""Text classification with nn.EmbeddingBag: variable-length token lists concatenated with offsets
by collate_batch, uniform init, CrossEntropyLoss, SGD lr 5 with StepLR, clip_grad_norm_(0.1),
evaluate() in eval() + no_grad with argmax accuracy, the scheduler stepped when validation
accuracy stalls.

Source: pytorch/tutorials, beginner_source/text_sentiment_ngrams_tutorial.py,
commit 5130967035247c8343376ee69f49d6e10d61eaca.
Reduced: vocab 50, embed 16, 4 classes, 24 random "texts" of 3..10 tokens, batch 8, 2 epochs.

Mutation: the training DataLoader built over the whole dataset instead of `split_train_` from the tutorial's `random_split`: the validation texts are trained on.
Expected: error data.heldout_trained at the `random_split(...)` line.
"""

import random

import torch
from torch import nn
from torch.utils.data import DataLoader, random_split


class TextClassificationModel(nn.Module):
    def __init__(self, vocab_size, embed_dim, num_class):
        super(TextClassificationModel, self).__init__()
        self.embedding = nn.EmbeddingBag(vocab_size, embed_dim, sparse=False)
        self.fc = nn.Linear(embed_dim, num_class)
        self.init_weights()

    def init_weights(self):
        initrange = 0.5
        self.embedding.weight.data.uniform_(-initrange, initrange)
        self.fc.weight.data.uniform_(-initrange, initrange)
        self.fc.bias.data.zero_()

    def forward(self, text, offsets):
        embedded = self.embedding(text, offsets)
        return self.fc(embedded)


def collate_batch(batch):
    label_list, text_list, offsets = [], [], [0]
    for _label, _text in batch:
        label_list.append(_label)
        processed_text = torch.tensor(_text, dtype=torch.int64)
        text_list.append(processed_text)
        offsets.append(processed_text.size(0))
    label_list = torch.tensor(label_list, dtype=torch.int64)
    offsets = torch.tensor(offsets[:-1]).cumsum(dim=0)
    text_list = torch.cat(text_list)
    return label_list, text_list, offsets


def build():
    random.seed(0)
    torch.manual_seed(0)
    data = [(random.randrange(4), [random.randrange(50) for _ in range(random.randint(3, 10))]) for _ in range(32)]
    split_train_, split_valid_ = random_split(data, [24, 8])  # <- bug
    train_dataloader = DataLoader(data, batch_size=8, shuffle=True, collate_fn=collate_batch)
    valid_dataloader = DataLoader(split_valid_, batch_size=8, shuffle=False, collate_fn=collate_batch)
    model = TextClassificationModel(50, 16, 4)
    criterion = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=5)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1.0, gamma=0.1)

    def train_epoch(dataloader):
        model.train()
        total_acc, total_count = 0, 0
        for idx, (label, text, offsets) in enumerate(dataloader):
            optimizer.zero_grad()
            predicted_label = model(text, offsets)
            loss = criterion(predicted_label, label)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
            optimizer.step()
            total_acc += (predicted_label.argmax(1) == label).sum().item()
            total_count += label.size(0)

    def evaluate(dataloader):
        model.eval()
        total_acc, total_count = 0, 0
        with torch.no_grad():
            for idx, (label, text, offsets) in enumerate(dataloader):
                predicted_label = model(text, offsets)
                loss = criterion(predicted_label, label)
                total_acc += (predicted_label.argmax(1) == label).sum().item()
                total_count += label.size(0)
        return total_acc / total_count

    def train():
        total_accu = None
        for epoch in range(1, 3):
            train_epoch(train_dataloader)
            accu_val = evaluate(valid_dataloader)
            if total_accu is not None and total_accu > accu_val:
                scheduler.step()
            else:
                total_accu = accu_val

    return [model], [optimizer], train


if __name__ == "__main__":
    build()[2]()
