# Source: nerminnuraydogan/vision-transformer, vision-transformer.ipynb (SelfAttention, MultiHeadSelfAttention, TransformerEncoder, MLPHead, VisionTransformer, training / test cells), commit 0ef862673e0456914dea82d4822539543766622e
# Report: https://github.com/nerminnuraydogan/vision-transformer/issues/1
# The notebook's from-scratch ViT (per-head SelfAttention with a U_kqv matrix, MSA, pre-norm
# encoder, MLP head on the [class] token) trained with the notebook's training / validation /
# test loop. CIFAR-10 is replaced by synthetic 3x32x32 images (10 classes, each a bright square
# at a class-specific position plus noise); the model is reduced (patch 8, D=32, 4 heads,
# 2 layers, MLP 64, head hidden 64); torchvision's pretrained vit_b_16 cell is not used.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.sampler import SubsetRandomSampler

D = 32       # embedding dimensionality
n_head = 4   # number of heads


class SelfAttention(nn.Module):
    def __init__(self, embedding_dim=768, key_dim=64):
        super(SelfAttention, self).__init__()

        self.embedding_dim = embedding_dim   # D -> embedding dimensionaltiy
        self.key_dim = key_dim               # D_h -> key, query, value dimensionality

        # U_kqv weight matrix
        self.W = nn.Parameter(torch.randn(embedding_dim, 3*key_dim) / np.sqrt(embedding_dim))

    def forward(self, x):
        key_dim = self.key_dim

        # get query, key and value projection
        qkv = torch.matmul(x, self.W)

        # get query, key, value
        q = qkv[:, :, :key_dim]
        k = qkv[:, :, key_dim:key_dim*2 ]
        v = qkv[:, :, key_dim*2:]

        # compute dot product of the all query with all keys
        k_T = torch.transpose(k, -2, -1)   # get transpose of key
        dot_products = torch.matmul(q, k_T)

        # divide each by √Dh
        scaled_dot_products = dot_products / np.sqrt(key_dim)

        # apply a softmax function to obtain attention weights -> A
        attention_weights = F.softmax(scaled_dot_products, dim=1)
        self.attention_weights = attention_weights.detach()

        # get weighted values
        weighted_values = torch.matmul(attention_weights, v)

        # return weighted_values
        return weighted_values


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, embedding_dim=768, num_heads=12):
        super(MultiHeadSelfAttention, self).__init__()

        self.num_heads = num_heads            # set number of heads (k)
        self.embedding_dim = embedding_dim    # set dimensionality

        assert embedding_dim % num_heads == 0   # dimensionality should be divisible by number of heads
        self.key_dim = embedding_dim // n_head   # set key,query and value dimensionality

        # init self-attentions
        self.attention_list = [SelfAttention(embedding_dim, self.key_dim) for _ in range(num_heads)]
        self.multi_head_attention = nn.ModuleList(self.attention_list)

        # init U_msa weight matrix
        self.W = nn.Parameter(torch.randn(num_heads * self.key_dim, embedding_dim) / np.sqrt(embedding_dim))

    def forward(self, x):
        # compute self-attention scores of each head
        attention_scores = [attention(x) for attention in self.multi_head_attention]

        # concat attentions
        Z = torch.cat(attention_scores, -1)

        # compute multi-head attention score
        attention_score = torch.matmul(Z, self.W)

        return attention_score


class MultiLayerPerceptron(nn.Module):
    def __init__(self, embedding_dim=768, hidden_dim=3072):
        super(MultiLayerPerceptron, self).__init__()

        self.mlp = nn.Sequential(
                            nn.Linear(embedding_dim, hidden_dim),
                            nn.GELU(),
                            nn.Linear(hidden_dim, embedding_dim)
                   )

    def forward(self, x):
        # pass through multi-layer perceptron
        x = self.mlp(x)
        return x


class TransformerEncoder(nn.Module):
    def __init__(self, embedding_dim=768, num_heads=12, hidden_dim=3072, dropout_prob=0.1):
        super(TransformerEncoder, self).__init__()

        self.MSA = MultiHeadSelfAttention(embedding_dim, num_heads)
        self.MLP = MultiLayerPerceptron(embedding_dim, hidden_dim)

        self.layer_norm1 = nn.LayerNorm(embedding_dim)
        self.layer_norm2 = nn.LayerNorm(embedding_dim)

        self.dropout1 = nn.Dropout(p=dropout_prob)
        self.dropout2 = nn.Dropout(p=dropout_prob)
        self.dropout3 = nn.Dropout(p=dropout_prob)

    def forward(self, x):
        # apply dropout
        out_1 = self.dropout1(x)
        # apply layer normalization
        out_2 = self.layer_norm1(out_1)
        # compute multi-head self-attention
        msa_out = self.MSA(out_2)
        # apply dropout
        out_3 = self.dropout2(msa_out)
        # apply residual connection
        res_out = x + out_3
        # apply layer normalization
        out_4 = self.layer_norm2(res_out)
        # compute mlp output
        mlp_out = self.MLP(out_4)
        # apply dropout
        out_5 = self.dropout3(mlp_out)
        # apply residual connection
        output = res_out + out_5

        return output


class MLPHead(nn.Module):
    def __init__(self, embedding_dim=768, num_classes=10, fine_tune=False):
        super(MLPHead, self).__init__()
        self.num_classes = num_classes

        if not fine_tune:
            # hidden layer with tanh activation function
            self.mlp_head = nn.Sequential(
                                    nn.Linear(embedding_dim, 64),  # hidden layer
                                    nn.Tanh(),
                                    nn.Linear(64, num_classes)    # output layer
                            )
        else:
            # single linear layer
            self.mlp_head = nn.Linear(embedding_dim, num_classes)

    def forward(self, x):
        x = self.mlp_head(x)
        return x


class VisionTransformer(nn.Module):
    def __init__(self, patch_size=16, image_size=224, channel_size=3,
                     num_layers=12, embedding_dim=768, num_heads=12, hidden_dim=3072,
                            dropout_prob=0.1, num_classes=10, pretrain=True):
        super(VisionTransformer, self).__init__()

        self.patch_size = patch_size
        self.channel_size = channel_size
        self.num_layers = num_layers
        self.embedding_dim = embedding_dim
        self.num_heads = num_heads
        self.hidden_dim = hidden_dim
        self.dropout_prob = dropout_prob
        self.num_classes = num_classes

        # get number of patches of the image
        self.num_patches = int(image_size ** 2 / patch_size ** 2)   # height * width / patch size ^ 2

        # trainable linear projection for mapping dimnesion of patches (weight matrix E)
        self.W = nn.Parameter(
                    torch.randn( patch_size * patch_size * channel_size, embedding_dim) / np.sqrt(patch_size * patch_size * channel_size))

        # position embeddings (E_pos)
        self.pos_embedding = nn.Parameter(torch.randn(self.num_patches + 1, embedding_dim))

        # learnable class token embedding (x_class)
        self.class_token = nn.Parameter(torch.rand(1, D))

        # stack transformer encoder layers
        transformer_encoder_list = [
            TransformerEncoder(embedding_dim, num_heads, hidden_dim, dropout_prob)
                    for _ in range(num_layers)]
        self.transformer_encoder_layers = nn.Sequential(*transformer_encoder_list)

        # mlp head
        self.mlp_head = MLPHead(embedding_dim, num_classes)

    def forward(self, x):
        # get patch size and channel size
        P, C = self.patch_size, self.channel_size

        # split image into patches
        patches = x.unfold(1, C, C).unfold(2, P, P).unfold(3, P, P)
        patches = patches.contiguous().view(patches.size(0), -1, C * P * P).float()

        # linearly embed patches
        patch_embeddings = torch.matmul(patches , self.W)

        # add class token
        batch_size = patch_embeddings.shape[0]
        patch_embeddings = torch.cat((self.class_token.repeat(batch_size, 1, 1), patch_embeddings), 1)

        # add positional embedding
        patch_embeddings = patch_embeddings + self.pos_embedding

        # feed patch embeddings into a stack of Transformer encoders
        transformer_encoder_output = self.transformer_encoder_layers(patch_embeddings)

        # extract [class] token from encoder output
        output_class_token = transformer_encoder_output[:, 0]

        # pass token through mlp head for classification
        y = self.mlp_head(output_class_token)

        return y


def make_images(n, rng):
    # class c: a bright 8x8 square in patch cell (c % 4, c // 4) of a 4x4 grid, plus noise
    x = rng.normal(0, 0.5, size=(n, 3, 32, 32)).astype(np.float32)
    y = rng.randint(0, 10, size=n)
    for i, c in enumerate(y):
        r, col = (c // 4) * 8, (c % 4) * 8
        x[i, :, r:r + 8, col:col + 8] += 1.5
    return torch.from_numpy(x), torch.from_numpy(y).long()


def main():
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    trainset = TensorDataset(*make_images(1000, rng))
    testset = TensorDataset(*make_images(300, rng))

    batch_size = 16
    valid_size = 0.2
    train_size = len(trainset)
    indices = list(range(train_size))
    rng.shuffle(indices)
    split = int(np.floor(valid_size * train_size))
    train_idx, valid_idx = indices[split:], indices[:split]
    g = torch.Generator().manual_seed(0)
    train_loader = DataLoader(trainset, batch_size=batch_size, sampler=SubsetRandomSampler(train_idx, generator=g))
    valid_loader = DataLoader(trainset, batch_size=batch_size, sampler=SubsetRandomSampler(valid_idx, generator=g))
    test_loader = DataLoader(testset, batch_size=batch_size)

    vision_transformer = VisionTransformer(patch_size=8, image_size=32, channel_size=3, num_layers=2,
                                           embedding_dim=D, num_heads=n_head, hidden_dim=64,
                                           dropout_prob=0.1, num_classes=10)
    criterion = nn.CrossEntropyLoss()
    optimizer = optim.Adam(filter(lambda p: p.requires_grad, vision_transformer.parameters()), lr=0.001)

    n_epoch = 6
    vision_transformer.train()
    for e in range(n_epoch):
        train_loss = 0.0
        valid_loss = 0.0
        for i, (images, targets) in enumerate(train_loader):
            optimizer.zero_grad()
            outputs = vision_transformer(images)
            loss = criterion(outputs, targets)
            loss.backward()
            optimizer.step()
            train_loss += loss.item()

        vision_transformer.eval()
        for images, targets in valid_loader:
            with torch.no_grad():
                outputs = vision_transformer(images)
                loss = criterion(outputs, targets)
                valid_loss += loss.item()
        vision_transformer.train()

        train_loss = train_loss / len(train_loader)
        valid_loss = valid_loss / len(valid_loader)
        print('Epoch: {} \t Training Loss: {:.6f} \t Validation Loss: {:.6f}'.format((e+1), train_loss, valid_loss))

    vision_transformer.eval()
    test_loss = 0.0
    accuracy = 0
    for images, targets in test_loader:
        with torch.no_grad():
            outputs = vision_transformer(images)
        loss = criterion(outputs, targets)
        test_loss += loss.item()
        preds = torch.argmax(F.softmax(outputs, dim=1), dim=1)
        correct_preds = (preds == targets).type(torch.FloatTensor)
        accuracy += torch.mean(correct_preds).item() * 100
    accuracy = accuracy / len(test_loader)
    test_loss = test_loss / len(test_loader)
    print('Test Loss: {:.6f}'.format(test_loss))
    print('Test Accuracy of Dataset: \t {}%'.format(int(accuracy)))
    # attention weights of the last test batch, layer 0 head 0: sum over the keys of each query row
    A = vision_transformer.transformer_encoder_layers[0].MSA.multi_head_attention[0].attention_weights
    row_sums = A.sum(-1)
    print('attention row sums (layer 0, head 0): min {:.4f} max {:.4f}'.format(row_sums.min().item(), row_sums.max().item()))


if __name__ == "__main__":
    main()
