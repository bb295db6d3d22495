"""Token classification (NER) fine-tuning: word-level tags aligned to tokens (-100 on special
tokens), DataCollatorForTokenClassification padding labels with -100, BertForTokenClassification,
AdamW + linear schedule, evaluation in eval() + no_grad with argmax predictions compared only where
labels != -100. Most tags are "O" (id 0), the real-data shape the PAD check must not mistake for padding.

Source: huggingface/transformers, examples/pytorch/token-classification/run_ner_no_trainer.py,
commit f576078df320ad6ac38e7991bb2bb52521d22d7b.
Reduced: a 2-layer BERT (hidden 16) from config, the in-memory tokenizer of _hf.py, 24 random
sentences with 5 tags (80 % "O"), batch 8.

Mutation: `num_labels=4` while the tags run 0..4 (the label list counted without 'O'): a target is out of range inside BertForTokenClassification's cross_entropy.
Expected: error data.target_range (target 4 for 4 classes) at `outputs = model(**batch)`.
"""

import random

import torch
from torch.utils.data import DataLoader

NEEDS = ("transformers",)


def build():
    from transformers import BertForTokenClassification, DataCollatorForTokenClassification, get_scheduler

    from corpus import _hf

    torch.manual_seed(0)
    rng = random.Random(0)
    tokenizer = _hf.tokenizer()
    model = BertForTokenClassification(_hf.bert_config(len(tokenizer), num_labels=4))

    def tokenize_and_align_labels(words, tags):
        enc = tokenizer(words, is_split_into_words=True)
        labels, previous_word_idx = [], None
        for word_idx in enc.word_ids():
            if word_idx is None:
                labels.append(-100)
            elif word_idx != previous_word_idx:
                labels.append(tags[word_idx])
            else:
                labels.append(-100)
            previous_word_idx = word_idx
        return dict(enc, labels=labels)

    data = []
    for s in _hf.sentences(32, seed=5):
        words = s.split()
        tags = [0 if rng.random() < 0.8 else rng.randint(1, 4) for _ in words]
        data.append(tokenize_and_align_labels(words, tags))
    data_collator = DataCollatorForTokenClassification(tokenizer)
    train_dataloader = DataLoader(data[:24], shuffle=True, collate_fn=data_collator, batch_size=8)
    eval_dataloader = DataLoader(data[24:], collate_fn=data_collator, batch_size=8)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4)
    lr_scheduler = get_scheduler(name="linear", optimizer=optimizer, num_warmup_steps=0, num_training_steps=3)

    def train():
        model.train()
        for step, batch in enumerate(train_dataloader):
            outputs = model(**batch)  # <- bug
            loss = outputs.loss
            loss.backward()
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
        model.eval()
        correct = total = 0
        for step, batch in enumerate(eval_dataloader):
            with torch.no_grad():
                outputs = model(**batch)
            predictions = outputs.logits.argmax(dim=-1)
            labels = batch["labels"]
            keep = labels != -100
            correct += (predictions[keep] == labels[keep]).sum().item()
            total += keep.sum().item()
        return correct / total

    return [model], [optimizer], train


if __name__ == "__main__":
    build()[2]()
