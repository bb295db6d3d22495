# Source: as791/ZOO_Attack_PyTorch, setup_mnist_model.py, commit 625212c560d5b589a3a93a27247b2fe2e52d20c8
# Report: https://github.com/as791/ZOO_Attack_PyTorch/pull/10
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import TensorDataset


class MNIST(nn.Module):
  def __init__(self):
    super(MNIST, self).__init__()
    self.conv1 = nn.Conv2d(1, 8, 3, 1)
    self.conv2 = nn.Conv2d(8, 8, 3, 1)
    self.conv3= nn.Conv2d(8, 16, 3, 1)
    self.conv4= nn.Conv2d(16, 16, 3, 1)
    self.dropout1 = nn.Dropout(0.5)
    self.fc1 = nn.Linear(256, 200)
    self.fc2 = nn.Linear(200, 200)
    self.fc3 = nn.Linear(200, 10)

  def forward(self, x):
    x = self.conv1(x)
    x = F.relu(x)
    x = self.conv2(x)
    x = F.relu(x)
    x = F.max_pool2d(x, 2)
    x = self.conv3(x)
    x = F.relu(x)
    x = self.conv4(x)
    x = F.relu(x)
    x = F.max_pool2d(x, 2)
    x = torch.flatten(x,1)
    x = self.fc1(x)
    x = F.relu(x)
    x = self.dropout1(x)
    x = self.fc2(x)
    x = F.relu(x)
    x = self.fc3(x)
    return x

def fit(model,device,train_loader,val_loader,optimizer,criterion,epochs):
  data_loader = {'train':train_loader,'val':val_loader}
  print("Fitting the model...")
  train_loss,val_loss=[],[]
  train_acc,val_acc=[],[]
  for epoch in range(epochs):
    loss_per_epoch,val_loss_per_epoch=0,0
    acc_per_epoch,val_acc_per_epoch,total,val_total=0,0,0,0
    for phase in ('train','val'):
      for i,data in enumerate(data_loader[phase]):
        inputs,labels  = data[0].to(device),data[1].to(device)
        outputs = model(inputs)
        #preding classes of one batch
        preds = torch.max(outputs,1)[1]
        #calculating loss on the output of one batch
        loss = criterion(outputs,labels)
        if phase == 'train':
          acc_per_epoch+=(labels==preds).sum().item()
          total+= labels.size(0)
          optimizer.zero_grad()
          #grad calc w.r.t Loss func
          loss.backward()
          #update weights
          optimizer.step()
          loss_per_epoch+=loss.item()
        else:
          val_acc_per_epoch+=(labels==preds).sum().item()
          val_total+=labels.size(0)
          val_loss_per_epoch+=loss.item()
    print("Epoch: {} Loss: {:0.6f} Acc: {:0.6f} Val_Loss: {:0.6f} Val_Acc: {:0.6f}".format(epoch+1,loss_per_epoch/len(train_loader),acc_per_epoch/total,val_loss_per_epoch/len(val_loader),val_acc_per_epoch/val_total))
    train_loss.append(loss_per_epoch/len(train_loader))
    val_loss.append(val_loss_per_epoch/len(val_loader))
    train_acc.append(acc_per_epoch/total)
    val_acc.append(val_acc_per_epoch/val_total)
  return train_loss,val_loss,train_acc,val_acc


def synthetic_mnist(n, seed=0):
  g = torch.Generator().manual_seed(seed)
  templates = (torch.rand(10, 1, 28, 28, generator=torch.Generator().manual_seed(123)) > 0.75).float()
  labels = torch.randint(0, 10, (n,), generator=g)
  images = templates[labels] * 0.5 + torch.rand(n, 1, 28, 28, generator=g) * 0.8
  return TensorDataset((images - 0.5) * 4, labels)


if __name__ == '__main__':
  np.random.seed(42)
  torch.manual_seed(42)

  dataset = synthetic_mnist(3300)
  train_set, val_set = torch.utils.data.random_split(dataset, [3000, 300])
  train_loader = torch.utils.data.DataLoader(train_set,batch_size=16,shuffle=True)
  val_loader = torch.utils.data.DataLoader(val_set,batch_size=128,shuffle=True)

  device = torch.device("cpu")

  model = MNIST().to(device)

  optimizer = optim.SGD(model.parameters(),lr=0.01, momentum=0.9, nesterov=True, weight_decay=1e-6)
  criterion = nn.CrossEntropyLoss()

  train_loss,val_loss,train_acc,val_acc=fit(model,device,train_loader,val_loader,optimizer,criterion,6)
  model.eval()
  with torch.no_grad():
    x = torch.stack([val_set[i][0] for i in range(len(val_set))])
    y = torch.stack([val_set[i][1] for i in range(len(val_set))])
    print("val accuracy of the saved model in eval mode: {:0.6f}".format((model(x).argmax(1) == y).float().mean().item()))
