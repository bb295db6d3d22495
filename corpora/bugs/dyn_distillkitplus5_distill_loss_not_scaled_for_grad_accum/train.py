# Source: agokrani/distillKitPlus, components/trainer.py (LogitsTrainer.compute_loss, _compute_teacher_logits, _align_sequence_length, _compute_distillation_loss), components/loss.py (forward_kl, compute_distillation_loss), commit b4eb89d7a79bbe06e37cdfcb84163b2923bcf18a
# Report: https://github.com/agokrani/distillKitPlus/issues/5
# DistillKitPlus logit distillation: a LogitsTrainer (a transformers Trainer subclass; the
# original derives from trl's SFTTrainer, which adds nothing to this step) overrides
# compute_loss to run the student, get the teacher's logits, and return
# alpha * forward-KL(student || teacher, T) + (1 - alpha) * student LM loss; training uses
# gradient accumulation. The Llama / Qwen student and teacher are tiny random LlamaForCausalLM
# configs, the dataset is synthetic token sequences; transformers' own Trainer loop, logging
# (loss, grad_norm) and gradient clipping are used unchanged.
import logging
import tempfile
import warnings

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments


def forward_kl(student_logits, teacher_logits, temperature=2.0, inputs=None):
    student_logits_scaled = student_logits / temperature
    teacher_logits_scaled = teacher_logits / temperature
    kd_loss = (F.kl_div(F.log_softmax(student_logits_scaled, dim=-1), F.softmax(teacher_logits_scaled, dim=-1),
                        reduction="batchmean") * (temperature ** 2) / student_logits.size(1))
    return kd_loss


def compute_distillation_loss(student_logits, teacher_logits, original_loss, inputs=None, loss_type="fkl", k=100,
                              alpha=0.1, temperature=2.0, **kwargs):
    if loss_type == "kld" or loss_type == "fkl":
        kd_loss = forward_kl(student_logits, teacher_logits, temperature, inputs)
    else:
        raise ValueError(f"Unsupported loss type: {loss_type}")
    return alpha * kd_loss + (1 - alpha) * original_loss


class LogitsTrainer(Trainer):
    def __init__(self, *args, **kwargs):
        self.temperature = kwargs.pop("temperature", 2.0)
        self.alpha = kwargs.pop("alpha", 0.1)
        self.loss_type = kwargs.pop("loss_type", "fkl")
        self.k = kwargs.pop("k", 100)
        self.loss_kwargs = kwargs.pop("loss_kwargs", None)
        self.teacher_model = kwargs.pop("teacher_model")
        super().__init__(*args, **kwargs)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        inputs = {k: v.to(model.device) if hasattr(v, "to") else v for k, v in inputs.items()}
        self.current_inputs = {k: v for k, v in inputs.items()}
        teacher_logits = inputs.pop("logits") if "logits" in inputs else None
        student_model = model.module if hasattr(model, "module") else model
        student_outputs = student_model(**inputs)
        if teacher_logits is None:
            teacher_logits = self._compute_teacher_logits(inputs)
        teacher_logits = self._align_sequence_length(teacher_logits, student_outputs.logits)
        custom_loss = self._compute_distillation_loss(student_outputs.logits, teacher_logits, student_outputs.loss,
                                                      inputs=inputs)
        return (custom_loss, student_outputs) if return_outputs else custom_loss

    def _compute_teacher_logits(self, inputs):
        teacher_model = self.teacher_model.module if hasattr(self.teacher_model, "module") else self.teacher_model
        with torch.no_grad():
            teacher_outputs = teacher_model(**inputs)
        return teacher_outputs.logits

    def _align_sequence_length(self, teacher_logits, student_logits):
        teacher_len, student_len = teacher_logits.size(1), student_logits.size(1)
        if teacher_len > student_len:
            return teacher_logits[:, :student_len, :]
        elif teacher_len < student_len:
            return F.pad(teacher_logits, (0, 0, 0, student_len - teacher_len, 0, 0), mode='constant', value=0)
        return teacher_logits

    def _compute_distillation_loss(self, student_logits, teacher_logits, original_loss, inputs, **kwargs):
        return compute_distillation_loss(student_logits, teacher_logits, original_loss, inputs=inputs,
                                         loss_type=self.loss_type, k=self.k, alpha=self.alpha,
                                         temperature=self.temperature, **kwargs)


class TokenDataset(Dataset):
    def __init__(self, n, rng, vocab=64, length=16):
        start = rng.randint(0, vocab, size=(n, 1))
        step = rng.randint(1, 4, size=(n, 1))
        self.ids = torch.from_numpy((start + step * np.arange(length)) % vocab)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        ids = self.ids[i]
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()}


def tiny_llama(seed, layers):
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)
    return LlamaForCausalLM(cfg)


if __name__ == "__main__":
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    rng = np.random.RandomState(0)
    train_ds, eval_ds = TokenDataset(512, rng), TokenDataset(64, rng)
    teacher = tiny_llama(1, layers=2).eval()
    student = tiny_llama(0, layers=1)
    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(output_dir=tmp, per_device_train_batch_size=8, gradient_accumulation_steps=4,
                                 max_steps=32, learning_rate=3e-3, max_grad_norm=1.0, logging_steps=8,
                                 report_to=[], save_strategy="no", use_cpu=True, disable_tqdm=True, seed=0)
        trainer = LogitsTrainer(model=student, args=args, train_dataset=train_ds, teacher_model=teacher,
                                temperature=2.0, alpha=0.5)
        trainer.train()
        for rec in trainer.state.log_history:
            if "loss" in rec:
                print(f"step {rec['step']:3d} logged loss {rec['loss']:.4f} grad_norm {rec['grad_norm']:.3f}")
        student.eval()
        with torch.no_grad():
            batch = {k: torch.stack([eval_ds[i][k] for i in range(len(eval_ds))]) for k in ("input_ids", "attention_mask", "labels")}
            eval_loss = trainer.compute_loss(student, batch).item()
        print(f"eval distillation loss (per batch, unscaled) {eval_loss:.4f}")
