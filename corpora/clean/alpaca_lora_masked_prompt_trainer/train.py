# Source: tloen/alpaca-lora, finetune.py + utils/prompter.py + templates/alpaca.json, commit 8bb8579e403dc78e37fe81ffbb253c413007323f
# Alpaca-LoRA instruction tuning: LoRA adapters on q_proj/v_proj of a frozen LLaMA, prompt tokens labelled -100
# (train_on_inputs=False), transformers.Trainer with gradient accumulation, DataCollatorForSeq2Seq, warmup_steps=100.
# Suspicious-looking but correct patterns kept from the original:
#   - every base weight is frozen (prepare_model_for_int8_training) and only lora_A/lora_B train; lora_B starts at 0
#     so the adapted model equals the base model at step 0 and lora_A gets exactly zero gradient on the first step
#   - enable_input_require_grads(): a forward hook makes the frozen embedding output require grad so that
#     (non-reentrant) gradient checkpointing of frozen layers still back-propagates into the adapters
#   - lm_head wrapped in CastOutputToFloat (an nn.Sequential subclass) so logits are float32
#   - labels: the user-prompt span is -100 and DataCollatorForSeq2Seq pads labels with -100; pad_token_id = 0 (unk)
#     with left padding; several examples lose most of their tokens to the mask
#   - warmup_steps=100 while the whole run is 24 optimizer steps: the LR never leaves the warm-up ramp
#   - gradient_accumulation_steps = batch_size // micro_batch_size (4 micro-batches per optimizer step)
#   - model.state_dict monkey-patched to return only the adapter weights (get_peft_model_state_dict)
# Adaptation: LLaMA-7B (8-bit) + LlamaTokenizer replaced by a randomly initialised 2-layer LlamaForCausalLM
# (transformers, tiny config) and a word-level tokenizer built in the script; peft's LoraConfig/get_peft_model/
# prepare_model_for_int8_training replaced by minimal copies of the pieces used; the alpaca-cleaned dataset replaced by
# synthetic instruction/input/output triples (copy / reverse / sort words); learning_rate 3e-4 -> 1e-2; fp16=True -> False (CPU), torch.compile,
# wandb, DDP and saving removed; batch_size 128 -> 16, micro_batch_size 4, 2 epochs; val_set_size 2000 -> 48 with
# evaluation at the end of each epoch; checkpoints go to a temporary directory; group_by_length (gone from
# TrainingArguments in transformers 5) dropped; gradient_checkpointing_enable -> activation_checkpointing_enable.
import math
import tempfile

import numpy as np
import torch
import torch.nn as nn
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers

TEMPLATE = {
    "description": "Template used by Alpaca-LoRA.",
    "prompt_input": "Below is an instruction that describes a task, paired with an input that provides further context. Write a response that appropriately completes the request.\n\n### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n",
    "prompt_no_input": "Below is an instruction that describes a task. Write a response that appropriately completes the request.\n\n### Instruction:\n{instruction}\n\n### Response:\n",
    "response_split": "### Response:"
}


class Prompter(object):
    __slots__ = ("template", "_verbose")

    def __init__(self, template_name: str = "", verbose: bool = False):
        self._verbose = verbose
        self.template = TEMPLATE

    def generate_prompt(self, instruction, input=None, label=None) -> str:
        # returns the full prompt from instruction and optional input
        # if a label (=response, =output) is provided, it's also appended.
        if input:
            res = self.template["prompt_input"].format(
                instruction=instruction, input=input
            )
        else:
            res = self.template["prompt_no_input"].format(
                instruction=instruction
            )
        if label:
            res = f"{res}{label}"
        return res


# ---- minimal copies of the peft pieces used by finetune.py ----
class LoraLinear(nn.Module):
    def __init__(self, base_layer, r, lora_alpha, lora_dropout):
        super().__init__()
        self.base_layer = base_layer
        self.lora_dropout = nn.Dropout(p=lora_dropout)
        self.lora_A = nn.Linear(base_layer.in_features, r, bias=False)
        self.lora_B = nn.Linear(r, base_layer.out_features, bias=False)
        self.scaling = lora_alpha / r
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)

    def forward(self, x):
        result = self.base_layer(x)
        return result + self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling


class LoraConfig:
    def __init__(self, r, lora_alpha, target_modules, lora_dropout, bias="none", task_type="CAUSAL_LM"):
        self.r, self.lora_alpha, self.target_modules, self.lora_dropout = r, lora_alpha, target_modules, lora_dropout


def get_peft_model(model, config):
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if child_name in config.target_modules and isinstance(child, nn.Linear):
                setattr(module, child_name, LoraLinear(child, config.r, config.lora_alpha, config.lora_dropout))
    for n, p in model.named_parameters():
        p.requires_grad = "lora_" in n

    def print_trainable_parameters():
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        total = sum(p.numel() for p in model.parameters())
        print(f"trainable params: {trainable} || all params: {total} || trainable%: {100 * trainable / total:.4f}")
    model.print_trainable_parameters = print_trainable_parameters
    return model


def get_peft_model_state_dict(model, state_dict):
    return {k: v for k, v in state_dict.items() if "lora_" in k}


class CastOutputToFloat(nn.Sequential):
    def forward(self, x):
        return super().forward(x).to(torch.float32)


def prepare_model_for_int8_training(model, output_embedding_layer_name="lm_head"):
    for name, param in model.named_parameters():
        # freeze base model's layers
        param.requires_grad = False
    for name, param in model.named_parameters():
        # cast layer norm in fp32 for stability for 8bit models
        if param.ndim == 1:
            param.data = param.data.to(torch.float32)
    model.enable_input_require_grads()
    model.activation_checkpointing_enable()
    output_embedding_layer = getattr(model, output_embedding_layer_name)
    setattr(model, output_embedding_layer_name, CastOutputToFloat(output_embedding_layer))
    return model


# ---- synthetic stand-ins for the tokenizer and the alpaca data ----
WORDS = ["apple", "river", "stone", "cloud", "tiger", "lamp", "green", "seven", "paper", "music", "ocean", "glass"]
TASKS = {"Repeat the words.": lambda ws: ws, "Reverse the words.": lambda ws: ws[::-1],
         "Sort the words.": lambda ws: sorted(ws)}


def build_tokenizer(prompter):
    vocab_words = set()
    for t in list(TEMPLATE.values()) + list(TASKS):
        vocab_words.update(t.replace("{instruction}", " ").replace("{input}", " ").split())
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for w in sorted(vocab_words | set(WORDS)):
        vocab[w] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    from tokenizers.processors import TemplateProcessing
    tok.post_processor = TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                                eos_token="</s>")


def load_dataset(n, seed):
    rng = np.random.RandomState(seed)
    rows = []
    for _ in range(n):
        instruction = list(TASKS)[rng.randint(len(TASKS))]
        ws = [WORDS[i] for i in rng.choice(len(WORDS), size=rng.randint(3, 6), replace=False)]
        rows.append({"instruction": instruction, "input": " ".join(ws), "output": " ".join(TASKS[instruction](ws))})
    return rows


class ListDataset(torch.utils.data.Dataset):
    def __init__(self, rows):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]


def train(
    batch_size: int = 16,
    micro_batch_size: int = 4,
    num_epochs: int = 2,
    learning_rate: float = 1e-2,
    cutoff_len: int = 256,
    val_set_size: int = 48,
    lora_r: int = 8,
    lora_alpha: int = 16,
    lora_dropout: float = 0.05,
    lora_target_modules=("q_proj", "v_proj"),
    train_on_inputs: bool = False,  # if False, masks out inputs in loss
    add_eos_token: bool = False,
    group_by_length: bool = False,
):
    gradient_accumulation_steps = batch_size // micro_batch_size
    prompter = Prompter("alpaca")
    tokenizer = build_tokenizer(prompter)

    config = transformers.LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                                      max_position_embeddings=128, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model = transformers.LlamaForCausalLM(config)

    tokenizer.pad_token_id = (
        0  # unk. we want this to be different from the eos token
    )
    tokenizer.padding_side = "left"  # Allow batched inference

    def tokenize(prompt, add_eos_token=True):
        # there's probably a way to do this with the tokenizer settings
        # but again, gotta move fast
        result = tokenizer(
            prompt,
            truncation=True,
            max_length=cutoff_len,
            padding=False,
            return_tensors=None,
        )
        if (
            result["input_ids"][-1] != tokenizer.eos_token_id
            and len(result["input_ids"]) < cutoff_len
            and add_eos_token
        ):
            result["input_ids"].append(tokenizer.eos_token_id)
            result["attention_mask"].append(1)

        result["labels"] = result["input_ids"].copy()

        return result

    def generate_and_tokenize_prompt(data_point):
        full_prompt = prompter.generate_prompt(
            data_point["instruction"],
            data_point["input"],
            data_point["output"],
        )
        tokenized_full_prompt = tokenize(full_prompt)
        if not train_on_inputs:
            user_prompt = prompter.generate_prompt(
                data_point["instruction"], data_point["input"]
            )
            tokenized_user_prompt = tokenize(
                user_prompt, add_eos_token=add_eos_token
            )
            user_prompt_len = len(tokenized_user_prompt["input_ids"])

            if add_eos_token:
                user_prompt_len -= 1

            tokenized_full_prompt["labels"] = [
                -100
            ] * user_prompt_len + tokenized_full_prompt["labels"][
                user_prompt_len:
            ]  # could be sped up, probably
        return {k: tokenized_full_prompt[k] for k in ("input_ids", "attention_mask", "labels")}

    model = prepare_model_for_int8_training(model)

    config = LoraConfig(
        r=lora_r,
        lora_alpha=lora_alpha,
        target_modules=list(lora_target_modules),
        lora_dropout=lora_dropout,
        bias="none",
        task_type="CAUSAL_LM",
    )
    model = get_peft_model(model, config)
    model.print_trainable_parameters()  # Be more transparent about the % of trainable params.

    data = load_dataset(400, seed=0)
    train_data = ListDataset([generate_and_tokenize_prompt(d) for d in data[val_set_size:]])
    val_data = ListDataset([generate_and_tokenize_prompt(d) for d in data[:val_set_size]])

    output_dir = tempfile.mkdtemp(prefix="lora-alpaca-")
    trainer = transformers.Trainer(
        model=model,
        train_dataset=train_data,
        eval_dataset=val_data,
        args=transformers.TrainingArguments(
            per_device_train_batch_size=micro_batch_size,
            per_device_eval_batch_size=16,
            gradient_accumulation_steps=gradient_accumulation_steps,
            warmup_steps=100,
            num_train_epochs=num_epochs,
            learning_rate=learning_rate,
            fp16=False,
            logging_steps=4,
            optim="adamw_torch",
            eval_strategy="epoch",
            save_strategy="no",
            output_dir=output_dir,
            report_to="none",
            use_cpu=True,
            disable_tqdm=True,
            seed=0,
        ),
        data_collator=transformers.DataCollatorForSeq2Seq(
            tokenizer, pad_to_multiple_of=8, return_tensors="pt", padding=True
        ),
    )
    model.config.use_cache = False

    old_state_dict = model.state_dict
    model.state_dict = (
        lambda self, *_, **__: get_peft_model_state_dict(
            self, old_state_dict()
        )
    ).__get__(model, type(model))

    first = trainer.evaluate()["eval_loss"]
    print(f"eval_loss before training: {first:.4f}")
    trainer.train()
    last = trainer.evaluate()["eval_loss"]
    print(f"adapter tensors in state_dict: {len(model.state_dict())}")
    print(f"[summary] eval_loss first={first:.4f} last={last:.4f} decreased={last < first}")


def main():
    torch.manual_seed(0)
    transformers.logging.set_verbosity_error()
    train()


if __name__ == "__main__":
    main()
