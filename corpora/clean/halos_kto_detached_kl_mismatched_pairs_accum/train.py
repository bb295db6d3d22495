# Source: ContextualAI/HALOs, train/trainers.py (BasicTrainer, UnpairedPreferenceTrainer, KTOTrainer), train/dataloader.py (UnpairedPreferenceDataLoader), launch.py, config/loss/kto.yaml, commit 4831988636b4cbc1c30c0bce78df568cf0f8103b
# https://github.com/ContextualAI/HALOs/blob/main/train/trainers.py
#
# KTO (Kahneman-Tversky optimisation) on unpaired desirable/undesirable examples: the KL reference point is
# estimated from MISMATCHED prompt/completion pairs (x_i with y_{i+1}) under torch.no_grad, detached, summed
# through accelerator.reduce and clamped at 0; the frozen reference model runs under no_grad; token logps
# from labels with -100 on the prompt; microbatches accumulated with accelerator.no_sync and loss divided by
# the accumulation steps; LinearLR warmup (start 0.1) chained to a constant LambdaLR with SequentialLR.
# Adaptation: hydra/omegaconf config -> SimpleNamespace; no hub model/tokenizer/dataset: a 2-layer GPT-2 with
# random weights (policy; the reference is a deepcopy, as both load the same checkpoint), and token-id
# conversations built in the script (desirable answers use "helpful" ids, undesirable ones "unhelpful" ids);
# the dataloader keeps the repository's batching, control-free tokenisation with -100 prompt labels and the
# KL mismatch (indices = [1..n-1, 0]); wandb, checkpointing and evaluation sampling removed; lr 5e-6 -> 1e-3.
import contextlib
import copy
import random
import time
from collections import defaultdict
from types import SimpleNamespace
from typing import Dict, List, Tuple, Union

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from accelerate import Accelerator
from torch.optim.lr_scheduler import LambdaLR, LinearLR, SequentialLR
from transformers import GPT2Config, GPT2LMHeadModel


def delete_dicts(*dicts):
    for d in dicts:
        for k in list(d.keys()):
            del d[k]


def formatted_dict(d: Dict) -> Dict:
    return {k: (f"{v:.5g}" if type(v) == float else v) for k, v in d.items()}


# ------------------------------------------------------------------ train/dataloader.py (reduced)
class UnpairedPreferenceDataLoader:
    """Yields microbatches of unpaired examples; x_i is also paired with y_{i+1} under the prefix 'KL'."""

    def __init__(self, examples, pad_token_id, microbatch_size, n_epochs, seed, max_length=40):
        self.examples = examples
        self.pad_token_id = pad_token_id
        self.microbatch_size = microbatch_size
        self.n_epochs = n_epochs
        self.max_length = max_length
        self.rng = random.Random(seed)
        self.num_training_steps = None

    def tokenize_batch_element(self, prompt_ids, generation_ids, prefix='target'):
        combined = (prompt_ids + generation_ids)[:self.max_length]
        labels = ([-100] * len(prompt_ids) + generation_ids)[:self.max_length]
        return {
            f'{prefix}_combined_input_ids': combined,
            f'{prefix}_combined_attention_mask': [1] * len(combined),
            f'{prefix}_labels': labels,
        }

    def collate(self, batch):
        padded = {}
        for k in batch[0].keys():
            if k.endswith('_input_ids') or k.endswith('_attention_mask') or k.endswith('_labels'):
                pad_value = -100 if k.endswith('_labels') else (0 if k.endswith('_attention_mask') else self.pad_token_id)
                width = max(len(ex[k]) for ex in batch)
                padded[k] = torch.tensor([ex[k] + [pad_value] * (width - len(ex[k])) for ex in batch])
            else:
                padded[k] = [ex[k] for ex in batch]
        return padded

    def __iter__(self):
        for epoch_idx in range(self.n_epochs):
            flat_data = list(self.examples)
            self.rng.shuffle(flat_data)
            batch = []
            for prompt_ids, generation_ids, status in flat_data:
                batch_element = self.tokenize_batch_element(prompt_ids, generation_ids)
                batch_element['status'] = status
                batch_element['prompt'] = prompt_ids
                batch_element['generation'] = generation_ids
                batch.append(batch_element)
                if len(batch) >= self.microbatch_size:
                    # for estimating the KL term, match up x and y' that are not corresponding input-output pairs in the data
                    # for x_i, get a mismatched y' by just picking the subsequent y_{i+1} in the batch (desirable/undesirable status does not matter)
                    indices = list(range(1, len(batch))) + [0]
                    for i in range(len(batch)):
                        batch[i].update(self.tokenize_batch_element(batch[i]['prompt'], batch[indices[i]]['generation'], prefix='KL'))
                    yield self.collate(batch)
                    batch = []


# ------------------------------------------------------------------ train/trainers.py (reduced)
class BasicTrainer(object):
    use_reference_model = True

    def __init__(self, config, train_iterator, accelerator, optimizer, scheduler, policy, reference_model=None):
        self.seed = config.seed
        torch.manual_seed(self.seed)
        np.random.seed(self.seed)
        random.seed(self.seed)
        self.accelerator = accelerator
        self.config = config
        self.example_counter = 0
        self.batch_counter = 0
        self.policy = policy
        self.policy_dtype = getattr(torch, config.model.policy_dtype)
        self.reference_model = reference_model
        self.train_iterator = train_iterator
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.history = []
        self.prepare_accelerator()

    def prepare_accelerator(self):
        """Prepare the Accelerator."""
        self.policy, self.reference_model, self.optimizer, self.scheduler = self.accelerator.prepare(
            self.policy,
            self.reference_model,
            self.optimizer,
            self.scheduler,
        )

    def get_batch_logps(self, logits: torch.FloatTensor, labels: torch.LongTensor):
        """Compute the token-level log probabilities of the given labels under the given logits."""
        # ignoring vocab size, batch size x length should be equal
        assert logits.shape[:-1] == labels.shape

        labels = labels[:, 1:].clone()
        logits = logits[:, :-1, :]
        loss_mask = (labels != -100)

        # dummy token; we'll ignore the losses on these tokens later
        labels[labels == -100] = 0

        distribution_logps = logits.float().log_softmax(-1)
        per_token_logps = torch.gather(distribution_logps, dim=2, index=labels.unsqueeze(2)).squeeze(2)

        return per_token_logps * loss_mask

    def get_sequence_rewards(self, policy_logps, reference_logps, length_normalized=False):
        if self.config.humanline:
            token_rewards = (policy_logps - reference_logps).clamp(self.config.log_epsilon_P, self.config.log_epsilon_R)

            logratio = (policy_logps - reference_logps).detach()
            unclamped = (self.config.log_epsilon_P < logratio) & (logratio < self.config.log_epsilon_R)
            unclamped = ((unclamped & (logratio != 0)).float().sum() / (logratio != 0).float().sum().clamp(min=1)).clamp(max=1, min=0)
        else:
            token_rewards = policy_logps - reference_logps
            unclamped = torch.Tensor([1]).to(self.policy_dtype).to(self.accelerator.device)

        normalization_factor = (token_rewards.abs() != 0).float().sum(-1) if length_normalized else 1
        sequence_rewards = token_rewards.sum(-1) / normalization_factor

        return sequence_rewards, unclamped

    def train(self):
        """Begin either SFT or HALO training, with periodic evaluation. This is subclassed when implementing PPO."""
        self.accelerator.print(f'Using {self.config.optimizer} optimizer with learning rate {self.config.lr}')

        if self.reference_model is not None:
            self.reference_model.eval()

        batch_metrics = defaultdict(list)
        accumulated_batches = []

        for train_batch in self.train_iterator:
            # TRAINING
            accumulated_batches.append(train_batch)
            if len(accumulated_batches) < self.config.model.gradient_accumulation_steps:
                continue

            self.policy.train()
            start_time = time.time()

            self.optimizer.zero_grad()

            for batch_idx, batch in enumerate(accumulated_batches):
                # only synchronize gradients on the last batch to avoid slowdown from unnecessary communication
                with contextlib.nullcontext() if batch_idx + 1 == len(accumulated_batches) else self.accelerator.no_sync(self.policy):
                    batch = {k: v.to(self.accelerator.device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
                    loss, metrics = self.get_batch_metrics(batch)
                    loss = loss / self.config.model.gradient_accumulation_steps
                    self.accelerator.backward(loss)
                    delete_dicts(batch)

                    for k, v in metrics.items():
                        batch_metrics[k].extend(torch.as_tensor(v).reshape(-1).float().cpu().numpy().tolist())

            grad_norm = self.accelerator.clip_grad_norm_(self.policy.parameters(), self.config.model.max_grad_norm)
            batch_metrics['grad_norm'].extend(torch.as_tensor(grad_norm).reshape(-1).float().cpu().numpy().tolist())

            self.optimizer.step()
            self.scheduler.step()

            step_time = time.time() - start_time
            examples_per_second = self.config.model.batch_size / step_time
            batch_metrics['examples_per_second'].append(examples_per_second)

            self.batch_counter += 1
            self.example_counter += self.config.model.batch_size

            if self.batch_counter % self.config.log_every == 0:
                mean_train_metrics = {}
                for k, v in batch_metrics.items():
                    if len(v) > 0:
                        mean_train_metrics[k] = sum(v) / len(v)

                mean_train_metrics['counters/examples'] = self.example_counter
                mean_train_metrics['counters/updates'] = self.batch_counter
                mean_train_metrics['counters/lr'] = self.scheduler.get_last_lr()[0]
                keep = ['loss/train', 'rewards_train/margins', 'rewards_train/KL_estimate', 'grad_norm', 'counters/updates', 'counters/lr']
                self.accelerator.print(f'train stats after {self.batch_counter} steps: {formatted_dict({k: mean_train_metrics[k] for k in keep})}')
                self.history.append(mean_train_metrics)
                batch_metrics = defaultdict(list)

            accumulated_batches = []


class UnpairedPreferenceTrainer(BasicTrainer):
    pass


class KTOTrainer(UnpairedPreferenceTrainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)

    def loss(self,
        batch: Dict,
        policy_chosen_logps: torch.FloatTensor,
        policy_rejected_logps: torch.FloatTensor,
        policy_KL_logps: torch.FloatTensor,
        reference_chosen_logps: torch.FloatTensor,
        reference_rejected_logps: torch.FloatTensor,
        reference_KL_logps: torch.FloatTensor,
        *args,
        ) -> Tuple[torch.FloatTensor, torch.FloatTensor, torch.FloatTensor]:
        if policy_chosen_logps.shape[0] != 0:
            chosen_rewards, chosen_unclamped = self.get_sequence_rewards(policy_chosen_logps, reference_chosen_logps)
        else:
            chosen_rewards = torch.Tensor([]).to(self.policy_dtype).to(self.accelerator.device)
            chosen_unclamped = torch.Tensor([1]).to(self.policy_dtype).to(self.accelerator.device)

        if policy_rejected_logps.shape[0] != 0:
            rejected_rewards, rejected_unclamped = self.get_sequence_rewards(policy_rejected_logps, reference_rejected_logps)
        else:
            rejected_rewards = torch.Tensor([]).to(self.policy_dtype).to(self.accelerator.device)
            rejected_unclamped = torch.Tensor([1]).to(self.policy_dtype).to(self.accelerator.device)

        KL_rewards, _ = self.get_sequence_rewards(policy_KL_logps.detach(), reference_KL_logps.detach())

        stats = self.accelerator.reduce(torch.Tensor([
            (chosen_rewards.abs() != 0).float().sum().item(),   # non-empty sequences after rejection sampling
            len(chosen_rewards),
            (rejected_rewards.abs() != 0).float().sum().item(), # non-empty sequences after rejection sampling
            len(rejected_rewards),
            KL_rewards.sum(),                                   # sum of non-empty KL examples
            (KL_rewards.abs() != 0).float().sum().item(),       # number of non-empty KL examples
        ]).to(self.accelerator.device), reduction="sum")

        KL = (stats[4] / stats[5].clamp(min=1)).clamp(min=0)

        if policy_chosen_logps.shape[0] != 0:
            chosen_losses = self.config.loss.desirable_weight * (1 - F.sigmoid(self.config.loss.beta * (chosen_rewards - KL)))
        else:
            # important to cast to policy_dtype; otherwise error will occur during all_gather
            chosen_losses = torch.Tensor([]).to(self.policy_dtype).to(self.accelerator.device)

        if policy_rejected_logps.shape[0] != 0:
            rejected_losses = self.config.loss.undesirable_weight * (1 - F.sigmoid(self.config.loss.beta * (KL - rejected_rewards)))
        else:
            # important to cast to policy_dtype; otherwise error will occur during all_gather
            rejected_losses = torch.Tensor([]).to(self.policy_dtype).to(self.accelerator.device)

        losses = torch.cat((chosen_losses, rejected_losses), 0)

        return losses, chosen_rewards.detach(), rejected_rewards.detach(), KL.detach(), chosen_unclamped, rejected_unclamped

    def forward(self, model: nn.Module, batch: Dict[str, Union[List, torch.LongTensor]], use_cache: bool=False) -> Tuple[torch.FloatTensor, torch.FloatTensor, torch.FloatTensor]:
        with self.accelerator.autocast():
            with torch.no_grad():
                KL_logits = model(
                    batch[f'KL_combined_input_ids'],
                    attention_mask=batch[f'KL_combined_attention_mask']
                ).logits.to(self.policy_dtype)

                KL_logps = self.get_batch_logps(KL_logits, batch[f'KL_labels'])

            target_logits = model(
                batch[f'target_combined_input_ids'],
                attention_mask=batch[f'target_combined_attention_mask']
            ).logits.to(self.policy_dtype)

            target_logps = self.get_batch_logps(target_logits, batch[f'target_labels'])

        assert target_logps.shape[0] == len(batch['status'])
        chosen_idx = [i for i in range(target_logps.shape[0]) if batch['status'][i] == 'chosen']
        rejected_idx = [i for i in range(target_logps.shape[0]) if batch['status'][i] == 'rejected']
        chosen_logps = target_logps[chosen_idx, ...]
        rejected_logps = target_logps[rejected_idx, ...]

        return chosen_logps, rejected_logps, KL_logps

    def get_batch_metrics(self, batch: Dict[str, Union[List, torch.LongTensor]], mode: str='train'):
        """Compute the loss and other metrics for the given batch of inputs."""
        metrics = {}

        policy_chosen_logps, policy_rejected_logps, policy_KL_logps = self.forward(self.policy, batch)
        with torch.no_grad():
            reference_chosen_logps, reference_rejected_logps, reference_KL_logps = self.forward(self.reference_model, batch, use_cache=self.config.cache_reference_logprobs)

        losses, chosen_rewards, rejected_rewards, KL, chosen_unclamped, rejected_unclamped = self.loss(
            batch,
            policy_chosen_logps,
            policy_rejected_logps,
            policy_KL_logps,
            reference_chosen_logps,
            reference_rejected_logps,
            reference_KL_logps,
        )

        combined_rewards = torch.cat((chosen_rewards.detach(), rejected_rewards.detach()), 0)
        combined_statuses = torch.Tensor([1] * len(chosen_rewards) + [0] * len(rejected_rewards)).to(self.accelerator.device)

        stats = self.accelerator.gather({
            'rewards': combined_rewards,
            'statuses': combined_statuses,
            'KL': KL,
            'losses': losses.detach(),
        })

        all_rewards = stats['rewards']
        chosen_rewards_idx = [ i for i in range(len(stats['statuses'])) if stats['statuses'][i].item() == 1 ]
        rejected_rewards_idx = [ i for i in range(len(stats['statuses'])) if stats['statuses'][i].item() == 0 ]

        metrics[f'rewards_{mode}/chosen'] = all_rewards[chosen_rewards_idx]
        metrics[f'rewards_{mode}/rejected'] = all_rewards[rejected_rewards_idx]
        metrics[f'rewards_{mode}/margins'] = torch.Tensor([(all_rewards[chosen_rewards_idx].mean().nan_to_num(0) - all_rewards[rejected_rewards_idx].mean().nan_to_num(0)).item()])
        metrics[f'rewards_{mode}/KL_estimate'] = stats['KL']
        metrics[f'loss/{mode}'] = stats['losses'].mean()

        return losses.mean(), metrics


# ------------------------------------------------------------------ synthetic conversations
VOCAB, PAD = 128, 127
PROMPT_WORDS = list(range(2, 40))
HELPFUL = list(range(40, 70))
UNHELPFUL = list(range(70, 100))
SHARED = list(range(100, 120))
USER, ASSISTANT, EOT = 120, 121, 122


def make_examples(n, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        prompt = [USER] + [rng.choice(PROMPT_WORDS) for _ in range(rng.randint(3, 8))] + [EOT, ASSISTANT]
        desirable = rng.random() < 0.5
        pool = HELPFUL if desirable else UNHELPFUL
        gen = [rng.choice(pool) if rng.random() < 0.6 else rng.choice(SHARED) for _ in range(rng.randint(4, 12))] + [EOT]
        out.append((prompt, gen, 'chosen' if desirable else 'rejected'))
    return out


def main():
    torch.set_num_threads(1)
    config = SimpleNamespace(
        seed=0, lr=1e-3, optimizer='AdamW', weight_decay=0.0, beta1=0.9, beta2=0.95, warmup=0.10,
        humanline=False, log_epsilon_P=-1.5, log_epsilon_R=1.5, cache_reference_logprobs=False, log_every=5,
        model=SimpleNamespace(policy_dtype='float32', batch_size=16, gradient_accumulation_steps=2, max_grad_norm=10.0),
        loss=SimpleNamespace(beta=0.1, desirable_weight=1.0, undesirable_weight=1.0, trainer='KTOTrainer',
                             dataloader='UnpairedPreferenceDataLoader'),
    )
    accelerator = Accelerator(cpu=True, mixed_precision='no')
    torch.manual_seed(config.seed)

    gpt_config = GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=64, n_layer=2, n_head=4,
                            pad_token_id=PAD, eos_token_id=EOT, bos_token_id=EOT)
    policy = GPT2LMHeadModel(gpt_config)
    reference_model = copy.deepcopy(policy)
    reference_model.eval()

    microbatch_size = config.model.batch_size // config.model.gradient_accumulation_steps
    train_iterator = UnpairedPreferenceDataLoader(make_examples(480, 1), PAD, microbatch_size, n_epochs=2, seed=config.seed)
    train_iterator.num_training_steps = (480 // config.model.batch_size) * 2

    optimizer = getattr(torch.optim, config.optimizer)(policy.parameters(), lr=config.lr, weight_decay=config.weight_decay, betas=(config.beta1, config.beta2))
    warmup_steps = int(train_iterator.num_training_steps * config.warmup)
    warmup_scheduler = LinearLR(optimizer, start_factor=0.1, end_factor=1.0, total_iters=warmup_steps)
    main_scheduler = LambdaLR(optimizer, lr_lambda=lambda step: 1.0)
    accelerator.print(f"Total training steps: {train_iterator.num_training_steps}")
    scheduler = SequentialLR(optimizer, schedulers=[warmup_scheduler, main_scheduler], milestones=[warmup_steps])

    trainer = KTOTrainer(config, train_iterator, accelerator, optimizer, scheduler, policy, reference_model)
    trainer.train()

    h = trainer.history
    print(f"[summary] reward margin (chosen - rejected) first={h[0]['rewards_train/margins']:.3f} last={h[-1]['rewards_train/margins']:.3f} "
          f"increased={h[-1]['rewards_train/margins'] > h[0]['rewards_train/margins']}; "
          f"loss first={h[0]['loss/train']:.4f} last={h[-1]['loss/train']:.4f}")


if __name__ == "__main__":
    main()
