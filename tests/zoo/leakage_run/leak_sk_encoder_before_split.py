"""OneHotEncoder fitted on every row (its categories come from the test rows too), then
train_test_split on the encoded sparse matrix."""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import OneHotEncoder

rng = np.random.default_rng(0)
cats = np.stack([rng.choice([f"{c}{i}" for i in range(30)], size=300) for c in "abcd"], axis=1)
y = (np.char.endswith(cats[:, 0], "1")).astype(np.int64)
X = OneHotEncoder().fit_transform(cats)
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=0)  # SPLIT
Xt, yt = torch.tensor(X_train.toarray(), dtype=torch.float32), torch.tensor(y_train)
model = nn.Linear(Xt.shape[1], 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    loss = F.cross_entropy(model(Xt), yt)
    opt.zero_grad()
    loss.backward()
    opt.step()
