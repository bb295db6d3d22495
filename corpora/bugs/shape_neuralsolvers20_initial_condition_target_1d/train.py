# Source: Photon-AI-Research/NeuralSolvers, PINNFramework/LossTerm.py, InitalCondition.py, PDELoss.py, BoundaryCondition.py, PINN.py, models/mlp.py, commit 2a9457257b35265d219db245eb765c6132559748
# Report: https://github.com/Photon-AI-Research/NeuralSolvers/issues/20
# Physics-informed neural network for the 1D heat equation u_t = u_xx on x in [-1, 1], t in [0, 0.5]
# with u(x, 0) = sin(pi x) and u(+-1, t) = 0, written with the PINNFramework loss terms.
import numpy as np
import torch
from torch import Tensor
from torch.nn import L1Loss, MSELoss, Module
from torch.utils.data import DataLoader, Dataset
import torch.nn as nn


class LossTerm:
    def __init__(self, dataset, norm='L2', weight=1.):
        if norm == 'L2':
            self.norm = MSELoss()
        elif norm == 'L1':
            self.norm = L1Loss()
        else:
            self.norm = norm
        self.dataset = dataset
        self.weight = weight


class InitialCondition(LossTerm):
    def __init__(self, dataset, norm='L2', weight=1.):
        super(InitialCondition, self).__init__(dataset, norm, weight)

    def __call__(self, x: Tensor, model: Module, gt_y: Tensor):
        prediction = model(x)
        return self.weight * self.norm(prediction, gt_y)


class PDELoss(LossTerm):
    def __init__(self, dataset, pde, norm='L2', weight=1.):
        super(PDELoss, self).__init__(dataset, norm, weight)
        self.dataset = dataset
        self.pde = pde

    def __call__(self, x: Tensor, model: Module, **kwargs):
        x.requires_grad = True  # setting requires grad to true in order to calculate
        u = model.forward(x)
        pde_residual = self.pde(x, u, **kwargs)
        zeros = torch.zeros(pde_residual.shape, device=pde_residual.device)
        return self.weight * self.norm(pde_residual, zeros)


class DirichletBC(LossTerm):
    def __init__(self, func, dataset, name, norm='L2', weight=1.):
        super(DirichletBC, self).__init__(dataset, norm, weight)
        self.name = name
        self.func = func

    def __call__(self, x, model):
        prediction = model(x)  # is equal to y
        return self.weight * self.norm(prediction, self.func(x))


class MLP(nn.Module):
    def __init__(self, input_size, output_size, hidden_size, num_hidden, lb, ub, activation=torch.tanh):
        super(MLP, self).__init__()
        self.linear_layers = nn.ModuleList()
        self.activation = activation
        self.init_layers(input_size, output_size, hidden_size, num_hidden)
        self.lb = torch.Tensor(lb).float()
        self.ub = torch.Tensor(ub).float()

    def init_layers(self, input_size, output_size, hidden_size, num_hidden):
        self.linear_layers.append(nn.Linear(input_size, hidden_size))
        for _ in range(num_hidden):
            self.linear_layers.append(nn.Linear(hidden_size, hidden_size))
        self.linear_layers.append(nn.Linear(hidden_size, output_size))

        for m in self.linear_layers:
            if isinstance(m, nn.Linear):
                nn.init.xavier_normal_(m.weight)
                nn.init.constant_(m.bias, 0)

    def forward(self, x):
        x = 2.0*(x - self.lb)/(self.ub - self.lb) - 1.0
        for i in range(len(self.linear_layers) - 1):
            x = self.linear_layers[i](x)
            x = self.activation(x)
        x = self.linear_layers[-1](x)
        return x


class InitialConditionDataset(Dataset):
    def __init__(self, n0, seed):
        rng = np.random.RandomState(seed)
        x = rng.uniform(-1, 1, n0)
        self.x = torch.tensor(np.stack([x, np.zeros(n0)], 1)).float()
        self.u = torch.tensor(np.sin(np.pi * x)).float()

    def __len__(self):
        return 1

    def __getitem__(self, idx):
        return self.x, self.u


class PDEDataset(Dataset):
    def __init__(self, nf, lb, ub, seed):
        rng = np.random.RandomState(seed)
        self.xf = torch.tensor(lb + (ub - lb) * rng.uniform(0, 1, (nf, 2))).float()

    def __len__(self):
        return 1

    def __getitem__(self, idx):
        return self.xf


class BoundaryDataset(Dataset):
    def __init__(self, nb, lb, ub, seed):
        rng = np.random.RandomState(seed)
        t = rng.uniform(lb[1], ub[1], nb)
        x = np.where(np.arange(nb) % 2 == 0, lb[0], ub[0])
        self.xb = torch.tensor(np.stack([x, t], 1)).float()

    def __len__(self):
        return 1

    def __getitem__(self, idx):
        return self.xb


class JoinedDataset(Dataset):
    def __init__(self, datasets):
        self.datasets = datasets

    def __len__(self):
        return 1

    def __getitem__(self, idx):
        return {name: ds[idx] for name, ds in self.datasets.items()}


def heat1d(x, u):
    grads = torch.ones(u.shape)
    grad_u = torch.autograd.grad(u, x, create_graph=True, grad_outputs=grads)[0]
    u_x, u_t = grad_u[:, 0], grad_u[:, 1]
    u_xx = torch.autograd.grad(u_x, x, create_graph=True, grad_outputs=torch.ones(u_x.shape))[0][:, 0]
    return u_t - u_xx


class PINN(nn.Module):
    def __init__(self, model, pde_loss, initial_condition, boundary_condition):
        super(PINN, self).__init__()
        self.model = model
        self.pde_loss = pde_loss
        self.initial_condition = initial_condition
        self.boundary_condition = boundary_condition
        self.dtype = torch.float32
        self.dataset = JoinedDataset({"Initial_Condition": initial_condition.dataset, "PDE": pde_loss.dataset,
                                      boundary_condition.name: boundary_condition.dataset})

    def forward(self, x):
        return self.model(x)

    def pinn_loss(self, training_data):
        pinn_loss = 0
        pinn_loss = pinn_loss + self.initial_condition(training_data["Initial_Condition"][0][0].type(self.dtype),
                                                       self.model,
                                                       training_data["Initial_Condition"][1][0].type(self.dtype))
        pinn_loss = pinn_loss + self.pde_loss(training_data["PDE"][0].type(self.dtype), self.model)
        pinn_loss = pinn_loss + self.boundary_condition(training_data[self.boundary_condition.name][0].type(self.dtype),
                                                        self.model)
        return pinn_loss

    def fit(self, epochs, learning_rate=1e-3):
        optim = torch.optim.Adam(self.model.parameters(), lr=learning_rate)
        data_loader = DataLoader(self.dataset, batch_size=1)
        for epoch in range(epochs):
            for training_data in data_loader:
                optim.zero_grad()
                pinn_loss = self.pinn_loss(training_data)
                pinn_loss.backward()
                if epoch % 200 == 0:
                    print("PINN Loss {:.5f} Epoch {} from {}".format(pinn_loss.item(), epoch, epochs))
                optim.step()


def main():
    torch.manual_seed(0)
    lb, ub = np.array([-1.0, 0.0]), np.array([1.0, 0.5])
    ic_dataset = InitialConditionDataset(n0=200, seed=1)
    initial_condition = InitialCondition(ic_dataset)
    pde_loss = PDELoss(PDEDataset(nf=500, lb=lb, ub=ub, seed=2), heat1d)
    dirichlet_bc = DirichletBC(lambda x: torch.zeros(x.shape[0], 1), BoundaryDataset(100, lb, ub, seed=3), name="dirichlet")
    model = MLP(input_size=2, output_size=1, hidden_size=32, num_hidden=3, lb=lb, ub=ub)
    pinn = PINN(model, pde_loss, initial_condition, dirichlet_bc)
    pinn.fit(600, learning_rate=3e-3)

    xs, ts = np.meshgrid(np.linspace(-1, 1, 101), np.linspace(0, 0.5, 51))
    grid = torch.tensor(np.stack([xs.ravel(), ts.ravel()], 1)).float()
    exact = np.exp(-np.pi ** 2 * ts.ravel()) * np.sin(np.pi * xs.ravel())
    with torch.no_grad():
        pred = model(grid)[:, 0].numpy()
    rel_l2 = np.linalg.norm(pred - exact) / np.linalg.norm(exact)
    print("relative L2 error against the exact solution: {:.4f}".format(rel_l2))


if __name__ == "__main__":
    main()
