# Source: iamwangyabin/S-Prompts, methods/sprompt.py (SPrompts._train, train_function, clustering, _eval_cnn), models/sinet.py (ViT_Prompts, SiNet), commit a26e822ae1b139d7bc7663740ea5a951b12be250
# Report: https://github.com/iamwangyabin/S-Prompts/pull/2
# S-Prompts (domain-incremental learning): a frozen ViT, one prompt (prompt_pool[t]) and one
# classifier (classifier_pool[t]) per domain; each task trains only its own prompt and
# classifier, then k-means keys of the domain's features select the prompt at test time.
# The pretrained ViT-B/16 is reduced to a 2-block ViT on 16x16 images (random weights, frozen),
# CDDB's real/fake domains are synthetic two-class domains, three tasks of 3 epochs each.
import copy

import numpy as np
import torch
import torch.nn as nn
from sklearn.cluster import KMeans
from torch import optim
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

ARGS = {"dataset": "cddb", "embd_dim": 32, "prompt_length": 4, "total_sessions": 3, "init_epoch": 3,
        "init_lr": 0.01, "init_weight_decay": 2e-4, "epochs": 3, "lrate": 0.01, "weight_decay": 2e-4,
        "batch_size": 32, "EPSILON": 1e-8}


class ViT_Prompts(nn.Module):
    """ViT whose forward inserts the instance (prompt) tokens after the class token."""
    def __init__(self, img_size=16, patch_size=4, in_chans=3, embed_dim=32, depth=2, num_heads=4):
        super().__init__()
        self.patch_embed = nn.Conv2d(in_chans, embed_dim, patch_size, patch_size)
        num_patches = (img_size // patch_size) ** 2
        self.cls_token = nn.Parameter(torch.randn(1, 1, embed_dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches + 1, embed_dim) * 0.02)
        self.pos_drop = nn.Dropout(0.0)
        self.blocks = nn.Sequential(*[nn.TransformerEncoderLayer(embed_dim, num_heads, 4 * embed_dim, 0.0,
                                                                 batch_first=True, norm_first=True)
                                      for _ in range(depth)])
        self.norm = nn.LayerNorm(embed_dim)
        self.out_dim = embed_dim

    def forward(self, x, instance_tokens=None, **kwargs):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)

        if instance_tokens is not None:
            instance_tokens = instance_tokens.to(x.dtype) + torch.zeros(x.shape[0], 1, x.shape[-1], dtype=x.dtype, device=x.device)

        x = x + self.pos_embed.to(x.dtype)
        if instance_tokens is not None:
            x = torch.cat([x[:, :1, :], instance_tokens, x[:, 1:, :]], dim=1)

        x = self.pos_drop(x)
        x = self.blocks(x)
        x = self.norm(x)
        return x[:, 0]


class SiNet(nn.Module):

    def __init__(self, args):
        super(SiNet, self).__init__()
        self.image_encoder = ViT_Prompts(embed_dim=args["embd_dim"])

        self.class_num = 2
        self.classifier_pool = nn.ModuleList([
            nn.Linear(args["embd_dim"], self.class_num, bias=True)
            for i in range(args["total_sessions"])
        ])

        self.prompt_pool = nn.ModuleList([
            nn.Linear(args["embd_dim"], args["prompt_length"], bias=False)
            for i in range(args["total_sessions"])
        ])

        self.numtask = 0

    @property
    def feature_dim(self):
        return self.image_encoder.out_dim

    def extract_vector(self, image):
        image_features = self.image_encoder(image)
        image_features = image_features / image_features.norm(dim=-1, keepdim=True)
        return image_features

    def forward(self, image):
        logits = []
        image_features = self.image_encoder(image, self.prompt_pool[self.numtask-1].weight)
        for prompts in [self.classifier_pool[self.numtask-1]]:
            logits.append(prompts(image_features))

        return {
            'logits': torch.cat(logits, dim=1),
            'features': image_features
        }

    def interface(self, image, selection):
        instance_batch = torch.stack([i.weight for i in self.prompt_pool], 0)[selection, :, :]
        image_features = self.image_encoder(image, instance_batch)

        logits = []
        for prompt in self.classifier_pool:
            logits.append(prompt(image_features))

        logits = torch.cat(logits, 1)
        selectedlogit = []
        for idx, ii in enumerate(selection):
            selectedlogit.append(logits[idx][self.class_num*ii:self.class_num*ii+self.class_num])
        selectedlogit = torch.stack(selectedlogit)
        return selectedlogit

    def update_fc(self, nb_classes):
        self.numtask += 1

    def copy(self):
        return copy.deepcopy(self)

    def freeze(self):
        for param in self.parameters():
            param.requires_grad = False
        self.eval()
        return self


def make_domain(t, n, g):
    """Domain t: its own colour cast and texture; label 1 ('fake') adds a periodic artefact."""
    y = torch.randint(0, 2, (n,), generator=g)
    x = 0.5 * torch.randn(n, 3, 16, 16, generator=g)
    x[:, t] += 1.5
    grid = torch.arange(16).float()
    artefact = torch.sin(grid * (1.5 + t)).view(1, 1, 16) * torch.cos(grid * (0.7 + t)).view(1, 16, 1)
    x = x + 2.5 * y.view(n, 1, 1, 1).float() * artefact
    return x, y + 2 * t


class SPrompts(object):

    def __init__(self, args):
        self._cur_task = -1
        self._known_classes = 0
        self._total_classes = 0
        self._old_network = None
        self._device = "cpu"
        self._network = SiNet(args)

        self.args = args
        self.EPSILON = args["EPSILON"]
        self.init_epoch = args["init_epoch"]
        self.init_lr = args["init_lr"]
        self.init_weight_decay = args["init_weight_decay"]
        self.epochs = args["epochs"]
        self.lrate = args["lrate"]
        self.batch_size = args["batch_size"]
        self.weight_decay = args["weight_decay"]

        self.topk = 1
        self.class_num = self._network.class_num

        self.all_keys = []

    def after_task(self):
        self._old_network = self._network.copy().freeze()
        self._known_classes = self._total_classes

    def incremental_train(self, data):
        self._cur_task += 1
        self._total_classes = self._known_classes + 2
        self._network.update_fc(self._total_classes)

        train_x, train_y = data["train"][self._cur_task]
        self.train_loader = DataLoader(TensorDataset(train_x, train_y), batch_size=self.batch_size, shuffle=True)
        test_x = torch.cat([data["test"][t][0] for t in range(self._cur_task + 1)])
        test_y = torch.cat([data["test"][t][1] for t in range(self._cur_task + 1)])
        self.test_loader = DataLoader(TensorDataset(test_x, test_y), batch_size=self.batch_size, shuffle=False)

        self._train(self.train_loader, self.test_loader)
        self.clustering(self.train_loader)

    def _train(self, train_loader, test_loader):
        for name, param in self._network.named_parameters():
            param.requires_grad_(False)
            if "classifier_pool" + "." + str(self._network.numtask - 1) in name:
                param.requires_grad_(True)
            if "prompt_pool" + "." + str(self._network.numtask - 1) in name:
                param.requires_grad_(True)

        # Double check
        enabled = set()
        for name, param in self._network.named_parameters():
            if param.requires_grad:
                enabled.add(name)
        print(f"Parameters to be updated: {sorted(enabled)}")
        if self._cur_task == 0:
            optimizer = optim.SGD(self._network.parameters(), momentum=0.9, lr=self.init_lr, weight_decay=self.init_weight_decay)
            scheduler = optim.lr_scheduler.CosineAnnealingLR(optimizer=optimizer, T_max=self.init_epoch)
            self.run_epoch = self.init_epoch
            self.train_function(train_loader, test_loader, optimizer, scheduler)
        else:
            optimizer = optim.SGD(self._network.parameters(), momentum=0.9, lr=self.lrate, weight_decay=self.weight_decay)
            scheduler = optim.lr_scheduler.CosineAnnealingLR(optimizer=optimizer, T_max=self.epochs)
            self.run_epoch = self.epochs
            self.train_function(train_loader, test_loader, optimizer, scheduler)

    def train_function(self, train_loader, test_loader, optimizer, scheduler):
        for epoch in range(self.run_epoch):
            self._network.eval()
            losses = 0.
            correct, total = 0, 0
            for i, (inputs, targets) in enumerate(train_loader):
                mask = (targets >= self._known_classes).nonzero().view(-1)
                inputs = torch.index_select(inputs, 0, mask)
                targets = torch.index_select(targets, 0, mask) - self._known_classes

                logits = self._network(inputs)['logits']
                loss = F.cross_entropy(logits, targets)
                optimizer.zero_grad(set_to_none=False)
                loss.backward()
                optimizer.step()
                losses += loss.item()

                _, preds = torch.max(logits, dim=1)
                correct += preds.eq(targets.expand_as(preds)).cpu().sum()
                total += len(targets)

            scheduler.step()
            train_acc = np.around(correct.numpy() * 100 / total, decimals=2)
            print('Task {}, Epoch {}/{} => Loss {:.3f}, Train_accy {:.2f}'.format(
                self._cur_task, epoch + 1, self.run_epoch, losses / len(train_loader), train_acc))

    def clustering(self, dataloader):
        features = []
        for i, (inputs, targets) in enumerate(dataloader):
            mask = (targets >= self._known_classes).nonzero().view(-1)
            inputs = torch.index_select(inputs, 0, mask)
            with torch.no_grad():
                feature = self._network.extract_vector(inputs)
            feature = feature / feature.norm(dim=-1, keepdim=True)
            features.append(feature)
        features = torch.cat(features, 0).cpu().detach().numpy()
        clustering = KMeans(n_clusters=5, random_state=0, n_init=10).fit(features)
        self.all_keys.append(torch.tensor(clustering.cluster_centers_).to(feature.device))

    def _eval_cnn(self, loader):
        self._network.eval()
        y_pred, y_true = [], []
        for _, (inputs, targets) in enumerate(loader):
            with torch.no_grad():
                feature = self._network.extract_vector(inputs)

                taskselection = []
                for task_centers in self.all_keys:
                    tmpcentersbatch = []
                    for center in task_centers:
                        tmpcentersbatch.append((((feature - center) ** 2) ** 0.5).sum(1))
                    taskselection.append(torch.vstack(tmpcentersbatch).min(0)[0])

                selection = torch.vstack(taskselection).min(0)[1]
                outputs = self._network.interface(inputs, selection)

            predicts = torch.topk(outputs, k=self.topk, dim=1, largest=True, sorted=True)[1]
            y_pred.append(predicts.cpu().numpy())
            y_true.append(targets.cpu().numpy())

        return np.concatenate(y_pred), np.concatenate(y_true)

    def eval_task(self):
        y_pred, y_true = self._eval_cnn(self.test_loader)
        pred = y_pred.T[0]
        accs = []
        for t in range(self._cur_task + 1):
            sel = (y_true // 2) == t
            accs.append(100.0 * (pred[sel] == (y_true[sel] % 2)).mean())
        return accs


def main():
    torch.manual_seed(1993)
    np.random.seed(1993)
    g = torch.Generator().manual_seed(0)
    data = {"train": [make_domain(t, 256, g) for t in range(3)], "test": [make_domain(t, 128, g) for t in range(3)]}
    model = SPrompts(ARGS)
    for task in range(ARGS["total_sessions"]):
        model.incremental_train(data)
        accs = model.eval_task()
        net = model._network
        norms = " ".join(f"prompt_pool.{t}.weight {net.prompt_pool[t].weight.norm().item():.6f} "
                         f"classifier_pool.{t}.weight {net.classifier_pool[t].weight.norm().item():.6f}"
                         for t in range(task + 1))
        print(f"after task {task}: {norms}")
        print(f"after task {task}: accuracy per domain " + " ".join(f"{a:.2f}" for a in accs))
        model.after_task()


if __name__ == "__main__":
    main()
