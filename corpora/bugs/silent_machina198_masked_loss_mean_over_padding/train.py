# Source: DeepX-inc/machina, machina/loss_functional.py (pg_clip), machina/algos/ppo_clip.py (update_pol, train), machina/pds/categorical_pd.py, commit e4e753c55d5949ab34a2578660dfe09560617db3
# Report: https://github.com/DeepX-inc/machina/pull/198
# machina PPO (clip) with a recurrent categorical policy: episodes of different lengths are
# packed into (T, B) sequences padded to the longest one, with h_masks marking episode starts
# and out_masks marking the valid steps; pg_clip builds the clipped surrogate with an entropy
# bonus and update_pol clips the gradient norm before each Adam step. The gym environment is
# replaced by a synthetic episodic task (observe one of 4 cues, reward 1 for the matching
# action), the value function by a batch-mean baseline.
import numpy as np
import torch
import torch.nn as nn
from torch.distributions import Categorical

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)

N_CUES = 4
MAX_LEN = 48


class CategoricalPd:
    def sample(self, params, sample_shape=torch.Size()):
        return Categorical(probs=params['pi']).sample(sample_shape)

    def llh(self, x, params):
        return Categorical(params['pi']).log_prob(x)

    def ent(self, params):
        return Categorical(params['pi']).entropy()


class RNNCategoricalPol(nn.Module):
    def __init__(self, ob_dim, ac_dim, h_size=32):
        super().__init__()
        self.rnn = True
        self.pd = CategoricalPd()
        self.input_layer = nn.Linear(ob_dim, h_size)
        self.cell = nn.GRUCell(h_size, h_size)
        self.output_layer = nn.Linear(h_size, ac_dim)
        self.h_size = h_size
        self.hs = None

    def reset(self):
        self.hs = None

    def forward(self, obs, h_masks):
        T, B, _ = obs.shape
        hs = self.hs if self.hs is not None else obs.new_zeros(B, self.h_size)
        pis = []
        for t in range(T):
            hs = hs * (1 - h_masks[t]).unsqueeze(-1)
            hs = self.cell(torch.relu(self.input_layer(obs[t])), hs)
            pis.append(torch.softmax(self.output_layer(hs), dim=-1))
        self.hs = hs
        pi = torch.stack(pis)
        ac = self.pd.sample(dict(pi=pi))
        return ac, pi, dict(pi=pi)


def pg_clip(pol, batch, clip_param, ent_beta):
    obs = batch['obs']
    acs = batch['acs']
    advs = batch['advs']

    if pol.rnn:
        h_masks = batch['h_masks']
        out_masks = batch['out_masks']
    else:
        h_masks = None
        out_masks = torch.ones_like(advs)

    pd = pol.pd

    old_llh = pd.llh(
        batch['acs'],
        batch,
    )

    pol.reset()
    _, _, pd_params = pol(obs, h_masks=h_masks)

    new_llh = pd.llh(acs, pd_params)
    ratio = torch.exp(new_llh - old_llh)
    pol_loss1 = - ratio * advs
    pol_loss2 = - torch.clamp(ratio, 1.0 - clip_param, 1.0 + clip_param) * advs
    pol_loss = torch.max(pol_loss1, pol_loss2)
    pol_loss = torch.mean(pol_loss * out_masks)

    ent = pd.ent(pd_params)
    pol_loss -= ent_beta * torch.mean(ent)

    return pol_loss


def update_pol(pol, optim_pol, batch, clip_param, ent_beta, max_grad_norm):
    pol_loss = pg_clip(pol, batch, clip_param, ent_beta)
    optim_pol.zero_grad()
    pol_loss.backward()
    torch.nn.utils.clip_grad_norm_(pol.parameters(), max_grad_norm)
    optim_pol.step()
    return pol_loss.detach().cpu().numpy()


def sample_episodes(pol, n_epis, rng):
    """Roll out n_epis episodes (length 3..12) and pack them as (T, B) padded sequences."""
    lens = rng.randint(3, 13, size=n_epis)
    cues = rng.randint(0, N_CUES, size=(MAX_LEN, n_epis))
    obs = torch.zeros(MAX_LEN, n_epis, N_CUES)
    out_masks = torch.zeros(MAX_LEN, n_epis)
    for b, n in enumerate(lens):
        obs[np.arange(n), b, cues[:n, b]] = 1.0
        out_masks[:n, b] = 1.0
    h_masks = torch.zeros(MAX_LEN, n_epis)
    h_masks[0] = 1.0
    with torch.no_grad():
        pol.reset()
        acs, pi, _ = pol(obs, h_masks=h_masks)
    rews = (acs == torch.as_tensor(cues)).float() * out_masks
    return dict(obs=obs, acs=acs, pi=pi, rews=rews, h_masks=h_masks, out_masks=out_masks)


def evaluate(pol, rng):
    batch = sample_episodes(pol, 256, rng)
    m = batch['out_masks']
    cues = batch['obs'].argmax(-1)
    p_correct = batch['pi'].gather(-1, cues.unsqueeze(-1)).squeeze(-1)
    ent = Categorical(batch['pi']).entropy()
    return ((p_correct * m).sum() / m.sum()).item(), ((ent * m).sum() / m.sum()).item()


def train(traj_batch, pol, optim_pol, epoch, batch_size, clip_param=0.2, ent_beta=0.1,
          max_grad_norm=0.5):
    pol_losses = []
    n = traj_batch['obs'].shape[1]
    for _ in range(epoch):
        perm = torch.randperm(n)
        for i in range(0, n, batch_size):
            idx = perm[i:i + batch_size]
            batch = {k: v[:, idx] for k, v in traj_batch.items()}
            pol_losses.append(update_pol(pol, optim_pol, batch, clip_param, ent_beta,
                                         max_grad_norm))
    return dict(PolLoss=pol_losses)


def main():
    rng = np.random.RandomState(0)
    eval_rng = np.random.RandomState(1)
    pol = RNNCategoricalPol(N_CUES, N_CUES)
    optim_pol = torch.optim.Adam(pol.parameters(), lr=3e-3)
    for it in range(12):
        traj = sample_episodes(pol, 64, rng)
        m = traj['out_masks']
        mean_rew = (traj['rews'].sum() / m.sum()).item()
        advs = (traj['rews'] - mean_rew) * m
        traj['advs'] = advs / (((advs ** 2).sum() / m.sum()).sqrt() + 1e-8)
        result = train(traj, pol, optim_pol, epoch=4, batch_size=16)
        if it % 4 == 3:
            p_correct, ent = evaluate(pol, eval_rng)
            print(f"iter {it + 1}: reward/step {mean_rew:.3f}  pol loss {np.mean(result['PolLoss']):.4f}  "
                  f"eval p(correct action) {p_correct:.3f}  entropy {ent:.3f}")
    p_correct, ent = evaluate(pol, eval_rng)
    print(f"final: eval p(correct action) {p_correct:.3f}  policy entropy {ent:.3f} (uniform {np.log(N_CUES):.3f})")


if __name__ == "__main__":
    main()
