# Source: facebookresearch/dlrm, dlrm_s_pytorch.py (DLRM_Net.create_mlp/create_emb/apply_emb/interact_features/
# sequential_forward, loss_fn, training loop with periodic test), commit 08e1e9390d38a24c7e81783fb36d699a13e096af
# DLRM: bottom MLP on dense features, sum-pooled EmbeddingBag(sparse=True) lookups for categorical bags, pairwise
# dot-product interactions, top MLP ending in a Sigmoid, BCELoss, plain SGD over dense AND sparse gradients.
# Suspicious-looking but correct patterns kept from the original:
#   - nn.EmbeddingBag(..., sparse=True, _weight=torch.tensor(W, requires_grad=True)): embedding grads are sparse
#     COO tensors, stepped by torch.optim.SGD (which supports sparse grads); only looked-up rows change
#   - Linear weights/biases replaced through .data with numpy-initialised tensors that have requires_grad=True
#     ("approach 1"); per-table numpy seeds with the global numpy RNG state saved and restored around creation
#   - the last top-MLP layer is followed by nn.Sigmoid and the loss is BCELoss on probabilities; the clamp by
#     loss_threshold is a no-op at its default 0.0
#   - interactions gathered with hand-built li/lj index tensors (strict lower triangle, self-interaction excluded)
#   - loss/accuracy read through .detach().cpu().numpy() every step; accuracy = round(p) == target
#   - test pass without torch.no_grad() and without model.eval() (the model has no dropout/BN)
# Adaptation: Criteo/random data generators replaced by a synthetic click model (4 dense features, 3 categorical
# tables of 60/90/40 rows, multi-hot bags of 1-3 ids, label from a hidden logistic model); argparse, distributed,
# mlperf logging, profiling, ONNX and QR/MD embeddings removed; learning rate 0.01 -> 0.2, 6 epochs of 40 batches.
import sys
import time

import numpy as np
import torch
import torch.nn as nn


class DLRM_Net(nn.Module):
    def create_mlp(self, ln, sigmoid_layer):
        # build MLP layer by layer
        layers = nn.ModuleList()
        for i in range(0, ln.size - 1):
            n = ln[i]
            m = ln[i + 1]

            # construct fully connected operator
            LL = nn.Linear(int(n), int(m), bias=True)

            # initialize the weights
            # with torch.no_grad():
            # custom Xavier input, output or two-sided fill
            mean = 0.0  # std_dev = np.sqrt(variance)
            std_dev = np.sqrt(2 / (m + n))  # np.sqrt(1 / m) # np.sqrt(1 / n)
            W = np.random.normal(mean, std_dev, size=(m, n)).astype(np.float32)
            std_dev = np.sqrt(1 / m)  # np.sqrt(2 / (m + 1))
            bt = np.random.normal(mean, std_dev, size=m).astype(np.float32)
            # approach 1
            LL.weight.data = torch.tensor(W, requires_grad=True)
            LL.bias.data = torch.tensor(bt, requires_grad=True)
            layers.append(LL)

            # construct sigmoid or relu operator
            if i == sigmoid_layer:
                layers.append(nn.Sigmoid())
            else:
                layers.append(nn.ReLU())

        # approach 2: use Sequential container to wrap all layers
        return torch.nn.Sequential(*layers)

    def create_emb(self, m, ln):
        emb_l = nn.ModuleList()
        # save the numpy random state
        np_rand_state = np.random.get_state()
        for i in range(0, ln.size):
            # Use per table random seed for Embedding initialization
            np.random.seed(self.l_emb_seeds[i])
            n = ln[i]
            # initialize embeddings
            W = np.random.uniform(
                low=-np.sqrt(1 / n), high=np.sqrt(1 / n), size=(n, m)
            ).astype(np.float32)
            # approach 1
            EE = nn.EmbeddingBag(n, m, mode="sum", sparse=True, _weight=torch.tensor(W, requires_grad=True))
            emb_l.append(EE)

        # Restore the numpy random state
        np.random.set_state(np_rand_state)
        return emb_l

    def __init__(
        self,
        m_spa=None,
        ln_emb=None,
        ln_bot=None,
        ln_top=None,
        arch_interaction_op=None,
        arch_interaction_itself=False,
        sigmoid_bot=-1,
        sigmoid_top=-1,
        loss_threshold=0.0,
    ):
        super(DLRM_Net, self).__init__()
        self.output_d = 0
        self.arch_interaction_op = arch_interaction_op
        self.arch_interaction_itself = arch_interaction_itself
        self.loss_threshold = loss_threshold
        # generate np seeds for Emb table initialization
        self.l_emb_seeds = np.random.randint(low=0, high=100000, size=len(ln_emb))
        # create operators
        self.emb_l = self.create_emb(m_spa, ln_emb)
        self.bot_l = self.create_mlp(ln_bot, sigmoid_bot)
        self.top_l = self.create_mlp(ln_top, sigmoid_top)

    def apply_mlp(self, x, layers):
        return layers(x)

    def apply_emb(self, lS_o, lS_i, emb_l):
        ly = []
        for k, sparse_index_group_batch in enumerate(lS_i):
            sparse_offset_group_batch = lS_o[k]

            # embedding lookup
            # We are using EmbeddingBag, which implicitly uses sum operator.
            E = emb_l[k]
            V = E(sparse_index_group_batch, sparse_offset_group_batch)

            ly.append(V)

        return ly

    def interact_features(self, x, ly):
        if self.arch_interaction_op == "dot":
            # concatenate dense and sparse features
            (batch_size, d) = x.shape
            T = torch.cat([x] + ly, dim=1).view((batch_size, -1, d))
            # perform a dot product
            Z = torch.bmm(T, torch.transpose(T, 1, 2))
            _, ni, nj = Z.shape
            # approach 2: custom
            offset = 1 if self.arch_interaction_itself else 0
            li = torch.tensor([i for i in range(ni) for j in range(i + offset)])
            lj = torch.tensor([j for i in range(nj) for j in range(i + offset)])
            Zflat = Z[:, li, lj]
            # concatenate dense features and interactions
            R = torch.cat([x] + [Zflat], dim=1)
        elif self.arch_interaction_op == "cat":
            # concatenation features (into a row vector)
            R = torch.cat([x] + ly, dim=1)
        else:
            sys.exit(
                "ERROR: --arch-interaction-op="
                + self.arch_interaction_op
                + " is not supported"
            )

        return R

    def forward(self, dense_x, lS_o, lS_i):
        return self.sequential_forward(dense_x, lS_o, lS_i)

    def sequential_forward(self, dense_x, lS_o, lS_i):
        # process dense features (using bottom mlp), resulting in a row vector
        x = self.apply_mlp(dense_x, self.bot_l)

        # process sparse features(using embeddings), resulting in a list of row vectors
        ly = self.apply_emb(lS_o, lS_i, self.emb_l)

        # interact features (dense and sparse)
        z = self.interact_features(x, ly)

        # obtain probability of a click (using top mlp)
        p = self.apply_mlp(z, self.top_l)

        # clamp output if needed
        if 0.0 < self.loss_threshold and self.loss_threshold < 1.0:
            z = torch.clamp(p, min=self.loss_threshold, max=(1.0 - self.loss_threshold))
        else:
            z = p

        return z


def make_click_data(n_batches, mini_batch_size, ln_emb, m_den, seed):
    """ Synthetic click logs: dense features + multi-hot categorical bags (offsets/indices as in dlrm_data_pytorch). """
    rng = np.random.RandomState(seed)
    hidden = np.random.RandomState(123)
    w_dense = hidden.randn(m_den)
    w_cat = [hidden.randn(n) * 1.2 for n in ln_emb]
    batches = []
    for _ in range(n_batches):
        X = rng.rand(mini_batch_size, m_den).astype(np.float32)
        logit = (X - 0.5) @ w_dense
        lS_o, lS_i = [], []
        for k, n in enumerate(ln_emb):
            offsets, indices = [], []
            for b in range(mini_batch_size):
                offsets.append(len(indices))
                ids = rng.randint(0, n, size=rng.randint(1, 4))
                indices.extend(ids.tolist())
                logit[b] += w_cat[k][ids].mean()
            lS_o.append(torch.tensor(offsets, dtype=torch.long))
            lS_i.append(torch.tensor(indices, dtype=torch.long))
        T = (rng.rand(mini_batch_size) < 1 / (1 + np.exp(-2 * logit))).astype(np.float32)
        batches.append((torch.tensor(X), lS_o, lS_i, torch.tensor(T).view(-1, 1)))
    return batches


def main():
    np.random.seed(0)
    torch.manual_seed(0)
    m_spa, m_den = 8, 4
    ln_emb = np.array([60, 90, 40])
    ln_bot = np.array([m_den, 16, m_spa])
    num_fea = ln_emb.size + 1
    num_int = (num_fea * (num_fea - 1)) // 2 + ln_bot[ln_bot.size - 1]
    ln_top = np.array([num_int, 16, 8, 1])
    nepochs, nbatches, mini_batch_size, learning_rate, print_freq = 6, 40, 64, 0.2, 20

    train_ld = make_click_data(nbatches, mini_batch_size, ln_emb, m_den, seed=1)
    test_ld = make_click_data(10, 256, ln_emb, m_den, seed=2)

    dlrm = DLRM_Net(m_spa, ln_emb, ln_bot, ln_top, arch_interaction_op="dot", arch_interaction_itself=False,
                    sigmoid_bot=-1, sigmoid_top=ln_top.size - 2, loss_threshold=0.0)
    loss_fn = torch.nn.BCELoss(reduction="mean")
    optimizer = torch.optim.SGD(dlrm.parameters(), lr=learning_rate)

    def test():
        test_accu, test_loss, test_samp = 0, 0, 0
        for i, (X_test, lS_o_test, lS_i_test, T_test) in enumerate(test_ld):
            Z_test = dlrm(X_test, lS_o_test, lS_i_test)
            E_test = loss_fn(Z_test, T_test)
            L_test = E_test.detach().cpu().numpy()  # numpy array
            S_test = Z_test.detach().cpu().numpy()  # numpy array
            T_test = T_test.detach().cpu().numpy()  # numpy array
            mbs_test = T_test.shape[0]  # = mini_batch_size except last
            A_test = np.sum((np.round(S_test, 0) == T_test).astype(np.uint8))
            test_accu += A_test
            test_loss += L_test * mbs_test
            test_samp += mbs_test
        return test_loss / test_samp, test_accu / test_samp

    gL0, gA0 = test()
    print("Testing before training, loss {:.6f}, accuracy {:3.3f} %".format(gL0, gA0 * 100))
    total_time = total_accu = total_loss = total_iter = total_samp = 0
    best_gA_test = 0
    k = 0
    while k < nepochs:
        for j, (X, lS_o, lS_i, T) in enumerate(train_ld):
            t1 = time.time()
            # forward pass
            Z = dlrm(X, lS_o, lS_i)

            # loss
            E = loss_fn(Z, T)
            # compute loss and accuracy
            L = E.detach().cpu().numpy()  # numpy array
            S = Z.detach().cpu().numpy()  # numpy array
            T = T.detach().cpu().numpy()  # numpy array
            mbs = T.shape[0]  # = args.mini_batch_size except maybe for last
            A = np.sum((np.round(S, 0) == T).astype(np.uint8))

            # scaled error gradient propagation
            # (where we do not accumulate gradients across mini-batches)
            optimizer.zero_grad()
            # backward pass
            E.backward()
            # optimizer
            optimizer.step()

            total_time += time.time() - t1
            total_accu += A
            total_loss += L * mbs
            total_iter += 1
            total_samp += mbs

            if (j + 1) % print_freq == 0:
                gT = 1000.0 * total_time / total_iter
                total_time = 0
                gA = total_accu / total_samp
                total_accu = 0
                gL = total_loss / total_samp
                total_loss = 0
                print("Finished training it {}/{} of epoch {}, {:.2f} ms/it, ".format(j + 1, nbatches, k, gT)
                      + "loss {:.6f}, accuracy {:3.3f} %".format(gL, gA * 100))
                total_iter = 0
                total_samp = 0

        gL_test, gA_test = test()
        best_gA_test = max(best_gA_test, gA_test)
        print("Testing at - {}/{} of epoch {},".format(nbatches, nbatches, k)
              + " loss {:.6f}, accuracy {:3.3f} %, best {:3.3f} %".format(gL_test, gA_test * 100, best_gA_test * 100))
        k += 1  # nepochs
    print("[summary] test_bce first={:.4f} last={:.4f} decreased={}".format(gL0, gL_test, gL_test < gL0))
    print("[summary] test_accuracy first={:.4f} last={:.4f} increased={}".format(gA0, gA_test, gA_test > gA0))


if __name__ == "__main__":
    main()
