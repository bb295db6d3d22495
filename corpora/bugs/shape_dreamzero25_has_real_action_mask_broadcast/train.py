# Source: dreamzero0/dreamzero, groot/vla/model/dreamzero/action_head/wan_flow_matching_action_tf.py (forward: timestep sampling, noising, per-sample dynamics and action losses), groot/vla/model/dreamzero/modules/flow_match_scheduler.py (FlowMatchScheduler), commit ab790c198fbce33503358efbbd4187ce9a89adf3
# Report: https://github.com/dreamzero0/dreamzero/issues/25
# DreamZero's flow-matching world-action head: video latents and action chunks are noised with
# the repository's FlowMatchScheduler (coupled timesteps: each action chunk shares the timestep
# of its latent frame block), a joint model predicts both noises, and the loss is the
# timestep-weighted video MSE plus the action MSE masked by action_mask and by has_real_action
# (samples without real actions contribute only to the video loss). The Wan DiT, VAE, CLIP and
# text encoders are replaced by a small MLP over flattened synthetic latents; autocast is off.
import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)


class FlowMatchScheduler():

    def __init__(self, num_inference_steps=100, num_train_timesteps=1000, shift=3.0, sigma_max=1.0, sigma_min=0.003/1.002, inverse_timesteps=False, extra_one_step=False, reverse_sigmas=False):
        self.num_train_timesteps = num_train_timesteps
        self.shift = shift
        self.sigma_max = sigma_max
        self.sigma_min = sigma_min
        self.inverse_timesteps = inverse_timesteps
        self.extra_one_step = extra_one_step
        self.reverse_sigmas = reverse_sigmas
        self.set_timesteps(num_inference_steps)

    def set_timesteps(self, num_inference_steps=100, denoising_strength=1.0, training=False, shift=None):
        if shift is not None:
            self.shift = shift
        sigma_start = self.sigma_min + (self.sigma_max - self.sigma_min) * denoising_strength
        if self.extra_one_step:
            self.sigmas = torch.linspace(sigma_start, self.sigma_min, num_inference_steps + 1)[:-1]
        else:
            self.sigmas = torch.linspace(sigma_start, self.sigma_min, num_inference_steps)
        if self.inverse_timesteps:
            self.sigmas = torch.flip(self.sigmas, dims=[0])
        self.sigmas = self.shift * self.sigmas / (1 + (self.shift - 1) * self.sigmas)
        if self.reverse_sigmas:
            self.sigmas = 1 - self.sigmas
        self.timesteps = self.sigmas * self.num_train_timesteps
        if training:
            x = self.timesteps
            y = torch.exp(-2 * ((x - num_inference_steps / 2) / num_inference_steps) ** 2)
            y_shifted = y - y.min()
            bsmntw_weighing = y_shifted * (num_inference_steps / y_shifted.sum())
            self.linear_timesteps_weights = bsmntw_weighing
            self.training = True
        else:
            self.training = False

    def add_noise(self, original_samples, noise, timestep):
        if isinstance(timestep, torch.Tensor):
            timestep = timestep.cpu()
        timestep_id = torch.argmin((self.timesteps.unsqueeze(1) - timestep.unsqueeze(0)).abs(), dim = 0)
        sigma = self.sigmas[timestep_id].to(device=original_samples.device, dtype=original_samples.dtype)
        while len(sigma.shape) < len(original_samples.shape):
            sigma = sigma.unsqueeze(-1)
        sample = (1 - sigma) * original_samples + sigma * noise
        return sample

    def training_target(self, sample, noise, timestep):
        target = noise - sample
        return target

    def training_weight(self, timestep):
        timestep_id = torch.argmin((self.timesteps.unsqueeze(1) - timestep.unsqueeze(0).to(self.timesteps.device)).abs(), dim = 0)
        weights = self.linear_timesteps_weights[timestep_id]
        return weights


NUM_FRAME_PER_BLOCK = 2
NUM_ACTION_PER_BLOCK = 4
C, H, W, ACTION_DIM = 4, 4, 4, 7


class JointDenoiser(nn.Module):
    def __init__(self, num_frames, num_actions, hidden=256):
        super().__init__()
        self.num_frames, self.num_actions = num_frames, num_actions
        self.video_dim = num_frames * C * H * W
        self.action_dim = num_actions * ACTION_DIM
        self.net = nn.Sequential(
            nn.Linear(self.video_dim + self.action_dim + num_frames + num_actions, hidden), nn.SiLU(),
            nn.Linear(hidden, hidden), nn.SiLU(),
            nn.Linear(hidden, self.video_dim + self.action_dim))

    def forward(self, x, timestep, action, timestep_action):
        b = x.shape[0]
        h = torch.cat([x.reshape(b, -1), action.reshape(b, -1), timestep / 1000.0, timestep_action / 1000.0], dim=1)
        out = self.net(h)
        video = out[:, :self.video_dim].reshape(b, self.num_frames, C, H, W)
        act = out[:, self.video_dim:].reshape(b, self.num_actions, ACTION_DIM)
        return video, act


def make_batch(batch_size, num_blocks, rng):
    num_frames = 1 + num_blocks * NUM_FRAME_PER_BLOCK
    phase = rng.uniform(0, 2 * np.pi, (batch_size, 1, 1, 1, 1))
    t = np.arange(num_frames).reshape(1, -1, 1, 1, 1)
    latents = np.sin(phase + 0.3 * t + np.linspace(0, 1, C * H * W).reshape(1, 1, C, H, W)).astype(np.float32)
    a_t = np.arange(num_blocks * NUM_ACTION_PER_BLOCK).reshape(1, -1, 1)
    actions = (0.8 * np.sin(phase[:, :, :, 0, 0] + 0.15 * a_t + np.arange(ACTION_DIM))).astype(np.float32)
    has_real_action = (rng.rand(batch_size) < 0.75).astype(np.float32)
    action_mask = np.ones_like(actions)
    return (torch.from_numpy(latents), torch.from_numpy(actions),
            torch.from_numpy(has_real_action), torch.from_numpy(action_mask))


def training_loss(model, scheduler, latents, actions, has_real_action, action_mask):
    noise = torch.randn_like(latents)
    timestep_id = torch.randint(0, scheduler.num_train_timesteps, (noise.shape[0], noise.shape[1]))
    timestep_id_block = timestep_id[:, 1:].reshape(
                timestep_id.shape[0], -1, NUM_FRAME_PER_BLOCK)
    timestep_id_block[:, :, 1:] = timestep_id_block[:, :, 0:1]
    noise_action = torch.randn_like(actions)
    timestep_action_id = timestep_id_block.repeat(1, 1, actions.shape[1]//(noise.shape[1]-1))
    timestep_action_id = timestep_action_id.reshape(timestep_action_id.shape[0], -1)
    timestep_id_block = timestep_id_block.reshape(timestep_id_block.shape[0], -1)
    timestep_id = torch.concat([timestep_id[:, :1], timestep_id_block], dim=1)

    timestep = scheduler.timesteps[timestep_id]
    noisy_latents = scheduler.add_noise(latents.flatten(0, 1), noise.flatten(0, 1), timestep.flatten(0, 1)).unflatten(0, (noise.shape[0], noise.shape[1]))
    training_target = scheduler.training_target(latents, noise, timestep)
    timestep_action = scheduler.timesteps[timestep_action_id]
    noisy_actions = scheduler.add_noise(
        actions.flatten(0, 1),
        noise_action.flatten(0, 1),
        timestep_action.flatten(0, 1),
    ).unflatten(0, (noise_action.shape[0], noise_action.shape[1]))
    training_target_action = scheduler.training_target(actions, noise_action, timestep_action)

    video_noise_pred, action_noise_pred = model(noisy_latents, timestep, noisy_actions, timestep_action)

    dynamics_loss_per_sample = torch.nn.functional.mse_loss(
        video_noise_pred.float(), training_target.float(), reduction='none'
    ).mean(dim=(2, 3, 4))  # shape: [B, F]
    weight_dynamics = dynamics_loss_per_sample * scheduler.training_weight(timestep.flatten(0, 1)).unflatten(0, (noise.shape[0], noise.shape[1]))
    weighted_dynamics_loss = weight_dynamics.mean()

    action_loss_per_sample = torch.nn.functional.mse_loss(
        action_noise_pred.float(), training_target_action.float(), reduction='none'
    ) * action_mask  # shape: [B, ...]
    action_loss_per_sample = has_real_action[:, None].float() * action_loss_per_sample  # apply has_real_action
    weight_action = action_loss_per_sample.mean(dim=2) * scheduler.training_weight(
        timestep_action.flatten(0, 1),
    ).unflatten(0, (noise_action.shape[0], noise_action.shape[1]))
    weighted_action_loss = weight_action.mean()
    loss = weighted_dynamics_loss + weighted_action_loss
    return loss, weighted_dynamics_loss, weighted_action_loss


if __name__ == "__main__":
    rng = np.random.RandomState(0)
    scheduler = FlowMatchScheduler(shift=5.0, sigma_min=0.0, extra_one_step=True)
    scheduler.set_timesteps(1000, training=True)
    num_blocks, batch_size = 2, 4
    model = JointDenoiser(1 + num_blocks * NUM_FRAME_PER_BLOCK, num_blocks * NUM_ACTION_PER_BLOCK)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    window = []
    for step in range(600):
        latents, actions, has_real_action, action_mask = make_batch(batch_size, num_blocks, rng)
        loss, dyn, act = training_loss(model, scheduler, latents, actions, has_real_action, action_mask)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        window.append((loss.item(), dyn.item(), act.item()))
        if (step + 1) % 100 == 0:
            m = np.mean(window, axis=0)
            print(f"steps {step - 98}-{step + 1}: mean loss {m[0]:.4f} dynamics {m[1]:.4f} action {m[2]:.4f}")
            window = []
