# Source: eric-mitchell/direct-preference-optimization, trainers.py (dpo_loss, _get_batch_logps, concatenated_inputs, BasicTrainer.get_batch_metrics/train/clip_gradient) + preference_datasets.py (tokenize_batch_element) + utils.py (pad_to_length), commit 5815fab23a10509b7ee7088be27f8979bd26c96a
# SFT stage of the DPO recipe (loss.name == 'sft'): the policy is trained on the chosen responses only, loss =
# -sum of response-token log-probs per example (not normalised by length), then averaged over the batch.
# Suspicious-looking but correct patterns kept from the original:
#   - the loss is a SUM over response tokens (average_log_prob=False): longer responses weigh more, the loss value
#     is ~(tokens x log vocab) at init and is not comparable to a per-token cross-entropy
#   - prompt tokens and padding labelled -100, replaced by the dummy index 0 before torch.gather and removed with
#     loss_mask; labels are shifted by hand (labels[:, 1:], logits[:, :-1]), logits cast .to(torch.float32)
#   - the rejected_* tensors are built by the data pipeline and never used in SFT mode (no reference model either)
#   - LambdaLR warm-up min(1, (step+1)/(warmup_steps+1)) with warmup_steps (150) longer than the whole run;
#     RMSprop (the repository default); gradient accumulation over micro-batches; clip_grad_norm_ every step
#   - evaluation under torch.no_grad() in eval() mode at example_counter % eval_every == 0
# Adaptation: hydra config -> SimpleNamespace; HF checkpoint + tokenizer replaced by a randomly initialised 2-layer
# GPT-2 (transformers GPT2LMHeadModel, tiny config) and integer tokens; Anthropic-HH replaced by synthetic pairs
# (chosen response = the prompt sorted); FSDP/wandb/sampling/checkpoints removed; lr 5e-7 -> 1e-3, 24 updates.
import random
import time
from collections import defaultdict
from types import SimpleNamespace
from typing import Dict, List, Tuple, Union

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import transformers


def pad_to_length(tensor: torch.Tensor, length: int, pad_value: Union[int, float], dim: int = -1) -> torch.Tensor:
    if tensor.size(dim) >= length:
        return tensor
    else:
        pad_size = list(tensor.shape)
        pad_size[dim] = length - tensor.size(dim)
        return torch.cat([tensor, pad_value * torch.ones(*pad_size, dtype=tensor.dtype, device=tensor.device)], dim=dim)


def dpo_loss(policy_chosen_logps: torch.FloatTensor,
             policy_rejected_logps: torch.FloatTensor,
             reference_chosen_logps: torch.FloatTensor,
             reference_rejected_logps: torch.FloatTensor,
             beta: float,
             reference_free: bool = False) -> Tuple[torch.FloatTensor, torch.FloatTensor, torch.FloatTensor]:
    pi_logratios = policy_chosen_logps - policy_rejected_logps
    ref_logratios = reference_chosen_logps - reference_rejected_logps

    if reference_free:
        ref_logratios = 0

    logits = pi_logratios - ref_logratios

    losses = -F.logsigmoid(beta * logits)
    chosen_rewards = beta * (policy_chosen_logps - reference_chosen_logps).detach()
    rejected_rewards = beta * (policy_rejected_logps - reference_rejected_logps).detach()

    return losses, chosen_rewards, rejected_rewards


def _get_batch_logps(logits: torch.FloatTensor, labels: torch.LongTensor, average_log_prob: bool = False) -> torch.FloatTensor:
    assert logits.shape[:-1] == labels.shape

    labels = labels[:, 1:].clone()
    logits = logits[:, :-1, :]
    loss_mask = (labels != -100)

    # dummy token; we'll ignore the losses on these tokens later
    labels[labels == -100] = 0

    per_token_logps = torch.gather(logits.log_softmax(-1), dim=2, index=labels.unsqueeze(2)).squeeze(2)

    if average_log_prob:
        return (per_token_logps * loss_mask).sum(-1) / loss_mask.sum(-1)
    else:
        return (per_token_logps * loss_mask).sum(-1)


def concatenated_inputs(batch: Dict[str, Union[List, torch.LongTensor]]) -> Dict[str, torch.LongTensor]:
    max_length = max(batch['chosen_input_ids'].shape[1], batch['rejected_input_ids'].shape[1])
    concatenated_batch = {}
    for k in batch:
        if k.startswith('chosen') and isinstance(batch[k], torch.Tensor):
            pad_value = -100 if 'labels' in k else 0
            concatenated_key = k.replace('chosen', 'concatenated')
            concatenated_batch[concatenated_key] = pad_to_length(batch[k], max_length, pad_value=pad_value)
    for k in batch:
        if k.startswith('rejected') and isinstance(batch[k], torch.Tensor):
            pad_value = -100 if 'labels' in k else 0
            concatenated_key = k.replace('rejected', 'concatenated')
            concatenated_batch[concatenated_key] = torch.cat((
                concatenated_batch[concatenated_key],
                pad_to_length(batch[k], max_length, pad_value=pad_value),
            ), dim=0)
    return concatenated_batch


EOS = 2


def tokenize_batch_element(prompt_tokens: List[int], chosen_tokens: List[int], rejected_tokens: List[int]) -> Dict:
    """ preference_datasets.tokenize_batch_element on already-tokenized integer lists. """
    chosen_tokens = chosen_tokens + [EOS]
    rejected_tokens = rejected_tokens + [EOS]
    chosen_sequence_tokens = prompt_tokens + chosen_tokens
    rejected_sequence_tokens = prompt_tokens + rejected_tokens
    chosen_labels = chosen_sequence_tokens[:]
    chosen_labels[:len(prompt_tokens)] = [-100] * len(prompt_tokens)
    rejected_labels = rejected_sequence_tokens[:]
    rejected_labels[:len(prompt_tokens)] = [-100] * len(prompt_tokens)
    return {
        'chosen_input_ids': chosen_sequence_tokens, 'chosen_attention_mask': [1] * len(chosen_sequence_tokens),
        'chosen_labels': chosen_labels,
        'rejected_input_ids': rejected_sequence_tokens, 'rejected_attention_mask': [1] * len(rejected_sequence_tokens),
        'rejected_labels': rejected_labels,
    }


def collate(elements: List[Dict]) -> Dict:
    padded = {}
    for k in elements[0]:
        pad = -100 if k.endswith('_labels') else 0
        L = max(len(e[k]) for e in elements)
        padded[k] = torch.tensor([e[k] + [pad] * (L - len(e[k])) for e in elements], dtype=torch.long)
    return padded


def get_batch_iterator(rng, n_batches, batch_size, vocab=40):
    for _ in range(n_batches):
        elements = []
        for _ in range(batch_size):
            n = rng.randint(4, 8)
            prompt = [int(t) for t in rng.randint(3, vocab, size=n)]
            elements.append(tokenize_batch_element([1] + prompt, sorted(prompt), prompt[::-1]))
        yield collate(elements)


def slice_and_move_batch_for_device(batch: Dict, rank: int, world_size: int, device: str) -> Dict:
    chunk_size = len(list(batch.values())[0]) // world_size
    start = chunk_size * rank
    end = chunk_size * (rank + 1)
    return {k: v[start:end].to(device) for k, v in batch.items()}


class BasicTrainer(object):
    def __init__(self, policy: nn.Module, config, seed: int, reference_model: nn.Module = None):
        self.seed = seed
        self.rank = 0
        self.world_size = 1
        self.config = config
        self.policy = policy
        self.reference_model = reference_model
        rng = np.random.RandomState(seed)
        self.train_iterator = get_batch_iterator(rng, config.n_batches, config.batch_size)
        self.eval_batches = list(get_batch_iterator(np.random.RandomState(seed + 1), 2, config.eval_batch_size))

    def concatenated_forward(self, model: nn.Module, batch) -> Tuple[torch.FloatTensor, torch.FloatTensor]:
        concatenated_batch = concatenated_inputs(batch)
        all_logits = model(concatenated_batch['concatenated_input_ids'], attention_mask=concatenated_batch['concatenated_attention_mask']).logits.to(torch.float32)
        all_logps = _get_batch_logps(all_logits, concatenated_batch['concatenated_labels'], average_log_prob=False)
        chosen_logps = all_logps[:batch['chosen_input_ids'].shape[0]]
        rejected_logps = all_logps[batch['chosen_input_ids'].shape[0]:]
        return chosen_logps, rejected_logps

    def get_batch_metrics(self, batch, loss_config, train=True):
        metrics = {}
        train_test = 'train' if train else 'eval'

        if loss_config.name == 'dpo':
            policy_chosen_logps, policy_rejected_logps = self.concatenated_forward(self.policy, batch)
            with torch.no_grad():
                reference_chosen_logps, reference_rejected_logps = self.concatenated_forward(self.reference_model, batch)

            losses, chosen_rewards, rejected_rewards = dpo_loss(
                policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps, beta=loss_config.beta, reference_free=loss_config.reference_free)
            reward_accuracies = (chosen_rewards > rejected_rewards).float()

            metrics[f'rewards_{train_test}/accuracies'] = reward_accuracies.cpu().numpy().tolist()
            metrics[f'rewards_{train_test}/margins'] = (chosen_rewards - rejected_rewards).cpu().numpy().tolist()

        elif loss_config.name == 'sft':
            policy_chosen_logits = self.policy(batch['chosen_input_ids'], attention_mask=batch['chosen_attention_mask']).logits.to(torch.float32)
            policy_chosen_logps = _get_batch_logps(policy_chosen_logits, batch['chosen_labels'], average_log_prob=False)

            losses = -policy_chosen_logps

        policy_chosen_logps = policy_chosen_logps.detach()
        metrics[f'logps_{train_test}/chosen'] = policy_chosen_logps.cpu().numpy().tolist()
        metrics[f'loss/{train_test}'] = losses.detach().cpu().numpy().tolist()

        return losses.mean(), metrics

    def evaluate(self):
        self.policy.eval()
        all_eval_metrics = defaultdict(list)
        for eval_batch in self.eval_batches:
            local_eval_batch = slice_and_move_batch_for_device(eval_batch, self.rank, self.world_size, 'cpu')
            with torch.no_grad():
                _, eval_metrics = self.get_batch_metrics(local_eval_batch, self.config.loss, train=False)
            for k, v in eval_metrics.items():
                all_eval_metrics[k].extend(v)
        return {k: sum(v) / len(v) for k, v in all_eval_metrics.items()}

    def train(self):
        self.optimizer = getattr(torch.optim, self.config.optimizer)(self.policy.parameters(), lr=self.config.lr)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_lambda=lambda step: min(1.0, (step + 1) / (self.config.warmup_steps + 1)))

        torch.manual_seed(self.seed)
        np.random.seed(self.seed)
        random.seed(self.seed)

        if self.config.loss.name == 'dpo':
            self.reference_model.eval()

        self.example_counter = 0
        self.batch_counter = 0
        first_eval = last_eval = None

        for batch in self.train_iterator:
            if self.example_counter % self.config.eval_every == 0:
                mean_eval_metrics = self.evaluate()
                print(f'eval after {self.example_counter}: ' + ', '.join(f'{k}: {v:.4f}' for k, v in mean_eval_metrics.items()))
                first_eval = first_eval or mean_eval_metrics

            self.policy.train()

            start_time = time.time()
            batch_metrics = defaultdict(list)
            for microbatch_idx in range(self.config.gradient_accumulation_steps):
                global_microbatch = slice_and_move_batch_for_device(batch, microbatch_idx, self.config.gradient_accumulation_steps, 'cpu')
                local_microbatch = slice_and_move_batch_for_device(global_microbatch, self.rank, self.world_size, 'cpu')
                loss, metrics = self.get_batch_metrics(local_microbatch, self.config.loss, train=True)
                (loss / self.config.gradient_accumulation_steps).backward()

                for k, v in metrics.items():
                    batch_metrics[k].extend(v)

            grad_norm = self.clip_gradient()
            self.optimizer.step()
            self.scheduler.step()
            self.optimizer.zero_grad()

            batch_metrics['grad_norm'].append(grad_norm)
            batch_metrics['step_time'].append(time.time() - start_time)
            self.batch_counter += 1
            self.example_counter += self.config.batch_size
            if self.batch_counter % 4 == 0:
                mean_train_metrics = {k: sum(v) / len(v) for k, v in batch_metrics.items()}
                print(f'train stats after {self.example_counter} examples: ' + ', '.join(f'{k}: {v:.4f}' for k, v in mean_train_metrics.items()))

        last_eval = self.evaluate()
        print(f'eval after {self.example_counter}: ' + ', '.join(f'{k}: {v:.4f}' for k, v in last_eval.items()))
        return first_eval, last_eval

    def clip_gradient(self):
        """Clip the gradient norm of the parameters of a non-FSDP policy."""
        return torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.config.max_grad_norm).item()


def main():
    torch.manual_seed(0)
    transformers.logging.set_verbosity_error()
    config = SimpleNamespace(optimizer='RMSprop', lr=1e-3, warmup_steps=150, batch_size=16, eval_batch_size=16,
                             gradient_accumulation_steps=2, max_grad_norm=10.0, n_batches=24, eval_every=128,
                             loss=SimpleNamespace(name='sft'))
    model_config = transformers.GPT2Config(vocab_size=40, n_positions=32, n_embd=64, n_layer=2, n_head=2,
                                           bos_token_id=1, eos_token_id=EOS)
    policy = transformers.GPT2LMHeadModel(model_config)
    trainer = BasicTrainer(policy, config, seed=0, reference_model=None)
    first, last = trainer.train()
    print('[summary] eval_sft_loss first={:.4f} last={:.4f} decreased={}'.format(
        first['loss/eval'], last['loss/eval'], last['loss/eval'] < first['loss/eval']))


if __name__ == "__main__":
    main()
