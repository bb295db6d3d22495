# Source: Denys88/rl_games, rl_games/algos_torch/central_value.py, rl_games/common/common_losses.py, commit 758ac4fc9d4b720d461156211e799ee24232aacb
# Report: https://github.com/Denys88/rl_games/pull/191
# Run: torchrun --nproc-per-node 2 train.py
# Multi-GPU PPO with an asymmetric central value (critic on privileged states). Each rank collects its
# own rollouts; here the states and returns are synthetic (returns = a fixed function of the state plus
# noise), and only the central value update is run: mini_epoch passes over num_minibatches minibatches.
import torch
from torch import nn
import torch.distributed as dist


def critic_loss(value_preds_batch, values, curr_e_clip, return_batch, clip_value):
    if clip_value:
        value_pred_clipped = value_preds_batch + \
                (values - value_preds_batch).clamp(-curr_e_clip, curr_e_clip)
        value_losses = (values - return_batch)**2
        value_losses_clipped = (value_pred_clipped - return_batch)**2
        c_loss = torch.max(value_losses, value_losses_clipped)
    else:
        c_loss = (return_batch - values)**2
    return c_loss


def apply_masks(losses, mask=None):
    sum_mask = None
    if mask is not None:
        mask = mask.unsqueeze(1)
        sum_mask = mask.numel()
        res_losses = [(l * mask).sum() / sum_mask for l in losses]
    else:
        res_losses = [torch.mean(l) for l in losses]
    return res_losses, sum_mask


class ValueNet(nn.Module):
    def __init__(self, state_size, units=(64, 64)):
        super().__init__()
        layers, size = [], state_size
        for u in units:
            layers += [nn.Linear(size, u), nn.ELU()]
            size = u
        self.actor_mlp = nn.Sequential(*layers)
        self.value = nn.Linear(size, 1)

    def forward(self, input_dict):
        return {'values': self.value(self.actor_mlp(input_dict['obs']))}


class CentralValueTrain(nn.Module):
    def __init__(self, state_size, config, multi_gpu):
        nn.Module.__init__(self)
        self.multi_gpu = multi_gpu
        self.model = ValueNet(state_size)
        self.lr = float(config['learning_rate'])
        self.e_clip = config.get('e_clip', 0.2)
        self.clip_value = config.get('clip_value', True)
        self.truncate_grads = config.get('truncate_grads', False)
        self.grad_norm = config.get('grad_norm', 1)
        self.mini_epoch = config['mini_epochs']
        self.num_minibatches = config['num_minibatches']
        self.seq_len = 4
        self.is_rnn = False
        self.optimizer = torch.optim.Adam(self.model.parameters(), float(self.lr), eps=1e-08, weight_decay=0.0)
        self.dataset = []

    def _preproc_obs(self, obs_batch):
        return obs_batch

    def train_critic(self, input_dict):
        self.train()
        loss = self.calc_gradients(input_dict)
        return loss.item()

    def train_net(self):
        self.train()
        loss = 0
        for _ in range(self.mini_epoch):
            for idx in range(len(self.dataset)):
                loss += self.train_critic(self.dataset[idx])
        avg_loss = loss / (self.mini_epoch * self.num_minibatches)
        return avg_loss

    def calc_gradients(self, batch):
        obs_batch = self._preproc_obs(batch['obs'])
        value_preds_batch = batch['old_values']
        returns_batch = batch['returns']
        actions_batch = batch['actions']
        dones_batch = batch['dones']
        rnn_masks_batch = batch.get('rnn_masks')

        batch_dict = {'obs' : obs_batch, 
                    'actions' : actions_batch,
                    'seq_length' : self.seq_len,
                    'dones' : dones_batch}
        if self.is_rnn:
            batch_dict['rnn_states'] = batch['rnn_states']

        res_dict = self.model(batch_dict)
        values = res_dict['values']
        loss = critic_loss(value_preds_batch, values, self.e_clip, returns_batch, self.clip_value)
        losses, _ = apply_masks([loss], rnn_masks_batch)
        loss = losses[0]
        if self.multi_gpu:
            self.optimizer.zero_grad()
        else:
            for param in self.model.parameters():
                param.grad = None
        loss.backward()

        #TODO: Refactor this ugliest code of they year
        if self.truncate_grads:
            if self.multi_gpu:
                self.optimizer.synchronize()
                #self.scaler.unscale_(self.optimizer)
                nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_norm)
                with self.optimizer.skip_synchronize():
                    self.optimizer.step()
            else:
                #self.scaler.unscale_(self.optimizer)
                nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_norm)
                self.optimizer.step()    
        else:
            self.optimizer.step()
        
        return loss


def main():
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    config = {'learning_rate': 5e-4, 'mini_epochs': 4, 'num_minibatches': 4, 'e_clip': 0.2,
              'clip_value': True, 'truncate_grads': False}
    central_value_net = CentralValueTrain(state_size=24, config=config, multi_gpu=world_size > 1)
    true_w = torch.randn(24, 1)
    env_gen = torch.Generator().manual_seed(100 + rank)
    for epoch in range(6):
        states = torch.randn(1024, 24, generator=env_gen)
        returns = torch.tanh(states @ true_w / 4) * 5 + 0.5 * torch.randn(1024, 1, generator=env_gen)
        with torch.no_grad():
            old_values = central_value_net.model({'obs': states})['values']
        central_value_net.dataset = [
            {'obs': states[i::4], 'old_values': old_values[i::4], 'returns': returns[i::4],
             'actions': None, 'dones': None} for i in range(4)]
        cval_loss = central_value_net.train_net()
        w = torch.cat([p.detach().flatten() for p in central_value_net.model.parameters()])
        other = w.clone()
        dist.broadcast(other, src=1)
        if rank == 0:
            print(f"epoch {epoch} rank0 cval_loss {cval_loss:.4f} "
                  f"max |central value rank0 - rank1| {(w - other).abs().max().item():.6f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
