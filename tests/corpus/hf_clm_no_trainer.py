"""Causal-LM fine-tuning: texts grouped into blocks (`group_texts`), labels = input_ids (the model
shifts inside), `default_data_collator`, gradient accumulation with `loss / accumulation_steps`
and a step on `step % accumulation_steps == 0`, perplexity evaluation.

Source: huggingface/transformers, examples/pytorch/language-modeling/run_clm_no_trainer.py,
commit 3c354ea20e347edb9413ada30911e9fdc242719d.
Reduced: a 2-layer GPT-2 (n_embd 16) from config, in-memory tokenizer, block_size 8, 6 batches.
"""

import math
from itertools import chain

import torch
from torch.utils.data import DataLoader

NEEDS = ("transformers",)


def group_texts(examples, block_size):
    concatenated = {k: list(chain(*[e[k] for e in examples])) for k in examples[0].keys()}
    total_length = len(concatenated["input_ids"]) // block_size * block_size
    result = [{k: t[i: i + block_size] for k, t in concatenated.items()} for i in range(0, total_length, block_size)]
    for r in result:
        r["labels"] = list(r["input_ids"])
    return result


def build():
    from transformers import GPT2LMHeadModel, default_data_collator, get_scheduler

    from corpus import _hf

    torch.manual_seed(0)
    tokenizer = _hf.tokenizer()
    model = GPT2LMHeadModel(_hf.gpt2_config(len(tokenizer)))
    tokenized = [dict(tokenizer(s)) for s in _hf.sentences(40)]
    lm = group_texts(tokenized, 8)
    train_dataset, eval_dataset = lm[:-8], lm[-8:]
    train_dataloader = DataLoader(train_dataset, shuffle=True, collate_fn=default_data_collator, batch_size=4)
    eval_dataloader = DataLoader(eval_dataset, collate_fn=default_data_collator, batch_size=4)
    no_decay = ["bias", "ln_"]
    optimizer_grouped_parameters = [
        {"params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)], "weight_decay": 0.01},
        {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(optimizer_grouped_parameters, lr=5e-4)
    gradient_accumulation_steps = 2
    lr_scheduler = get_scheduler(name="linear", optimizer=optimizer, num_warmup_steps=0, num_training_steps=8)

    def train():
        for epoch in range(1):
            model.train()
            for step, batch in enumerate(train_dataloader):
                if step >= 7:
                    break
                outputs = model(**batch)
                loss = outputs.loss
                loss = loss / gradient_accumulation_steps
                loss.backward()
                if step % gradient_accumulation_steps == 0 or step == len(train_dataloader) - 1:
                    optimizer.step()
                    lr_scheduler.step()
                    optimizer.zero_grad()
            model.eval()
            losses = []
            for step, batch in enumerate(eval_dataloader):
                with torch.no_grad():
                    outputs = model(**batch)
                loss = outputs.loss
                losses.append(loss.repeat(4))
            losses = torch.cat(losses)
            try:
                perplexity = math.exp(torch.mean(losses))
            except OverflowError:
                perplexity = float("inf")
            print(perplexity)

    return [model], [optimizer], train


if __name__ == "__main__":
    build()[2]()
