"""Causal-LM training with gradient checkpointing switched on the way the Trainer scripts do it
(`--gradient_checkpointing`, `gradient_checkpointing_kwargs={"use_reentrant": True}`): the
reentrant `torch.utils.checkpoint` re-runs each block inside backward and calls backward on
detached copies of the block inputs, which require grad and are no parameters.

Source: huggingface/transformers, examples/pytorch/language-modeling/run_clm.py (the model
setup, with TrainingArguments.gradient_checkpointing), commit 0851a87dd4a49f695c1c0063d2b9d5bd2c844689.
Reduced: a 2-layer GPT-2 from config, random token blocks of 8, a plain AdamW loop for the Trainer.
"""

import torch

NEEDS = ("transformers",)


def build():
    from transformers import GPT2LMHeadModel

    from corpus import _hf

    torch.manual_seed(0)
    tokenizer = _hf.tokenizer()
    model = GPT2LMHeadModel(_hf.gpt2_config(len(tokenizer)))
    model.config.use_cache = False
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4)
    blocks = torch.randint(5, len(tokenizer), (4, 4, 8))

    def train():
        model.train()
        for input_ids in blocks:
            outputs = model(input_ids=input_ids, labels=input_ids)
            outputs.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()

    return [model], [optimizer], train


if __name__ == "__main__":
    build()[2]()
