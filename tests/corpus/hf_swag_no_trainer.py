"""Multiple-choice fine-tuning: each example flattened into num_choices (context, ending) pairs,
a DataCollatorForMultipleChoice-style collator that pads the flattened features and unflattens them
to (batch, num_choices, seq), BertForMultipleChoice with labels, AdamW + linear schedule, and an
evaluation in eval() + no_grad with predictions = logits.argmax(dim=-1).

Source: huggingface/transformers, examples/pytorch/multiple-choice/run_swag_no_trainer.py,
commit 7d2c4637d272ef552c50e2bef82bd9a6f9ebdc6a.
Reduced: a 2-layer BERT (hidden 16) from config, the in-memory tokenizer of _hf.py, 16 random
examples with 4 endings, batch 4.
"""

import torch
from torch.utils.data import DataLoader

NEEDS = ("transformers",)


def build():
    from transformers import BertForMultipleChoice, get_scheduler

    from corpus import _hf

    torch.manual_seed(0)
    tokenizer = _hf.tokenizer()
    model = BertForMultipleChoice(_hf.bert_config(len(tokenizer)))
    num_choices = 4
    contexts = _hf.sentences(20, seed=6, hi=6)
    endings = _hf.sentences(80, seed=7, hi=5)
    examples = []
    for i, ctx in enumerate(contexts):
        enc = tokenizer([ctx] * num_choices, endings[i * 4:(i + 1) * 4])
        examples.append({k: v for k, v in enc.items()} | {"label": i % num_choices})

    def collate(features):
        labels = [f.pop("label") for f in features]
        batch_size = len(features)
        flattened = [{k: v[i] for k, v in f.items()} for f in features for i in range(num_choices)]
        batch = tokenizer.pad(flattened, padding=True, return_tensors="pt")
        batch = {k: v.view(batch_size, num_choices, -1) for k, v in batch.items()}
        batch["labels"] = torch.tensor(labels, dtype=torch.int64)
        return batch

    train_dataloader = DataLoader([dict(e) for e in examples[:16]], shuffle=True, collate_fn=collate, batch_size=4)
    eval_dataloader = DataLoader([dict(e) for e in examples[16:]], collate_fn=collate, batch_size=4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4)
    lr_scheduler = get_scheduler(name="linear", optimizer=optimizer, num_warmup_steps=0, num_training_steps=4)

    def train():
        model.train()
        for step, batch in enumerate(train_dataloader):
            outputs = model(**batch)
            loss = outputs.loss
            loss.backward()
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
        model.eval()
        correct = 0
        for step, batch in enumerate(eval_dataloader):
            with torch.no_grad():
                outputs = model(**batch)
            predictions = outputs.logits.argmax(dim=-1)
            correct += (predictions == batch["labels"]).sum().item()
        return correct

    return [model], [optimizer], train


if __name__ == "__main__":
    build()[2]()
