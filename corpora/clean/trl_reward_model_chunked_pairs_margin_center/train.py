# Source: huggingface/trl, trl/trainer/reward_trainer.py, trl/trainer/utils.py, trl/trainer/reward_config.py, commit f2cd57710ae345ea6428ae95363267fcf38a3dc8
# https://github.com/huggingface/trl/blob/main/trl/trainer/reward_trainer.py
#
# Outcome reward model (Bradley-Terry): chosen and rejected sequences are concatenated in ONE batch by the
# collator (first half chosen, second half rejected, right-padded with pad = eos), the sequence-classification
# head's logit at the last non-pad token is the reward, the batch is torch.chunk'ed back into the two halves,
# loss = -logsigmoid(r_chosen - r_rejected - margin) + center_rewards_coefficient * mean((r_c + r_r)^2);
# metrics under no_grad. Runs on transformers.Trainer with gradient accumulation.
# Adaptation: trl is not installed, so DataCollatorForPreference, pad() and RewardTrainer.compute_loss are
# copied (the _BaseTrainer / PEFT / activation-offload / model-card plumbing is dropped, RewardTrainer
# subclasses transformers.Trainer directly); no hub model or dataset: a 2-layer GPT-2 with random
# weights (vocab 96) and synthetic tokenised preference pairs whose chosen answers use more "good" tokens.
import random
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn as nn
from transformers import GPT2Config, GPT2ForSequenceClassification, Trainer, TrainingArguments
from transformers.data.data_collator import DataCollatorMixin


def pad(
    tensors: list[torch.Tensor],
    padding_value: int = 0,
    padding_side: str = "right",
    pad_to_multiple_of: int | None = None,
) -> torch.Tensor:
    # Determine the maximum shape for each dimension
    output_shape = np.max([t.shape for t in tensors], 0).tolist()

    # Apply pad_to_multiple_of to the first (sequence) dimension
    if pad_to_multiple_of is not None:
        remainder = output_shape[0] % pad_to_multiple_of
        if remainder != 0:
            output_shape[0] += pad_to_multiple_of - remainder

    # Create an output tensor filled with the padding value
    output = torch.full((len(tensors), *output_shape), padding_value, dtype=tensors[0].dtype, device=tensors[0].device)

    for i, t in enumerate(tensors):
        if padding_side == "left":
            seq_start = output_shape[0] - t.shape[0]
        elif padding_side == "right":
            seq_start = 0
        else:
            raise ValueError("padding_side must be 'left' or 'right'")

        # Define the slices
        seq_slice = slice(seq_start, seq_start + t.shape[0])
        slices = (seq_slice,) + tuple(slice(0, s) for s in t.shape[1:])
        output[i][slices] = t

    return output


@dataclass
class DataCollatorForPreference(DataCollatorMixin):
    pad_token_id: int
    pad_to_multiple_of: int | None = None
    return_tensors: str = "pt"

    def torch_call(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        # Convert to tensor
        chosen_ids = [torch.tensor(example["chosen_ids"]) for example in examples]
        rejected_ids = [torch.tensor(example["rejected_ids"]) for example in examples]
        if "margin" in examples[0]:
            margins = torch.tensor([example["margin"] for example in examples], dtype=torch.float)
        input_ids = chosen_ids + rejected_ids
        attention_mask = [torch.ones_like(ids) for ids in input_ids]

        output = {}

        # Pad
        output["input_ids"] = pad(
            input_ids,
            padding_value=self.pad_token_id,
            padding_side="right",
            pad_to_multiple_of=self.pad_to_multiple_of,
        )
        output["attention_mask"] = pad(
            attention_mask,
            padding_value=0,
            padding_side="right",
            pad_to_multiple_of=self.pad_to_multiple_of,
        )
        if "margin" in examples[0]:
            output["margin"] = margins
        return output


@dataclass
class RewardConfig(TrainingArguments):
    center_rewards_coefficient: float | None = None


class RewardTrainer(Trainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)

        # During evaluation, Trainer calls compute_loss() only if can_return_loss is True and label_names is empty.
        self.can_return_loss = True
        self.label_names = []

        # Initialize the metrics
        self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
        self._total_train_tokens = 0

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        mode = "train" if self.model.training else "eval"

        # If not set, defaults from model config and may warn since cache isn't compatible with gradient checkpointing
        inputs["use_cache"] = False
        margin = inputs.pop("margin", None)
        outputs = model(**inputs)

        # Split the rewards into chosen and rejected
        rewards_chosen, rewards_rejected = torch.chunk(outputs.logits.squeeze(-1), chunks=2)

        # Calculate loss, optionally modulate with margin
        if margin is not None:
            loss = -nn.functional.logsigmoid(rewards_chosen - rewards_rejected - margin).mean()
        else:
            loss = -nn.functional.logsigmoid(rewards_chosen - rewards_rejected).mean()

        if self.args.center_rewards_coefficient is not None:
            loss += self.args.center_rewards_coefficient * torch.mean((rewards_chosen + rewards_rejected) ** 2)

        if mode == "train":
            num_tokens_in_batch = self.accelerator.gather_for_metrics(inputs["attention_mask"].sum()).sum().item()
            self._total_train_tokens += num_tokens_in_batch
        self._metrics[mode]["num_tokens"] = [self._total_train_tokens]

        # Compute min, mean, max, accuracy and margin
        with torch.no_grad():
            all_rewards = self.accelerator.gather(outputs.logits)
            self._metrics[mode]["min_reward"].append(all_rewards.min().item())
            self._metrics[mode]["mean_reward"].append(all_rewards.mean().item())
            self._metrics[mode]["max_reward"].append(all_rewards.max().item())

            mean_accuracy = (rewards_chosen > rewards_rejected).float().mean()
            mean_accuracy = self.accelerator.gather_for_metrics(mean_accuracy).mean().item()
            self._metrics[mode]["accuracy"].append(mean_accuracy)

            mean_margin = (rewards_chosen - rewards_rejected).mean()
            mean_margin = self.accelerator.gather_for_metrics(mean_margin).mean()
            self._metrics[mode]["margin"].append(mean_margin.item())

        return (loss, outputs) if return_outputs else loss

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        mode = "train" if self.model.training else "eval"
        metrics = {key: sum(val) / len(val) for key, val in self._metrics[mode].items()}  # average the metrics

        # This method can be called both in training and evaluation. When called in evaluation, the keys in `logs`
        # start with "eval_". We need to add the prefix "eval_" to the keys in `metrics` to match the format.
        if mode == "eval":
            metrics = {f"eval_{key}": val for key, val in metrics.items()}

        logs.update(metrics)
        super().log(logs, start_time)
        self._metrics[mode].clear()


VOCAB, EOS = 96, 95
GOOD = list(range(10, 30))
BAD = list(range(30, 50))
NEUTRAL = list(range(50, 90))


def make_pairs(n, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        prompt = [rng.choice(NEUTRAL) for _ in range(rng.randint(3, 8))]
        def answer(p_good):
            return [rng.choice(GOOD) if rng.random() < p_good else rng.choice(BAD if rng.random() < 0.5 else NEUTRAL)
                    for _ in range(rng.randint(3, 10))]
        strong = rng.random() < 0.5
        chosen = prompt + answer(0.7 if strong else 0.5)
        rejected = prompt + answer(0.2 if strong else 0.35)
        out.append({"chosen_ids": chosen, "rejected_ids": rejected, "margin": 1.0 if strong else 0.0})
    return out


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=64, n_layer=2, n_head=4, num_labels=1,
                        pad_token_id=EOS, eos_token_id=EOS, bos_token_id=EOS)
    model = GPT2ForSequenceClassification(config)

    train_dataset = make_pairs(640, 1)
    eval_dataset = make_pairs(128, 2)

    args = RewardConfig(
        output_dir="/tmp/trl_reward_model_out",
        per_device_train_batch_size=8,
        per_device_eval_batch_size=32,
        gradient_accumulation_steps=2,
        learning_rate=1e-3,
        lr_scheduler_type="linear",
        warmup_steps=5,
        max_steps=60,
        logging_steps=10,
        eval_strategy="steps",
        eval_steps=30,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        remove_unused_columns=False,
        center_rewards_coefficient=0.01,
        seed=0,
        disable_tqdm=True,
    )
    trainer = RewardTrainer(
        model=model,
        args=args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        data_collator=DataCollatorForPreference(pad_token_id=EOS),
    )
    before = trainer.evaluate()
    print(f"before training: eval_loss {before['eval_loss']:.4f} eval_accuracy {before['eval_accuracy']:.3f}")
    trainer.train()
    after = trainer.evaluate()
    print(f"after training: eval_loss {after['eval_loss']:.4f} eval_accuracy {after['eval_accuracy']:.3f}")
    print(f"[summary] eval_accuracy first={before['eval_accuracy']:.3f} last={after['eval_accuracy']:.3f} "
          f"increased={after['eval_accuracy'] > before['eval_accuracy']}")


if __name__ == "__main__":
    main()
