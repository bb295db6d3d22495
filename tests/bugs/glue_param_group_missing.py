"""Sequence classification fine-tuning: tokenized sentence pairs padded per batch by
DataCollatorWithPadding (attention_mask, token_type_ids), BertForSequenceClassification with labels,
AdamW with no decay for bias / LayerNorm, a linear schedule, gradient accumulation
(step % accumulation_steps == 0 or the last step), and evaluation in eval() + no_grad with
predictions = outputs.logits.argmax(dim=-1) fed to an accuracy metric.

Source: huggingface/transformers, examples/pytorch/text-classification/run_glue_no_trainer.py,
commit a22a4378d97d06b7a1d9abad6e0086d30fdea199.
Reduced: a 2-layer BERT (hidden 16) from config, the in-memory tokenizer of _hf.py, 24 random
sentence pairs with 2 labels, batch 8, accumulation 2; evaluate's metric is the same argmax count.

Mutation: the weight-decay groups built from `model.bert.named_parameters()` (the backbone) instead of `model.named_parameters()`: the new classifier head is in no param group.
Expected: error gradient.not_in_optimizer in module classifier (classifier.weight, classifier.bias), at the `AdamW(...)` line.
"""

import torch
from torch.utils.data import DataLoader

NEEDS = ("transformers",)


def build():
    from transformers import BertForSequenceClassification, DataCollatorWithPadding, get_scheduler

    from corpus import _hf

    torch.manual_seed(0)
    tokenizer = _hf.tokenizer()
    model = BertForSequenceClassification(_hf.bert_config(len(tokenizer), num_labels=2))
    a, b = _hf.sentences(32, seed=3, hi=8), _hf.sentences(32, seed=4, hi=8)
    data = [dict(tokenizer(x, y), labels=i % 2) for i, (x, y) in enumerate(zip(a, b))]
    data_collator = DataCollatorWithPadding(tokenizer)
    train_dataloader = DataLoader(data[:24], shuffle=True, collate_fn=data_collator, batch_size=8)
    eval_dataloader = DataLoader(data[24:], collate_fn=data_collator, batch_size=8)
    no_decay = ["bias", "LayerNorm.weight"]
    optimizer_grouped_parameters = [
        {"params": [p for n, p in model.bert.named_parameters() if not any(nd in n for nd in no_decay)], "weight_decay": 0.01},
        {"params": [p for n, p in model.bert.named_parameters() if any(nd in n for nd in no_decay)], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(optimizer_grouped_parameters, lr=5e-4)  # <- bug
    gradient_accumulation_steps = 2
    lr_scheduler = get_scheduler(name="linear", optimizer=optimizer, num_warmup_steps=0, num_training_steps=4)

    def train():
        for epoch in range(2):
            model.train()
            for step, batch in enumerate(train_dataloader):
                outputs = model(**batch)
                loss = outputs.loss
                loss = loss / gradient_accumulation_steps
                loss.backward()
                if step % gradient_accumulation_steps == 0 or step == len(train_dataloader) - 1:
                    optimizer.step()
                    lr_scheduler.step()
                    optimizer.zero_grad()
            model.eval()
            correct = total = 0
            for step, batch in enumerate(eval_dataloader):
                with torch.no_grad():
                    outputs = model(**batch)
                predictions = outputs.logits.argmax(dim=-1)
                correct += (predictions == batch["labels"]).sum().item()
                total += len(predictions)
        return correct / total

    return [model], [optimizer], train


if __name__ == "__main__":
    build()[2]()
