# Source: lucidrains/e2-tts-pytorch, e2_tts_pytorch/trainer.py (E2Trainer.__init__, E2Trainer.train), e2_tts_pytorch/e2_tts.py (E2TTS.forward), commit c0570be9b2b078d3305e15449a78dc15b7db2b00
# Report: https://github.com/lucidrains/e2-tts-pytorch/pull/24
# E2 TTS training: accelerate's gradient accumulation, Adam, a warm-up / linear-decay
# SequentialLR, gradient-norm clipping and an EMA. E2TTS (flow matching on mel frames with a
# random masked span, text characters added to the frames) is reduced to a 2-layer
# transformer on synthetic 20-bin "mel" sequences whose values follow the text; loguru /
# tensorboard / checkpointing / the mel front end are removed.
import math

import torch
import torch.nn.functional as F
from accelerate import Accelerator
from torch import nn
from torch.nn import Module
from torch.optim import Adam
from torch.optim.lr_scheduler import LinearLR, SequentialLR
from torch.utils.data import DataLoader, Dataset


def lens_to_mask(t, length=None):
    length = length if length is not None else t.amax()
    seq = torch.arange(length, device=t.device)
    return seq[None, :] < t[:, None]


def mask_from_start_end_indices(seq_len, start, end):
    seq = torch.arange(seq_len.amax().item(), device=start.device).long()
    return (seq[None, :] >= start[:, None]) & (seq[None, :] < end[:, None])


def mask_from_frac_lengths(seq_len, frac_lengths):
    lengths = (frac_lengths * seq_len).long()
    max_start = seq_len - lengths
    rand = torch.rand_like(frac_lengths)
    start = (max_start * rand).long().clamp(min=0)
    end = start + lengths
    return mask_from_start_end_indices(seq_len, start, end)


class E2TTS(Module):
    def __init__(self, num_channels=20, dim=64, depth=2, num_text_tokens=32, frac_lengths_mask=(0.7, 1.0)):
        super().__init__()
        self.proj_in = nn.Linear(num_channels * 2, dim)
        self.embed_text = nn.Embedding(num_text_tokens + 1, dim)
        layer = nn.TransformerEncoderLayer(dim, 4, 2 * dim, 0.0, batch_first=True, norm_first=True)
        self.transformer = nn.TransformerEncoder(layer, depth)
        self.to_pred = nn.Linear(dim, num_channels)
        self.frac_lengths_mask = frac_lengths_mask

    def transformer_with_pred_head(self, x, cond, text):
        x = self.proj_in(torch.cat((x, cond), dim=-1))
        x = x + self.embed_text(text[:, :x.shape[1]] + 1)
        return self.to_pred(self.transformer(x))

    def forward(self, inp, text, lens):
        batch, seq_len = inp.shape[:2]
        mask = lens_to_mask(lens, length=seq_len)

        # get a random span to mask out for training conditionally
        frac_lengths = torch.zeros((batch,)).float().uniform_(*self.frac_lengths_mask)
        rand_span_mask = mask_from_frac_lengths(lens, frac_lengths)
        rand_span_mask &= mask

        # flow matching: x1 is the mel, x0 noise, w the interpolation at time t
        x1 = inp
        x0 = torch.randn_like(x1)
        times = torch.rand((batch,), dtype=inp.dtype)
        t = times[:, None, None]
        w = (1 - t) * x0 + t * x1
        flow = x1 - x0

        cond = torch.where(rand_span_mask[..., None], torch.zeros_like(x1), x1)
        pred = self.transformer_with_pred_head(w, cond=cond, text=text)

        loss = F.mse_loss(pred, flow, reduction='none')
        loss = loss[rand_span_mask].mean()
        return loss, cond, pred


class SyntheticSpeech(Dataset):
    def __init__(self, n=512, seq_len=40, channels=20, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.text = torch.randint(0, 32, (n, seq_len), generator=g)
        basis = torch.randn(32, channels, generator=g)
        self.mel = 4 * basis[self.text] + 0.1 * torch.randn(n, seq_len, channels, generator=g)
        self.lens = torch.full((n,), seq_len)

    def __len__(self):
        return len(self.lens)

    def __getitem__(self, i):
        return dict(mel=self.mel[i].T, text=self.text[i], mel_lengths=self.lens[i])


class E2Trainer:
    def __init__(self, model, optimizer, num_warmup_steps=20000, grad_accumulation_steps=1, max_grad_norm=1.0,
                 accelerate_kwargs: dict = dict()):
        self.accelerator = Accelerator(gradient_accumulation_steps=grad_accumulation_steps, cpu=True,
                                       **accelerate_kwargs)
        self.model = model
        self.optimizer = optimizer
        self.num_warmup_steps = num_warmup_steps
        self.max_grad_norm = max_grad_norm
        self.model, self.optimizer = self.accelerator.prepare(self.model, self.optimizer)
        self.clip_log = []

    @property
    def is_main(self):
        return self.accelerator.is_main_process

    def train(self, train_dataset, epochs, batch_size, num_workers=0, save_step=1000):
        train_dataloader = DataLoader(train_dataset, batch_size=batch_size, shuffle=True, num_workers=num_workers)
        total_steps = len(train_dataloader) * epochs
        decay_steps = total_steps - self.num_warmup_steps
        warmup_scheduler = LinearLR(self.optimizer, start_factor=1e-8, end_factor=1.0, total_iters=self.num_warmup_steps)
        decay_scheduler = LinearLR(self.optimizer, start_factor=1.0, end_factor=1e-8, total_iters=decay_steps)
        self.scheduler = SequentialLR(self.optimizer,
                                      schedulers=[warmup_scheduler, decay_scheduler],
                                      milestones=[self.num_warmup_steps])
        train_dataloader, self.scheduler = self.accelerator.prepare(train_dataloader, self.scheduler)
        global_step = 0

        for epoch in range(epochs):
            self.model.train()
            epoch_loss = 0.0
            clips_partial, clips_full, full_norms = 0, 0, []

            for batch in train_dataloader:
                with self.accelerator.accumulate(self.model):
                    text_inputs = batch['text']
                    mel_spec = batch['mel'].transpose(1, 2)
                    mel_lengths = batch["mel_lengths"]

                    loss, cond, pred = self.model(mel_spec, text=text_inputs, lens=mel_lengths)
                    self.accelerator.backward(loss)

                    if self.max_grad_norm > 0:
                        total_norm = self.accelerator.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
                        if self.accelerator.sync_gradients:
                            clips_full += 1
                            full_norms.append(total_norm.item())
                        else:
                            clips_partial += 1

                    self.optimizer.step()
                    self.scheduler.step()
                    self.optimizer.zero_grad()

                global_step += 1
                epoch_loss += loss.item()

            epoch_loss /= len(train_dataloader)
            print(f"epoch {epoch+1}/{epochs} - average loss = {epoch_loss:.4f} | clip_grad_norm_ calls: "
                  f"{clips_full} on complete accumulations, {clips_partial} on partial ones | "
                  f"mean grad norm before the step's clip {sum(full_norms) / max(len(full_norms), 1):.3f} | "
                  f"lr {self.scheduler.get_last_lr()[0]:.2e}")


def main():
    torch.manual_seed(0)
    e2tts = E2TTS()
    train_dataset = SyntheticSpeech()
    optimizer = Adam(e2tts.parameters(), lr=3e-3)
    trainer = E2Trainer(e2tts, optimizer, num_warmup_steps=10, grad_accumulation_steps=4)
    trainer.train(train_dataset, epochs=6, batch_size=16, save_step=1000)


if __name__ == "__main__":
    main()
