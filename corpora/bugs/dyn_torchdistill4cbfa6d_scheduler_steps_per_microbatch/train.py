# Source: yoshitomo-matsubara/torchdistill, torchdistill/core/interfaces/post_forward_proc.py + examples/hf_transformers/custom/optim.py (update_num_iterations) + configs/sample/glue/rte/ce/bert_base_uncased.yaml, commit ace946ac94d3d714a7b9280f0967dee1dcfdf3ec
# Report: https://github.com/yoshitomo-matsubara/torchdistill/commit/4cbfa6d60fa48715dad8d1d410ee7a4c392a7981 ("Fix bugs around optimizer")
import math

import torch
from torch import nn
from torch.optim.lr_scheduler import CosineAnnealingWarmRestarts, ReduceLROnPlateau
from torch.utils.data import DataLoader, TensorDataset
from transformers import get_linear_schedule_with_warmup


def default_post_forward_process(self, loss, metrics=None, **kwargs):
    self.stage_grad_count += 1
    if self.grad_accum_step > 1:
        loss /= self.grad_accum_step

    if self.accelerator is not None:
        self.accelerator.backward(loss)
    else:
        loss.backward()

    if self.stage_grad_count % self.grad_accum_step == 0:
        if self.max_grad_norm is not None:
            target_params = [p for group in self.optimizer.param_groups for p in group['params']]
            torch.nn.utils.clip_grad_norm_(target_params, self.max_grad_norm)

        self.optimizer.step()
        self.optimizer.zero_grad()

    # Step-wise scheduler step
    if self.lr_scheduler is not None and self.scheduling_step > 0 \
            and self.stage_grad_count % self.scheduling_step == 0:
        if isinstance(self.lr_scheduler, ReduceLROnPlateau):
            self.lr_scheduler.step(metrics)
        elif isinstance(self.lr_scheduler, CosineAnnealingWarmRestarts):
            local_epoch = int(self.stage_grad_count / self.scheduling_step)
            self.lr_scheduler.step(local_epoch)
        else:
            self.lr_scheduler.step()


class SequenceClassifier(nn.Module):
    """Small stand-in for BertForSequenceClassification: embeddings, one encoder layer, [CLS] pooler, classifier."""

    def __init__(self, vocab_size=200, hidden_size=32, num_labels=2):
        super().__init__()
        self.embeddings = nn.Embedding(vocab_size, hidden_size)
        self.encoder = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(hidden_size, 2, 64, dropout=0.1, batch_first=True), num_layers=1)
        self.pooler = nn.Sequential(nn.Linear(hidden_size, hidden_size), nn.Tanh())
        self.classifier = nn.Linear(hidden_size, num_labels)

    def forward(self, input_ids, labels=None):
        hidden = self.encoder(self.embeddings(input_ids))
        logits = self.classifier(self.pooler(hidden[:, 0]))
        loss = nn.functional.cross_entropy(logits, labels) if labels is not None else None
        return loss, logits


class TrainingBox:
    def __init__(self, model, dataset_dict, train_config):
        self.model = model
        self.train_data_loader = DataLoader(dataset_dict['train'], batch_size=train_config['train_data_loader']['batch_size'],
                                            shuffle=train_config['train_data_loader']['random_sample'])
        self.val_data_loader = DataLoader(dataset_dict['val'], batch_size=64)
        optim_config = train_config['optimizer']
        self.optimizer = torch.optim.AdamW(model.parameters(), **optim_config['kwargs'])
        self.max_grad_norm = optim_config.get('max_grad_norm', None)
        self.grad_accum_step = optim_config.get('grad_accum_step', 1)
        scheduler_config = train_config['scheduler']
        self.lr_scheduler = get_linear_schedule_with_warmup(self.optimizer, **scheduler_config['kwargs'])
        self.scheduling_step = scheduler_config.get('scheduling_step', 0)
        self.accelerator = None
        self.stage_grad_count = 0

    def forward_process(self, input_ids, labels):
        loss, _ = self.model(input_ids, labels=labels)
        return loss

    def post_forward_process(self, *args, **kwargs):
        default_post_forward_process(self, *args, **kwargs)


def update_num_iterations(train_config, dataset_dict, world_size):
    train_data_loader_config = train_config['train_data_loader']
    grad_accum_step = train_config['optimizer'].get('grad_accum_step', 1)
    num_iterations = math.ceil(len(dataset_dict[train_data_loader_config['dataset_id']]) /
                               train_data_loader_config['batch_size'] / grad_accum_step / world_size)
    scheduler_config = train_config['scheduler']
    scheduler_config['kwargs']['num_training_steps'] = num_iterations * train_config['num_epochs']


def make_glue_like(n, seed):
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(4, 200, (n, 24), generator=g)
    input_ids[:, 0] = 1  # [CLS]
    labels = torch.randint(0, 2, (n,), generator=g)
    cue = torch.where(labels == 1, torch.tensor(2), torch.tensor(3))
    pos = torch.randint(1, 24, (n,), generator=g)
    input_ids[torch.arange(n), pos] = cue
    return TensorDataset(input_ids, labels)


@torch.no_grad()
def evaluate(model, data_loader):
    model.eval()
    correct = total = 0
    for input_ids, labels in data_loader:
        _, logits = model(input_ids)
        correct += (logits.argmax(-1) == labels).sum().item()
        total += labels.numel()
    return correct / total


def main():
    torch.manual_seed(42)
    train_config = {
        'num_epochs': 4,
        'train_data_loader': {'dataset_id': 'train', 'random_sample': True, 'batch_size': 8},
        'optimizer': {'kwargs': {'lr': 1.0e-3, 'weight_decay': 0.0}, 'max_grad_norm': None, 'grad_accum_step': 4},
        'scheduler': {'kwargs': {'num_warmup_steps': 0, 'num_training_steps': None}, 'scheduling_step': 1},
    }
    dataset_dict = {'train': make_glue_like(512, 0), 'val': make_glue_like(256, 1)}
    update_num_iterations(train_config, dataset_dict, world_size=1)
    model = SequenceClassifier()
    box = TrainingBox(model, dataset_dict, train_config)
    for epoch in range(train_config['num_epochs']):
        model.train()
        total_loss = 0.0
        for input_ids, labels in box.train_data_loader:
            loss = box.forward_process(input_ids, labels)
            total_loss += loss.item()
            box.post_forward_process(loss)
        acc = evaluate(model, box.val_data_loader)
        print('Epoch {}: lr {:.6f} train loss {:.4f} val accuracy {:.4f}'.format(
            epoch, box.optimizer.param_groups[0]['lr'], total_loss / len(box.train_data_loader), acc))


if __name__ == "__main__":
    main()
