# Source: biomed-AI/Hist2ST, gcn.py (gs_block), graph_construction.py (calcADJ), HIST2ST.py (Hist2ST, mixer_transformer), transformer.py (attn_block), HIST2ST_train.py, commit 7480e5d1f7712282e6c96d8430684e7830517769
# Report: https://github.com/biomed-AI/Hist2ST/pull/7
# Hist2ST: spot patches of a histology slide -> convmixer -> transformer over the spots of the
# slide (with x/y position embeddings) -> GraphSAGE blocks over a spatial k-NN graph pruned to
# grid neighbours -> jumping-knowledge LSTM -> gene expression head, trained with MSE, one slide
# per batch. The HER2ST / HEST slides are replaced by synthetic slides (spots on a grid whose
# 20 "genes" follow the patch colour); one training slide has two stray spots off the grid, as
# in the HEST slides of the report. Sizes are reduced; the ZINB and self-distillation terms
# (zinb=0, bake=0 here) and the Lightning Trainer are written out as a plain loop.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from scipy.spatial import distance
from scipy.stats import pearsonr
from torch import einsum
from torch.autograd import Variable
from torch.nn import init
from torch.utils.data import DataLoader


def calcADJ(coord, k=8, distanceType='euclidean', pruneTag='NA'):
    r"""
    Calculate spatial Matrix directly use X/Y coordinates
    """
    spatialMatrix=coord#.cpu().numpy()
    nodes=spatialMatrix.shape[0]
    Adj=torch.zeros((nodes,nodes))
    for i in np.arange(spatialMatrix.shape[0]):
        tmp=spatialMatrix[i,:].reshape(1,-1)
        distMat = distance.cdist(tmp,spatialMatrix, distanceType)
        if k == 0:
            k = spatialMatrix.shape[0]-1
        res = distMat.argsort()[:k+1]
        tmpdist = distMat[0,res[0][1:k+1]]
        boundary = np.mean(tmpdist)+np.std(tmpdist) #optional
        for j in np.arange(1,k+1):
            # No prune
            if pruneTag == 'NA':
                Adj[i][res[0][j]]=1.0
            elif pruneTag == 'STD':
                if distMat[0,res[0][j]]<=boundary:
                    Adj[i][res[0][j]]=1.0
            # Prune: only use nearest neighbor as exact grid: 6 in cityblock, 8 in euclidean
            elif pruneTag == 'Grid':
                if distMat[0,res[0][j]]<=2.0:
                    Adj[i][res[0][j]]=1.0
    return Adj


class gs_block(nn.Module):
    def __init__(
        self, feature_dim, embed_dim,
        policy='mean', gcn=False, num_sample=10
    ):
        super().__init__()
        self.gcn = gcn
        self.policy=policy
        self.embed_dim = embed_dim
        self.feat_dim = feature_dim
        self.num_sample = num_sample
        self.weight = nn.Parameter(torch.FloatTensor(
            embed_dim,
            self.feat_dim if self.gcn else 2*self.feat_dim
        ))
        init.xavier_uniform_(self.weight)

    def forward(self, x, Adj):
        neigh_feats = self.aggregate(x, Adj)
        if not self.gcn:
            combined = torch.cat([x, neigh_feats], dim=1)
        else:
            combined = neigh_feats
        combined = F.relu(self.weight.mm(combined.T)).T
        combined = F.normalize(combined,2,1)
        return combined
    def aggregate(self,x, Adj):
        adj=Variable(Adj).to(Adj.device)
        if not self.gcn:
            n=len(adj)
            adj = adj-torch.eye(n).to(adj.device)
        if self.policy=='mean':
            num_neigh = adj.sum(1, keepdim=True)
            mask = adj.div(num_neigh)
            to_feats = mask.mm(x)
        elif self.policy=='max':
            indexs = [i.nonzero() for i in adj==1]
            to_feats = []
            for feat in [x[i.squeeze()] for i in indexs]:
                if len(feat.size()) == 1:
                    to_feats.append(feat.view(1, -1))
                else:
                    to_feats.append(torch.max(feat,0)[0].view(1, -1))
            to_feats = torch.cat(to_feats, 0)
        return to_feats


class SelectItem(nn.Module):
    def __init__(self, item_index):
        super(SelectItem, self).__init__()
        self.item_index = item_index

    def forward(self, inputs):
        return inputs[self.item_index]


class PreNorm(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fn = fn
    def forward(self, x, **kwargs):
        return self.fn(self.norm(x), **kwargs)


class FeedForward(nn.Module):
    def __init__(self, dim, hidden_dim, dropout = 0.):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(dim, hidden_dim),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(hidden_dim, dim),
            nn.Dropout(dropout)
        )
    def forward(self, x):
        return self.net(x)


class Attention(nn.Module):
    def __init__(self, dim, heads = 8, dim_head = 64, dropout = 0.):
        super().__init__()
        inner_dim = dim_head *  heads
        project_out = not (heads == 1 and dim_head == dim)

        self.heads = heads
        self.scale = dim_head ** -0.5

        self.attend = nn.Softmax(dim = -1)
        self.to_qkv = nn.Linear(dim, inner_dim * 3, bias = False)

        self.to_out = nn.Sequential(
            nn.Linear(inner_dim, dim),
            nn.Dropout(dropout)
        ) if project_out else nn.Identity()

    def forward(self, x):
        b, n, _, h = *x.shape, self.heads
        qkv = self.to_qkv(x).chunk(3, dim = -1)
        q, k, v = map(lambda t: t.reshape(b, n, h, -1).permute(0, 2, 1, 3), qkv)
        dots = einsum('b h i d, b h j d -> b h i j', q, k) * self.scale
        attn = self.attend(dots)
        out = einsum('b h i j, b h j d -> b h i d', attn, v)
        out = out.permute(0, 2, 1, 3).reshape(b, n, -1)
        return self.to_out(out)


class attn_block(nn.Module):
    def __init__(self, dim, heads, dim_head, mlp_dim, dropout = 0.):
        super().__init__()
        self.attn=PreNorm(dim, Attention(dim, heads = heads, dim_head = dim_head, dropout = dropout))
        self.ff=PreNorm(dim, FeedForward(dim, mlp_dim, dropout = dropout))
    def forward(self, x):
        x = self.attn(x) + x
        x = self.ff(x) + x
        return x


class convmixer_block(nn.Module):
    def __init__(self,dim,kernel_size):
        super().__init__()
        self.dw=nn.Sequential(
                nn.Conv2d(dim, dim, kernel_size, groups=dim, padding="same"),
                nn.BatchNorm2d(dim),
                nn.GELU(),
                nn.Conv2d(dim, dim, kernel_size, groups=dim, padding="same"),
                nn.BatchNorm2d(dim),
                nn.GELU(),
        )
        self.pw=nn.Sequential(
            nn.Conv2d(dim, dim, kernel_size=1),
            nn.GELU(),
            nn.BatchNorm2d(dim),
        )
    def forward(self,x):
        x=self.dw(x)+x
        x=self.pw(x)
        return x


class mixer_transformer(nn.Module):
    def __init__(self,channel=32, kernel_size=5, dim=1024,
                 depth1=2, depth2=8, depth3=4,
                 heads=8, dim_head=64, mlp_dim=1024, dropout = 0.,
                 policy='mean',gcn=True
                ):
        super().__init__()
        self.layer1=nn.Sequential(
            *[convmixer_block(channel,kernel_size) for i in range(depth1)],
        )
        self.layer2=nn.Sequential(*[attn_block(dim,heads,dim_head,mlp_dim,dropout) for i in range(depth2)])
        self.layer3=nn.ModuleList([gs_block(dim,dim,policy,gcn) for i in range(depth3)])
        self.jknet=nn.Sequential(
            nn.LSTM(dim,dim,2),
            SelectItem(0),
        )
        self.down=nn.Sequential(
            nn.Conv2d(channel,channel//8,1,1),
            nn.Flatten(),
        )
    def forward(self,x,ct,adj):
        x=self.down(self.layer1(x))
        g=x.unsqueeze(0)
        g=self.layer2(g+ct).squeeze(0)
        jk=[]
        for layer in self.layer3:
            g=layer(g,adj)
            jk.append(g.unsqueeze(0))
        g=torch.cat(jk,0)
        g=self.jknet(g).mean(0)
        return g


class ViT(nn.Module):
    def __init__(self, channel=32,kernel_size=5,dim=1024,
                 depth1=2, depth2=8, depth3=4,
                 heads=8, mlp_dim=1024, dim_head = 64, dropout = 0.,
                 policy='mean',gcn=True
                ):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.transformer = mixer_transformer(
            channel, kernel_size, dim,
            depth1, depth2, depth3,
            heads, dim_head, mlp_dim, dropout,
            policy,gcn,
        )

    def forward(self,x,ct,adj):
        x = self.dropout(x)
        x = self.transformer(x,ct,adj)
        return x


class Hist2ST(nn.Module):
    def __init__(self, learning_rate=1e-5, fig_size=112, label=None,
                 dropout=0.2, n_pos=64, kernel_size=5, patch_size=7, n_genes=785,
                 depth1=2, depth2=8, depth3=4, heads=16, channel=32,
                 zinb=0, nb=False, bake=0, lamb=0, policy='mean',
                ):
        super().__init__()
        dim=(fig_size//patch_size)**2*channel//8
        self.learning_rate = learning_rate
        self.zinb=zinb
        self.bake=bake
        self.lamb=lamb
        self.label=label
        self.patch_embedding = nn.Conv2d(3,channel,patch_size,patch_size)
        self.x_embed = nn.Embedding(n_pos,dim)
        self.y_embed = nn.Embedding(n_pos,dim)
        self.vit = ViT(
            channel=channel, kernel_size=kernel_size, heads=heads,
            dim=dim, depth1=depth1,depth2=depth2, depth3=depth3,
            mlp_dim=dim, dim_head=16, dropout = dropout, policy=policy, gcn=True,
        )
        self.channel=channel
        self.patch_size=patch_size
        self.n_genes=n_genes
        self.gene_head = nn.Sequential(
            nn.LayerNorm(dim),
            nn.Linear(dim, n_genes),
        )
    def forward(self, patches, centers, adj, aug=False):
        B,N,C,H,W=patches.shape
        patches=patches.reshape(B*N,C,H,W)
        patches = self.patch_embedding(patches)
        centers_x = self.x_embed(centers[:,:,0])
        centers_y = self.y_embed(centers[:,:,1])
        ct=centers_x + centers_y
        h = self.vit(patches,ct,adj)
        x = self.gene_head(h)
        extra=None
        return x,extra,h
    def training_step(self, batch, batch_idx):
        patch, center, exp, adj, *_ = batch
        adj=adj.squeeze(0)
        exp=exp.squeeze(0)
        pred,extra,h = self(patch, center, adj)

        mse_loss = F.mse_loss(pred, exp)
        loss=mse_loss
        return loss

    def validation_step(self, batch, batch_idx):
        patch, center, exp, adj, *_ = batch
        pred,extra,h = self(patch, center, adj.squeeze(0))
        loss = F.mse_loss(pred.squeeze(0), exp.squeeze(0))

        pred=pred.squeeze(0).cpu().numpy().T
        exp=exp.squeeze(0).cpu().numpy().T
        r=[]
        for g in range(self.n_genes):
            r.append(pearsonr(pred[g],exp[g])[0])
        R=torch.Tensor(r).mean()
        return loss, R

    def configure_optimizers(self):
        optim=torch.optim.Adam(self.parameters(), lr=self.learning_rate)
        StepLR = torch.optim.lr_scheduler.StepLR(optim, step_size=50, gamma=0.9)
        optim_dict = {'optimizer': optim, 'lr_scheduler': StepLR}
        return optim_dict


class SyntheticSlides(torch.utils.data.Dataset):
    """Spots on a grid of a synthetic slide; the 20 genes are a fixed function of the patch colour."""
    def __init__(self, n_slides, seed, stray_slide=None, r=4, n_genes=20):
        rng = np.random.RandomState(seed)
        mix = np.random.RandomState(7).normal(0, 1, (3, n_genes))
        self.items = []
        for s in range(n_slides):
            w, h = rng.randint(6, 9), rng.randint(6, 9)
            loc = np.array([(x, y) for x in range(w) for y in range(h) if rng.rand() < 0.85])
            if s == stray_slide:
                loc = np.concatenate([loc, [[w + 4, h + 4], [w + 8, 1]]])
            colour = np.sin(loc[:, :1] / 2.0 + rng.rand() * 3) * np.array([[1.0, 0.3, -0.5]]) \
                + np.cos(loc[:, 1:] / 3.0) * np.array([[-0.2, 0.8, 0.4]])
            patches = colour[:, :, None, None] + 0.3 * rng.normal(0, 1, (len(loc), 3, 2 * r, 2 * r))
            exps = np.tanh(colour @ mix) + 0.1 * rng.normal(0, 1, (len(loc), n_genes))
            adj = calcADJ(loc, 4, pruneTag='Grid')
            self.items.append([torch.Tensor(patches), torch.LongTensor(loc), torch.Tensor(exps), adj])

    def __getitem__(self, index):
        return self.items[index]

    def __len__(self):
        return len(self.items)


def fit(model, train_loader, test_loader, max_epochs):
    """pl.Trainer(max_epochs, check_val_every_n_epoch=2).fit written out: step per batch,
    StepLR per epoch, validation every second epoch."""
    conf = model.configure_optimizers()
    optim, sched = conf['optimizer'], conf['lr_scheduler']
    for epoch in range(max_epochs):
        model.train()
        losses = []
        for batch_idx, batch in enumerate(train_loader):
            loss = model.training_step(batch, batch_idx)
            optim.zero_grad()
            loss.backward()
            optim.step()
            losses.append(loss.item())
        sched.step()
        msg = f"epoch {epoch}: mse_loss {np.mean(losses):.4f} (per batch: {' '.join(f'{v:.3f}' for v in losses)})"
        if epoch % 2 == 1:
            model.eval()
            with torch.no_grad():
                outs = [model.validation_step(b, i) for i, b in enumerate(test_loader)]
            msg += f" | valid_loss {np.mean([o[0].item() for o in outs]):.4f} R {np.mean([o[1].item() for o in outs]):.4f}"
        print(msg)


def main():
    np.random.seed(12000)
    torch.manual_seed(12000)
    genes = 20
    trainset = SyntheticSlides(6, seed=1, stray_slide=3, n_genes=genes)
    testset = SyntheticSlides(2, seed=2, n_genes=genes)
    train_loader = DataLoader(trainset, batch_size=1, num_workers=0, shuffle=True)
    test_loader = DataLoader(testset, batch_size=1, num_workers=0, shuffle=False)
    for i, item in enumerate(trainset.items):
        deg = item[3].sum(1)
        print(f"train slide {i}: {len(deg)} spots, grid neighbours min {int(deg.min())} max {int(deg.max())}")
    model = Hist2ST(
        depth1=1, depth2=1, depth3=2, fig_size=8,
        n_genes=genes, learning_rate=1e-3, label=None,
        kernel_size=3, patch_size=2,
        heads=2, channel=16, dropout=0.2,
        zinb=0, nb=False, bake=0, lamb=0,
        policy='mean',
    )
    fit(model, train_loader, test_loader, max_epochs=10)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
