# Source: electronicarts/rig-inversion, train_rig_approximation.py, commit 32b670de759f43b31e9518da56c8ef26bf1a84ff
# Report: https://github.com/electronicarts/rig-inversion/issues/2
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader


class ToyDataset():
    def __init__(self, rig_controls, vertices):

        self.rig_controls = rig_controls
        self.vertices = vertices

        assert len(rig_controls) == len(vertices)

        self.length = len(rig_controls)
        self.num_vertices = len(vertices[0])
        self.num_ctrl = len(rig_controls[0])

    def __getitem__(self, index):

        return torch.tensor(self.rig_controls[index]).float(), torch.tensor(self.vertices[index]).flatten().float()

    def __len__(self):

        return self.length


def make_rig_2_mesh_model(num_ctrl, model_shape, num_out):
    layers, width = [], num_ctrl
    for w in model_shape:
        layers += [nn.Linear(width, w), nn.ReLU()]
        width = w
    layers.append(nn.Linear(width, num_out))
    return nn.Sequential(*layers)


def generate_toy_dataset(n=1000, num_ctrl=8, num_vertices=12, seed=0):
    rng = np.random.default_rng(seed)
    ctrl = rng.uniform(-1, 1, (n, num_ctrl))
    basis = rng.normal(0, 1, (num_ctrl, num_vertices * 3))
    verts = np.tanh(ctrl @ basis) + 0.3 * rng.normal(0, 1, (n, num_vertices * 3))
    return {'arr_0': ctrl, 'arr_1': verts.reshape(n, num_vertices, 3)}


def train():
    torch.manual_seed(0)
    model_shape = [256, 256]

    data = generate_toy_dataset()
    #We keep 10% of the dataset as a validation set
    dataset = ToyDataset(data['arr_0'][:-100], data['arr_1'][:-100])
    validate_dataset = ToyDataset(data['arr_0'][100:], data['arr_1'][100:])

    print(len(dataset), 'training samples', len(validate_dataset), 'validation samples')

    dataloader = DataLoader(dataset, 32, num_workers=0, drop_last=False, shuffle=True)
    validate_dataloader = DataLoader(validate_dataset, 32, num_workers=0, drop_last=False, shuffle=False)

    model = make_rig_2_mesh_model(dataset.num_ctrl, model_shape, dataset.num_vertices*3)
    model.train()

    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999))
    criterion = nn.MSELoss()

    epoch = 0
    best_val = 1000000

    while epoch < 40:
        num_batch = 0
        sum_loss = 0
        sum_loss_validate = 0
        num_batch_validate = 0
        model.train()

        for batch in dataloader:

                ctrl_batch, vertex_batch = batch

                optimizer.zero_grad()
                out_vertex = model(ctrl_batch)

                loss = criterion(out_vertex, vertex_batch).mean()
                sum_loss += loss.item()
                num_batch += 1

                loss.backward()
                optimizer.step()

        with torch.no_grad():
            model.eval()
            for batch in validate_dataloader:

                ctrl_batch, vertex_batch = batch

                out_vertex = model(ctrl_batch)
                loss = criterion(out_vertex, vertex_batch).mean()

                sum_loss_validate += loss.item()
                num_batch_validate += 1

        sum_loss /= num_batch
        sum_loss_validate /= num_batch_validate
        best_val = min(best_val, sum_loss_validate)

        if epoch % 5 == 4:
            print(epoch, "training loss", round(sum_loss, 4), "validate loss", round(sum_loss_validate, 4), "best", round(best_val, 4))

        epoch += 1
    print("noise floor of an honest validation loss: 0.09")


if __name__ == "__main__":

    train()
