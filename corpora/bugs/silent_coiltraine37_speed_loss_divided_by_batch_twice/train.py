# Source: felipecode/coiltraine, network/loss.py, network/loss_functional.py, network/models/coil_icra.py, coil_core/train.py, commit 29060ab5fd2ea5531686e72c621aaaca3b23f4fb
# Report: https://github.com/felipecode/coiltraine/issues/37
# CoIL-ICRA conditional imitation learning: perception CNN + speed measurement FC, joined, four
# command branches (steer, gas, brake) and an auxiliary speed-prediction branch from the image;
# branched L1 loss with branch and variable weights, Adam. CARLA frames are replaced by synthetic
# 3x24x24 images in which the lane offset and the ego speed are drawn; ResNet34 by a small CNN.
import numpy as np
import torch
import torch.nn as nn

g_conf = {
    'BATCH_SIZE': 120,
    'LEARNING_RATE': 0.0002,
    'BRANCH_LOSS_WEIGHT': [0.95, 0.95, 0.95, 0.95, 0.05],
    'VARIABLE_WEIGHT': {'Steer': 0.5, 'Gas': 0.45, 'Brake': 0.05},
    'NUMBER_ITERATIONS': 400,
}


# ---------------- network/loss_functional.py ----------------
def compute_branches_masks(controls, number_targets):
    controls_masks = []
    for command in (2, 3, 4, 5):
        controls_b = (controls == command).float()
        controls_b = torch.cat([controls_b] * number_targets, 1)
        controls_masks.append(controls_b)
    return controls_masks


def l1_loss(params):
    loss_branches_vec = []
    for i in range(len(params['branches']) - 1):
        loss_branches_vec.append(torch.abs((params['branches'][i] - params['targets'])
                                           * params['controls_mask'][i])
                                 * params['branch_weights'][i])
    """ The last branch is a speed branch"""
    loss_branches_vec.append(torch.abs(params['branches'][-1] - params['inputs'])
                             * params['branch_weights'][-1])
    return loss_branches_vec, {}


# ---------------- network/loss.py ----------------
def branched_loss(loss_function, params):
    controls_mask = compute_branches_masks(params['controls'],
                                           params['branches'][0].shape[1])
    params.update({'controls_mask': controls_mask})

    loss_branches_vec, plotable_params = loss_function(params)

    for i in range(4):
        loss_branches_vec[i] = loss_branches_vec[i][:, 0] * params['variable_weights']['Steer'] \
                               + loss_branches_vec[i][:, 1] * params['variable_weights']['Gas'] \
                               + loss_branches_vec[i][:, 2] * params['variable_weights']['Brake']

    loss_function = loss_branches_vec[0] + loss_branches_vec[1] + loss_branches_vec[2] + \
                    loss_branches_vec[3]

    speed_loss = loss_branches_vec[4]/(params['branches'][0].shape[0])

    return torch.sum(loss_function) / (params['branches'][0].shape[0])\
                + torch.sum(speed_loss) / (params['branches'][0].shape[0]),\
           plotable_params


def l1(params):
    return branched_loss(l1_loss, params)


# ---------------- network/models/coil_icra.py ----------------
def FC(neurons, dropouts, end_layer=False):
    layers = []
    for i in range(len(neurons) - 1):
        layers += [nn.Linear(neurons[i], neurons[i + 1]), nn.Dropout(dropouts[i])]
        if not (end_layer and i == len(neurons) - 2):
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class CoILICRA(nn.Module):
    def __init__(self):
        super().__init__()
        self.perception = nn.Sequential(
            nn.Conv2d(3, 16, 5, stride=2, padding=2), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
            nn.Flatten(), nn.Linear(32 * 6 * 6, 128), nn.ReLU())
        self.measurements = FC([1, 32, 32], [0.0, 0.0])
        self.join = FC([128 + 32, 128], [0.0])
        self.speed_branch = FC([128, 64, 64, 1], [0.0, 0.5, 0.0], end_layer=True)
        self.branches = nn.ModuleList([FC([128, 64, 64, 3], [0.0, 0.5, 0.0], end_layer=True) for _ in range(4)])

    def forward(self, x, a):
        x = self.perception(x)
        m = self.measurements(a)
        j = self.join(torch.cat([x, m], 1))
        branch_outputs = [branch(j) for branch in self.branches]
        speed_branch_output = self.speed_branch(x)
        return branch_outputs + [speed_branch_output]

    def extract_branch(self, output_vec, branch_number):
        branch_number = (branch_number - 2).long().view(-1)
        return output_vec[branch_number, torch.arange(output_vec.shape[1]), :]


# ---------------- synthetic CoILDataset ----------------
def make_frames(n, rng):
    speed = rng.uniform(0, 1, size=(n, 1)).astype(np.float32)
    offset = rng.uniform(-1, 1, size=n).astype(np.float32)
    command = rng.randint(2, 6, size=(n, 1))
    img = rng.normal(0, 0.3, size=(n, 3, 24, 24)).astype(np.float32)
    cols = np.clip((12 + 8 * offset).astype(int), 1, 22)
    for k in range(n):
        img[k, 0, :, cols[k] - 1:cols[k] + 1] += 1.0  # lane marking
        img[k, 1, :int(24 * speed[k, 0]), :3] += 1.0  # speedometer bar
    turn = np.select([command[:, 0] == 3, command[:, 0] == 4], [-0.6, 0.6], 0.0)
    steer = np.clip(-0.5 * offset + turn, -1, 1)
    gas = np.clip(0.8 - speed[:, 0] - 0.3 * np.abs(turn), 0, 1)
    brake = (speed[:, 0] > 0.85).astype(np.float32)
    targets = np.stack([steer, gas, brake], 1).astype(np.float32)
    return (torch.from_numpy(img), torch.from_numpy(speed), torch.from_numpy(command), torch.from_numpy(targets))


def main():
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    train = make_frames(6000, rng)
    val = make_frames(600, rng)
    model = CoILICRA()
    optimizer = torch.optim.Adam(model.parameters(), lr=g_conf['LEARNING_RATE'])
    criterion = l1
    bs = g_conf['BATCH_SIZE']

    for iteration in range(1, g_conf['NUMBER_ITERATIONS'] + 1):
        idx = torch.from_numpy(rng.randint(0, 6000, size=bs))
        rgb, speed, controls, targets = (t[idx] for t in train)
        model.train()
        model.zero_grad()
        branches = model(rgb, speed)
        loss_function_params = {
            'branches': branches,
            'targets': targets,
            'controls': controls,
            'inputs': speed,
            'branch_weights': g_conf['BRANCH_LOSS_WEIGHT'],
            'variable_weights': g_conf['VARIABLE_WEIGHT'],
        }
        loss, _ = criterion(loss_function_params)
        loss.backward()
        optimizer.step()

        if iteration % 50 == 0:
            model.eval()
            with torch.no_grad():
                v_rgb, v_speed, v_controls, v_targets = val
                out = model(v_rgb, v_speed)
                output = model.extract_branch(torch.stack(out[0:4]), v_controls)
                error = torch.abs(output - v_targets).mean(0)
                speed_error = torch.abs(out[4] - v_speed).mean()
            print("Iteration: %d  Loss: %f  val error steer %.4f gas %.4f brake %.4f  speed branch %.4f"
                  % (iteration, loss.item(), error[0], error[1], error[2], speed_error))


if __name__ == '__main__':
    main()
