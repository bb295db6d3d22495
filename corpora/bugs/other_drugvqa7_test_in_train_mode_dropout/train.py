# Source: prokia/drugVQA, trainAndTest.py (train, test, testPerProtein, getROCE), commit bc4b81d24f31b9a964e310a09164bc87b475b9c5
# Report: https://github.com/prokia/drugVQA/issues/7
# DrugVQA drug-target interaction classifier: a 2-layer bidirectional LSTM (dropout 0.2) with
# multi-hop self-attention over the SMILES tokens, a BatchNorm ResNet with attention over the
# protein contact map, a fused sigmoid head trained with BCELoss at batch size 1, and
# testPerProtein()/test() reporting accuracy, AUC and ROC enrichment after every epoch.
# Synthetic SMILES token strings and 16x16 contact maps replace the DUD-E data; CUDA, sklearn
# and model saving are removed, and the residual stages hold 1 block instead of 5.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Variable
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)

SMILES_LEN = 24
N_CHARS_SMI = 30
MAP = 16


def conv3x3(in_channels, out_channels, stride=1):
    return nn.Conv2d(in_channels, out_channels, kernel_size=3,
                     stride=stride, padding=1, bias=False)


def conv5x5(in_channels, out_channels, stride=1):
    return nn.Conv2d(in_channels, out_channels, kernel_size=5,
                     stride=stride, padding=2, bias=False)


# Residual block
class ResidualBlock(nn.Module):
    def __init__(self, in_channels, out_channels, stride=1, downsample=None):
        super(ResidualBlock, self).__init__()
        self.conv1 = conv5x5(in_channels, out_channels, stride)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.elu = nn.ELU(inplace=True)
        self.conv2 = conv3x3(out_channels, out_channels)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.downsample = downsample

    def forward(self, x):
        residual = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.elu(out)
        out = self.conv2(out)
        out = self.bn2(out)
        if self.downsample:
            residual = self.downsample(x)
        out += residual
        out = self.elu(out)
        return out


class DrugVQA(torch.nn.Module):
    def __init__(self, batch_size, lstm_hid_dim, d_a, r, block, n_chars_smi, n_chars_seq, emb_dim=30,
                 vocab_size=None, num_classes=10, type=0, n_classes=1):
        super(DrugVQA, self).__init__()
        # rnn
        self.embeddings = nn.Embedding(n_chars_smi, emb_dim)
        self.seq_embed = nn.Embedding(n_chars_seq, emb_dim)
        self.lstm = torch.nn.LSTM(emb_dim, lstm_hid_dim, 2, batch_first=True, bidirectional=True, dropout=0.2)
        self.linear_first = torch.nn.Linear(2 * lstm_hid_dim, d_a)
        self.linear_first.bias.data.fill_(0)
        self.linear_second = torch.nn.Linear(d_a, r)
        self.linear_second.bias.data.fill_(0)
        self.linear_first_seq = torch.nn.Linear(32, d_a)
        self.linear_first_seq.bias.data.fill_(0)
        self.linear_second_seq = torch.nn.Linear(d_a, r)
        self.linear_second_seq.bias.data.fill_(0)
        # cnn
        self.in_channels = 8
        self.conv = conv3x3(1, 8)
        self.bn = nn.BatchNorm2d(8)
        self.elu = nn.ELU(inplace=False)
        self.layer1 = self.make_layer(block, 16, 1)
        self.layer2 = self.make_layer(block, 32, 1)
        self.layer3 = self.make_layer(block, 32, 1)

        self.n_classes = n_classes
        self.linear_final_step = torch.nn.Linear(lstm_hid_dim * 2 + d_a, 100)
        self.linear_final = torch.nn.Linear(100, self.n_classes)
        self.batch_size = batch_size
        self.lstm_hid_dim = lstm_hid_dim
        self.hidden_state = self.init_hidden()
        self.seq_hidden_state = self.init_hidden()
        self.r = r
        self.type = type

    def softmax(self, input, axis=1):
        input_size = input.size()
        trans_input = input.transpose(axis, len(input_size) - 1)
        trans_size = trans_input.size()
        input_2d = trans_input.contiguous().view(-1, trans_size[-1])
        soft_max_2d = F.softmax(input_2d, dim=1)
        soft_max_nd = soft_max_2d.view(*trans_size)
        return soft_max_nd.transpose(axis, len(input_size) - 1)

    def init_hidden(self):
        return (Variable(torch.zeros(4, self.batch_size, self.lstm_hid_dim)),
                Variable(torch.zeros(4, self.batch_size, self.lstm_hid_dim)))

    def make_layer(self, block, out_channels, blocks, stride=1):
        downsample = None
        if (stride != 1) or (self.in_channels != out_channels):
            downsample = nn.Sequential(
                conv3x3(self.in_channels, out_channels, stride=stride),
                nn.BatchNorm2d(out_channels))
        layers = []
        layers.append(block(self.in_channels, out_channels, stride, downsample))
        self.in_channels = out_channels
        for i in range(1, blocks):
            layers.append(block(out_channels, out_channels))
        return nn.Sequential(*layers)

    # x1 = smiles , x2 = contactMap
    def forward(self, x1, x2):
        embeddings = self.embeddings(x1)
        outputs, self.hidden_state = self.lstm(embeddings, self.hidden_state)
        x1 = torch.tanh(self.linear_first(outputs))
        x1 = self.linear_second(x1)
        x1 = self.softmax(x1, 1)
        attention = x1.transpose(1, 2)
        sentence_embeddings = attention @ outputs
        avg_sentence_embeddings = torch.sum(sentence_embeddings, 1) / self.r  # multi head

        out = self.conv(x2)
        out1 = self.bn(out)
        out2 = self.elu(out1)
        out3 = self.layer1(out2)
        out3 = self.layer2(out3)
        out3 = self.layer3(out3)
        o1 = torch.mean(out3, 2)
        o1 = o1.permute(0, 2, 1)
        x = torch.tanh(self.linear_first_seq(o1))
        x = self.linear_second_seq(x)
        x = self.softmax(x, 1)
        seq_attention = x.transpose(1, 2)
        seq_embeddings = seq_attention @ o1
        avg_seq_embeddings = torch.sum(seq_embeddings, 1) / self.r

        sscomplex = torch.cat([avg_sentence_embeddings, avg_seq_embeddings], dim=1)
        sscomplex = F.relu(self.linear_final_step(sscomplex))
        self.seq_hidden_state = self.init_hidden()
        if not bool(self.type):
            output = torch.sigmoid(self.linear_final(sscomplex))
            return output, attention
        else:
            return F.log_softmax(self.linear_final(sscomplex), dim=1), attention


def make_pairs(n, rng, proteins):
    """(smiles tokens, protein name, label): actives carry a protein-specific token motif."""
    data = []
    for i in range(n):
        prot = proteins[i % len(proteins)]
        label = int(rng.random() < 0.5)
        toks = rng.integers(1, N_CHARS_SMI, SMILES_LEN)
        motif = proteins.index(prot) * 3 + 2
        if label:
            pos = rng.choice(SMILES_LEN, 4, replace=False)
            toks[pos] = motif
        else:
            toks[toks == motif] = 1
        data.append((toks, prot, label))
    return data


class ProDataset(Dataset):
    def __init__(self, dataSet, seqContactDict):
        self.dataSet = dataSet
        self.len = len(dataSet)
        self.dict = seqContactDict
        self.properties = [int(x[2]) for x in dataSet]

    def __getitem__(self, index):
        smiles, seq, label = self.dataSet[index]
        contactMap = self.dict[seq]
        return torch.as_tensor(smiles), contactMap, int(label)

    def __len__(self):
        return self.len


def make_variables(lines, properties, letters=None):
    return lines.long(), None, properties.float()


def create_variable(tensor):
    return Variable(tensor)


def roc_auc(target, pred):
    order = np.argsort(pred)
    ranks = np.empty(len(pred))
    ranks[order] = np.arange(1, len(pred) + 1)
    p = target.sum()
    n = len(target) - p
    return (ranks[target == 1].sum() - p * (p + 1) / 2) / (p * n)


def train(trainArgs):
    losses = []
    accs = []
    testResults = {}
    for i in range(trainArgs['epochs']):
        print("Running EPOCH", i + 1)
        total_loss = 0
        n_batches = 0
        correct = 0
        train_loader = trainArgs['train_loader']
        optimizer = trainArgs['optimizer']
        criterion = trainArgs["criterion"]
        attention_model = trainArgs['model']
        for batch_idx, (lines, contactmap, properties) in enumerate(train_loader):
            input, seq_lengths, y = make_variables(lines, properties)
            attention_model.hidden_state = attention_model.init_hidden()
            contactmap = create_variable(contactmap)
            y_pred, att = attention_model(input, contactmap)
            if not bool(attention_model.type):
                # binary classification
                correct += torch.eq(torch.round(y_pred.type(torch.DoubleTensor).squeeze(1)), y.type(torch.DoubleTensor)).data.sum()
                loss = criterion(y_pred.type(torch.DoubleTensor).squeeze(1), y.type(torch.DoubleTensor))
            total_loss += loss.data
            optimizer.zero_grad()
            loss.backward()

            # gradient clipping
            if trainArgs['clip']:
                torch.nn.utils.clip_grad_norm_(attention_model.parameters(), 0.5)
            optimizer.step()
            n_batches += 1

        avg_loss = total_loss / n_batches
        acc = correct.numpy() / (len(train_loader.dataset))
        losses.append(avg_loss)
        accs.append(acc)
        print("avg_loss is %.4f" % float(avg_loss))
        print("train ACC = %.3f" % acc)

        if trainArgs['doTest']:
            testArgs = {}
            testArgs['model'] = attention_model
            testArgs['test_proteins'] = trainArgs['test_proteins']
            testArgs['testDataDict'] = trainArgs['testDataDict']
            testArgs['seqContactDict'] = trainArgs['seqContactDict']
            testArgs['criterion'] = trainArgs['criterion']
            testArgs['use_regularizer'] = trainArgs['use_regularizer']
            testArgs['clip'] = trainArgs['clip']
            testResult = testPerProtein(testArgs)
            testResults[i] = testResult
    return losses, accs, testResults


def getROCE(predList, targetList, roceRate):
    p = sum(targetList)
    n = len(targetList) - p
    predList = [[index, x] for index, x in enumerate(predList)]
    predList = sorted(predList, key=lambda x: x[1], reverse=True)
    tp1 = 0
    fp1 = 0
    for x in predList:
        if targetList[x[0]] == 1:
            tp1 += 1
        else:
            fp1 += 1
            if fp1 > ((roceRate * n) / 100):
                break
    roce = (tp1 * n) / (p * fp1)
    return roce


def testPerProtein(testArgs):
    result = {}
    for x in testArgs['test_proteins']:
        data = testArgs['testDataDict'][x]
        test_dataset = ProDataset(dataSet=data, seqContactDict=testArgs['seqContactDict'])
        test_loader = DataLoader(dataset=test_dataset, batch_size=1, shuffle=False, drop_last=True)
        testArgs['test_loader'] = test_loader
        result[x] = test(testArgs)
        print(' test protein %s: acc = %.3f  auc = %.4f  loss = %.5f  roce2.0 = %.2f' % (
            x, result[x][0], result[x][3], result[x][4], result[x][9]))
    return result


def test(testArgs):
    test_loader = testArgs['test_loader']
    criterion = testArgs["criterion"]
    attention_model = testArgs['model']
    total_loss = 0
    n_batches = 0
    correct = 0
    all_pred = np.array([])
    all_target = np.array([])
    with torch.no_grad():
        for batch_idx, (lines, contactmap, properties) in enumerate(test_loader):
            input, seq_lengths, y = make_variables(lines, properties)
            attention_model.hidden_state = attention_model.init_hidden()
            y_pred, att = attention_model(input, contactmap)
            if not bool(attention_model.type):
                correct += torch.eq(torch.round(y_pred.type(torch.DoubleTensor).squeeze(1)), y.type(torch.DoubleTensor)).data.sum()
                all_pred = np.concatenate((all_pred, y_pred.data.cpu().squeeze(1).numpy()), axis=0)
                all_target = np.concatenate((all_target, y.data.cpu().numpy()), axis=0)
                loss = criterion(y_pred.type(torch.DoubleTensor).squeeze(1), y.type(torch.DoubleTensor))
            total_loss += loss.data
            n_batches += 1
    testAcc = round(correct.numpy() / (n_batches * test_loader.batch_size), 3)
    testAuc = round(roc_auc(all_target, all_pred), 4)
    testLoss = round(total_loss.item() / n_batches, 5)
    roce1 = round(getROCE(all_pred, all_target, 0.5), 2)
    roce2 = round(getROCE(all_pred, all_target, 1), 2)
    roce3 = round(getROCE(all_pred, all_target, 2), 2)
    roce4 = round(getROCE(all_pred, all_target, 5), 2)
    return testAcc, None, None, testAuc, testLoss, all_pred, all_target, roce1, roce2, roce3, roce4


def main():
    rng = np.random.default_rng(0)
    proteins = ['aa2ar', 'abl1', 'ace', 'aces']
    seqContactDict = {}
    for p in proteins:
        m = (rng.random((MAP, MAP)) < 0.15).astype(np.float32)
        m = np.maximum(m, m.T)
        np.fill_diagonal(m, 1.0)
        seqContactDict[p] = torch.from_numpy(m).unsqueeze(0)
    trainDataSet = make_pairs(200, rng, proteins)
    test_proteins = ['aa2ar', 'abl1']
    testDataDict = {p: [x for x in make_pairs(160, rng, proteins) if x[1] == p] for p in test_proteins}

    train_dataset = ProDataset(dataSet=trainDataSet, seqContactDict=seqContactDict)
    train_loader = DataLoader(dataset=train_dataset, batch_size=1, shuffle=True, drop_last=True)
    model = DrugVQA(1, 32, 32, 10, ResidualBlock, N_CHARS_SMI, 21, emb_dim=30)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.0007)
    trainArgs = {
        'model': model, 'epochs': 2, 'lr': 0.0007, 'train_loader': train_loader,
        'doTest': True, 'test_proteins': test_proteins, 'testDataDict': testDataDict,
        'seqContactDict': seqContactDict, 'use_regularizer': False, 'penal_coeff': 0.03,
        'clip': True, 'criterion': torch.nn.BCELoss(), 'optimizer': optimizer, 'doSave': False,
    }
    losses, accs, testResults = train(trainArgs)

    # score the final model a second time on the same test proteins
    again = testPerProtein({**trainArgs, 'model': model})
    last = testResults[trainArgs['epochs'] - 1]
    for p in test_proteins:
        diff = np.abs(last[p][5] - again[p][5]).max()
        print('%s: repeated test of the same model: auc %.4f vs %.4f, max prediction change %.4f' % (
            p, last[p][3], again[p][3], diff))


if __name__ == '__main__':
    main()
