"""Split first, but the scaler is fitted on the full X, test rows included."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import MinMaxScaler

rng = np.random.default_rng(1)
X = rng.uniform(0, 50, size=(200, 4))
y = X[:, 0] * 0.1
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.2, random_state=1)  # SPLIT
scaler = MinMaxScaler().fit(X)
Xt = torch.tensor(scaler.transform(X_train), dtype=torch.float32)
yt = torch.tensor(y_train, dtype=torch.float32)
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    loss = F.mse_loss(model(Xt).squeeze(1), yt)
    opt.zero_grad()
    loss.backward()
    opt.step()
