# Source: quanvuong/handful-of-trials-pytorch, MPC.py, config/cartpole.py, config/utils.py, config/default.py, env/cartpole.py, commit 672d32f9fadf52862e7c6ee73a45f31e89d7d5ba
# https://github.com/quanvuong/handful-of-trials-pytorch
#
# PETS dynamics-model training (probabilistic ensemble of 5 nets, model-based RL): ensemble weights stored as
# (E, in, out) Parameters and applied by batched matmul, each member trained on its own bootstrap resample drawn
# with replacement; the Gaussian NLL (mse * exp(-logvar) + logvar) is averaged over batch and outputs and SUMMED over
# members; logvar is soft-clamped between learned max_logvar/min_logvar Parameters by two softplus, whose spread is
# penalised by 0.01*(max - min); L2 weight decay is added by hand per layer (compute_decays); input normalisation
# statistics are nn.Parameters with requires_grad=False that sit inside Adam and are overwritten via .data by
# fit_input_stats before every training call; the optimizer is an attribute of the model (model.optim); the
# bootstrap index matrix is re-shuffled row-wise each epoch (shuffle_rows) and the "Training loss(es)" are
# evaluated on the first 5000 bootstrap rows with a graph-building forward.
# Adaptation: no TensorFlow/gym/MuJoCo/DotMap/tqdm: truncated_normal via TF -> torch.nn.init.trunc_normal_ (+-2 std,
# as tf.truncated_normal); the MuJoCo MBRLCartpole-v0 -> a numpy cart-pole with the same observation layout
# (x, theta, x_dot, theta_dot), pole length 0.6, actions in [-3, 3]; the CEM-MPC controller is not run: every
# rollout uses uniform random actions (what MPC does before its model is trained), so only the model-learning loop
# is exercised; hidden 500 -> 64, ntrain iterations 15 -> 4 of one 200-step rollout each, epochs 5 and batch 32 kept;
# a held-out one-step prediction MSE of the ensemble mean is printed after each training call (and the MSE of
# predicting no change as a baseline).
import numpy as np
import torch
from torch import nn as nn
from torch.nn import functional as F

TORCH_DEVICE = torch.device('cpu')


# ---------------------------------------------------------------- config/utils.py
def swish(x):
    return x * torch.sigmoid(x)


def truncated_normal(size, std):
    # tf.truncated_normal(shape=size, stddev=std) re-draws values beyond 2 std
    val = torch.empty(size)
    nn.init.trunc_normal_(val, std=std, a=-2 * std, b=2 * std)
    return val


def get_affine_params(ensemble_size, in_features, out_features):

    w = truncated_normal(size=(ensemble_size, in_features, out_features),
                         std=1.0 / (2.0 * np.sqrt(in_features)))
    w = nn.Parameter(w)

    b = nn.Parameter(torch.zeros(ensemble_size, 1, out_features, dtype=torch.float32))

    return w, b


# ---------------------------------------------------------------- config/cartpole.py
class PtModel(nn.Module):

    def __init__(self, ensemble_size, in_features, out_features):
        super().__init__()

        self.num_nets = ensemble_size

        self.in_features = in_features
        self.out_features = out_features

        self.lin0_w, self.lin0_b = get_affine_params(ensemble_size, in_features, 64)

        self.lin1_w, self.lin1_b = get_affine_params(ensemble_size, 64, 64)

        self.lin2_w, self.lin2_b = get_affine_params(ensemble_size, 64, 64)

        self.lin3_w, self.lin3_b = get_affine_params(ensemble_size, 64, out_features)

        self.inputs_mu = nn.Parameter(torch.zeros(in_features), requires_grad=False)
        self.inputs_sigma = nn.Parameter(torch.zeros(in_features), requires_grad=False)

        self.max_logvar = nn.Parameter(torch.ones(1, out_features // 2, dtype=torch.float32) / 2.0)
        self.min_logvar = nn.Parameter(- torch.ones(1, out_features // 2, dtype=torch.float32) * 10.0)

    def compute_decays(self):

        lin0_decays = 0.0001 * (self.lin0_w ** 2).sum() / 2.0
        lin1_decays = 0.00025 * (self.lin1_w ** 2).sum() / 2.0
        lin2_decays = 0.00025 * (self.lin2_w ** 2).sum() / 2.0
        lin3_decays = 0.0005 * (self.lin3_w ** 2).sum() / 2.0

        return lin0_decays + lin1_decays + lin2_decays + lin3_decays

    def fit_input_stats(self, data):

        mu = np.mean(data, axis=0, keepdims=True)
        sigma = np.std(data, axis=0, keepdims=True)
        sigma[sigma < 1e-12] = 1.0

        self.inputs_mu.data = torch.from_numpy(mu).to(TORCH_DEVICE).float()
        self.inputs_sigma.data = torch.from_numpy(sigma).to(TORCH_DEVICE).float()

    def forward(self, inputs, ret_logvar=False):

        # Transform inputs
        inputs = (inputs - self.inputs_mu) / self.inputs_sigma

        inputs = inputs.matmul(self.lin0_w) + self.lin0_b
        inputs = swish(inputs)

        inputs = inputs.matmul(self.lin1_w) + self.lin1_b
        inputs = swish(inputs)

        inputs = inputs.matmul(self.lin2_w) + self.lin2_b
        inputs = swish(inputs)

        inputs = inputs.matmul(self.lin3_w) + self.lin3_b

        mean = inputs[:, :, :self.out_features // 2]

        logvar = inputs[:, :, self.out_features // 2:]
        logvar = self.max_logvar - F.softplus(self.max_logvar - logvar)
        logvar = self.min_logvar + F.softplus(logvar - self.min_logvar)

        if ret_logvar:
            return mean, logvar

        return mean, torch.exp(logvar)


class CartpoleConfigModule:
    TASK_HORIZON = 200
    NTRAIN_ITERS = 4
    NROLLOUTS_PER_ITER = 1
    MODEL_IN, MODEL_OUT = 6, 4

    def __init__(self):
        self.NN_TRAIN_CFG = {"epochs": 5}

    @staticmethod
    def obs_preproc(obs):
        if isinstance(obs, np.ndarray):
           return np.concatenate([np.sin(obs[:, 1:2]), np.cos(obs[:, 1:2]), obs[:, :1], obs[:, 2:]], axis=1)
        elif isinstance(obs, torch.Tensor):
            return torch.cat([
                obs[:, 1:2].sin(),
                obs[:, 1:2].cos(),
                obs[:, :1],
                obs[:, 2:]
            ], dim=1)

    @staticmethod
    def obs_postproc(obs, pred):
        return obs + pred

    @staticmethod
    def targ_proc(obs, next_obs):
        return next_obs - obs

    def nn_constructor(self, model_init_cfg):

        ensemble_size = model_init_cfg["num_nets"]

        model = PtModel(ensemble_size,
                        self.MODEL_IN, self.MODEL_OUT * 2).to(TORCH_DEVICE)
        # * 2 because we output both the mean and the variance

        model.optim = torch.optim.Adam(model.parameters(), lr=0.001)

        return model


# ---------------------------------------------------------------- MPC.py (model-learning part)
def shuffle_rows(arr):
    idxs = np.argsort(np.random.uniform(size=arr.shape), axis=-1)
    return arr[np.arange(arr.shape[0])[:, None], idxs]

class ModelLearner:
    """MPC's model-related state and MPC.train; the CEM planner is not part of this program."""

    def __init__(self, cfg, num_nets=5):
        self.model = cfg.nn_constructor({"num_nets": num_nets})
        self.model_train_cfg = cfg.NN_TRAIN_CFG
        self.obs_preproc, self.targ_proc = cfg.obs_preproc, cfg.targ_proc
        self.dO, self.dU = 4, 1
        self.has_been_trained = False
        self.train_in = np.array([]).reshape(0, self.dU + self.obs_preproc(np.zeros([1, self.dO])).shape[-1])
        self.train_targs = np.array([]).reshape(
            0, self.targ_proc(np.zeros([1, self.dO]), np.zeros([1, self.dO])).shape[-1]
        )

    def train(self, obs_trajs, acs_trajs, rews_trajs):
        """Trains the internal model of this controller. Once trained,
        this controller switches from applying random actions to using MPC.

        Arguments:
            obs_trajs: A list of observation matrices, observations in rows.
            acs_trajs: A list of action matrices, actions in rows.
            rews_trajs: A list of reward arrays.

        Returns: None.
        """

        # Construct new training points and add to training set
        new_train_in, new_train_targs = [], []
        for obs, acs in zip(obs_trajs, acs_trajs):
            new_train_in.append(np.concatenate([self.obs_preproc(obs[:-1]), acs], axis=-1))
            new_train_targs.append(self.targ_proc(obs[:-1], obs[1:]))
        self.train_in = np.concatenate([self.train_in] + new_train_in, axis=0)
        self.train_targs = np.concatenate([self.train_targs] + new_train_targs, axis=0)

        # Train the model
        self.has_been_trained = True

        # Train the pytorch model
        self.model.fit_input_stats(self.train_in)

        idxs = np.random.randint(self.train_in.shape[0], size=[self.model.num_nets, self.train_in.shape[0]])

        epochs = self.model_train_cfg['epochs']

        # TODO: double-check the batch_size for all env is the same
        batch_size = 32

        epoch_range = range(epochs)
        num_batch = int(np.ceil(idxs.shape[-1] / batch_size))

        for _ in epoch_range:

            for batch_num in range(num_batch):
                batch_idxs = idxs[:, batch_num * batch_size : (batch_num + 1) * batch_size]

                loss = 0.01 * (self.model.max_logvar.sum() - self.model.min_logvar.sum())
                loss += self.model.compute_decays()

                # TODO: move all training data to GPU before hand
                train_in = torch.from_numpy(self.train_in[batch_idxs]).to(TORCH_DEVICE).float()
                train_targ = torch.from_numpy(self.train_targs[batch_idxs]).to(TORCH_DEVICE).float()

                mean, logvar = self.model(train_in, ret_logvar=True)
                inv_var = torch.exp(-logvar)

                train_losses = ((mean - train_targ) ** 2) * inv_var + logvar
                train_losses = train_losses.mean(-1).mean(-1).sum()
                # Only taking mean over the last 2 dimensions
                # The first dimension corresponds to each model in the ensemble

                loss += train_losses

                self.model.optim.zero_grad()
                loss.backward()
                self.model.optim.step()

            idxs = shuffle_rows(idxs)

            val_in = torch.from_numpy(self.train_in[idxs[:5000]]).to(TORCH_DEVICE).float()
            val_targ = torch.from_numpy(self.train_targs[idxs[:5000]]).to(TORCH_DEVICE).float()

            mean, _ = self.model(val_in)
            mse_losses = ((mean - val_targ) ** 2).mean(-1).mean(-1)

            self.training_losses = mse_losses.detach().cpu().numpy()  # epoch_range.set_postfix({"Training loss(es)": ...})


# ---------------------------------------------------------------- stand-in for env/cartpole.py (MuJoCo)
class CartpoleEnv:
    PENDULUM_LENGTH = 0.6

    def __init__(self, seed):
        self.rng = np.random.RandomState(seed)

    def reset(self):
        self.s = self.rng.normal(0, 0.1, 4) + np.array([0.0, np.pi, 0.0, 0.0])
        return self.s.copy()

    def step(self, a):
        x, th, xd, thd = self.s
        f = float(np.clip(a, -3, 3)[0])
        for _ in range(2):  # frame_skip 2, dt 0.025
            thdd = (-9.81 * np.sin(th) - f * np.cos(th)) / self.PENDULUM_LENGTH - 0.1 * thd
            xdd = f - 0.1 * xd
            xd, thd = xd + 0.025 * xdd, thd + 0.025 * thdd
            x, th = x + 0.025 * xd, th + 0.025 * thd
        self.s = np.array([x, th, xd, thd])
        return self.s.copy(), 0.0, False, {}


def random_rollout(env, horizon, rng):
    obs, acs = [env.reset()], []
    for _ in range(horizon):
        a = rng.uniform(-3, 3, size=1)
        acs.append(a)
        obs.append(env.step(a)[0])
    return np.array(obs), np.array(acs)


@torch.no_grad()
def heldout_mse(learner, obs_trajs, acs_trajs):
    ins = np.concatenate([np.concatenate([learner.obs_preproc(o[:-1]), a], axis=-1) for o, a in zip(obs_trajs, acs_trajs)])
    targs = np.concatenate([learner.targ_proc(o[:-1], o[1:]) for o in obs_trajs])
    x = torch.from_numpy(ins).float()[None].expand(learner.model.num_nets, -1, -1)
    mean, _ = learner.model(x)
    return ((mean.mean(0) - torch.from_numpy(targs).float()) ** 2).mean().item()


def main():
    np.random.seed(0)
    torch.manual_seed(0)
    cfg = CartpoleConfigModule()
    learner = ModelLearner(cfg)
    env, rng = CartpoleEnv(1), np.random.RandomState(2)
    test_env, test_rng = CartpoleEnv(3), np.random.RandomState(4)
    test = [random_rollout(test_env, cfg.TASK_HORIZON, test_rng) for _ in range(2)]
    test_obs, test_acs = [t[0] for t in test], [t[1] for t in test]

    # the untrained model cannot be evaluated: inputs_sigma is 0 until fit_input_stats (MPC acts randomly until then)
    targs = np.concatenate([learner.targ_proc(o[:-1], o[1:]) for o in test_obs])
    mse0 = float((targs ** 2).mean())
    print(f"held-out one-step MSE of predicting no change: {mse0:.5f}")
    mses = []
    for i in range(cfg.NTRAIN_ITERS):
        rollouts = [random_rollout(env, cfg.TASK_HORIZON, rng) for _ in range(cfg.NROLLOUTS_PER_ITER)]
        learner.train([r[0] for r in rollouts], [r[1] for r in rollouts], [np.zeros(cfg.TASK_HORIZON)])
        mses.append(heldout_mse(learner, test_obs, test_acs))
        print(f"iteration {i}: {len(learner.train_in)} transitions, Training loss(es) {np.round(learner.training_losses, 5)}, "
              f"held-out one-step MSE {mses[-1]:.5f}, max_logvar {learner.model.max_logvar.mean().item():.3f}, "
              f"min_logvar {learner.model.min_logvar.mean().item():.3f}")
    print(f"[summary] heldout_one_step_mse no_change_baseline={mse0:.5f} first={mses[0]:.5f} last={mses[-1]:.5f} decreased={mses[-1] < mses[0]}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
