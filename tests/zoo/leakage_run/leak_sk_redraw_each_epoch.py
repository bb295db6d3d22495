"""train_test_split called every epoch without random_state."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.model_selection import train_test_split

rng = np.random.default_rng(3)
X = rng.normal(size=(200, 6)).astype(np.float32)
y = (X[:, 0] > 0).astype(np.int64)
model = nn.Linear(6, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    X_train, X_val, y_train, y_val = train_test_split(X, y, test_size=0.2)  # SPLIT
    for i in range(0, len(X_train), 40):
        xb, yb = torch.from_numpy(X_train[i:i + 40]), torch.from_numpy(y_train[i:i + 40])
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        val_acc = (model(torch.from_numpy(X_val)).argmax(1).numpy() == y_val).mean()
