# Source: shubhamagarwal92/mmd, train.py (main, evaluate), commit 6c0a8a9a92d5e046b0e8708ccf0150a2d03be4af
# Report: https://github.com/shubhamagarwal92/mmd/issues/14
# Multimodal dialogue (MMD) training: an HRED-style encoder over text context + image features
# and a GRU decoder with dropout, trained with teacher forcing and CrossEntropyLoss
# (ignore_index=pad), evaluated every epoch on the validation pickle. The MMD data, annoy
# image index and the kb/celebrity inputs are replaced by synthetic token sequences with
# image vectors; the Python-2 era .data[0] accessors by .item().
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim


class HierarchicalEncoderDecoder(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, src_emb_dim, tgt_emb_dim, enc_hidden_size, dec_hidden_size,
                 context_hidden_size, image_in_size, dropout_enc=0.3, dropout_dec=0.3, dropout_context=0.3):
        super().__init__()
        self.src_embedding = nn.Embedding(src_vocab_size, src_emb_dim, padding_idx=0)
        self.encoder = nn.GRU(src_emb_dim, enc_hidden_size, batch_first=True)
        self.dropout_enc = nn.Dropout(dropout_enc)
        self.image_encoder = nn.Linear(image_in_size, context_hidden_size)
        self.context_encoder = nn.Linear(enc_hidden_size + context_hidden_size, dec_hidden_size)
        self.dropout_context = nn.Dropout(dropout_context)
        self.tgt_embedding = nn.Embedding(tgt_vocab_size, tgt_emb_dim, padding_idx=0)
        self.decoder = nn.GRU(tgt_emb_dim, dec_hidden_size, batch_first=True)
        self.dropout_dec = nn.Dropout(dropout_dec)
        self.out = nn.Linear(dec_hidden_size, tgt_vocab_size)

    def forward(self, text_enc_input, image_enc_input, dec_text_input):
        _, h = self.encoder(self.dropout_enc(self.src_embedding(text_enc_input)))
        ctx = torch.cat([h[-1], torch.tanh(self.image_encoder(image_enc_input))], 1)
        ctx = self.dropout_context(torch.tanh(self.context_encoder(ctx)))
        dec_out, _ = self.decoder(self.dropout_dec(self.tgt_embedding(dec_text_input)), ctx.unsqueeze(0).contiguous())
        return self.out(self.dropout_dec(dec_out))


def make_data(n, seed, vocab=60, src_len=10, tgt_len=6):
    rng = np.random.RandomState(seed)
    data = []
    for _ in range(n):
        src = rng.randint(4, vocab, size=src_len)
        img = rng.randn(32).astype(np.float32)
        tgt = np.array([(src[i] + int(img[i] > 0) * 7) % (vocab - 4) + 4 for i in range(tgt_len)])
        tgt = np.where(rng.rand(tgt_len) < 0.3, rng.randint(4, vocab, size=tgt_len), tgt)
        data.append((src, img, tgt))
    return data


def get_batch_mmd_data(batch_data, start_id, end_id, pad_id):
    src = torch.LongTensor(np.stack([b[0] for b in batch_data]))
    img = torch.from_numpy(np.stack([b[1] for b in batch_data]))
    tgt = torch.LongTensor(np.stack([b[2] for b in batch_data]))
    dec_in = torch.cat([torch.full((len(batch_data), 1), start_id), tgt], 1)
    dec_out = torch.cat([tgt, torch.full((len(batch_data), 1), end_id)], 1)
    dec_len = (dec_out != pad_id).sum(1)
    return src, img, dec_in, dec_out, dec_len


def evaluate(valid_data, loss_criterion, model, config, vocab_size):
	model.eval()
	batch_size = config['data']['batch_size']
	total_samples = len(valid_data)
	num_valid_batch = int(math.ceil(float(total_samples)/float(batch_size)))
	total_loss =0.
	n_total_words = 0.
	valid_start = time.time()
	for batch_id in range(num_valid_batch):
		batch_data = valid_data[batch_id*batch_size:(batch_id+1)*batch_size]
		text_enc_input, image_enc_input, dec_text_input, dec_out_seq, dec_seq_length = get_batch_mmd_data(
			batch_data, config['data']['start_id'], config['data']['end_id'], config['data']['pad_id'])
		with torch.no_grad():
			dec_output_prob = model(text_enc_input, image_enc_input, dec_text_input)
		loss_val = loss_criterion(dec_output_prob.contiguous().view(-1, vocab_size),
			dec_out_seq.view(-1))
		n_words = dec_seq_length.float().sum().item()
		n_total_words += n_words
		total_loss += loss_val.item() * n_words
	epoch_loss = total_loss / n_total_words
	valid_elapsed = (time.time() - valid_start)/60
	print('Valid Loss: Loss: %.6f, Perplexity: %5.4f, Run Time:%5.4f'
		  %(epoch_loss, np.exp(epoch_loss), valid_elapsed))
	return epoch_loss

def main():
	config = {'data': {'batch_size': 32, 'start_id': 1, 'end_id': 2, 'pad_id': 0},
			  'training': {'seed': 4, 'lr': 0.003, 'num_epochs': 12, 'clip_grad': 5.0, 'evaluate_every': 1}}
	torch.manual_seed(config['training']['seed'])
	vocab_size = 60
	model = HierarchicalEncoderDecoder(60, vocab_size, 32, 32, 96, 128, 32, 32,
				dropout_enc=0.3, dropout_dec=0.3, dropout_context=0.3)
	optimizer = optim.Adam(model.parameters(), lr=config['training']['lr'])
	loss_criterion = nn.CrossEntropyLoss(ignore_index=config['data']['pad_id'])
	train_data = make_data(256, 1)
	valid_data = make_data(256, 2)
	batch_size = config['data']['batch_size']
	total_samples = len(train_data)
	num_train_batch = int(math.ceil(float(total_samples)/float(batch_size)))
	valid_losses = []
	for epoch in range(config['training']['num_epochs']):
		total_loss = 0.
		n_total_words = 0.
		epoch_start = time.time()
		for batch_id in range(num_train_batch):
			batch_data = train_data[batch_id*batch_size:(batch_id+1)*batch_size]
			text_enc_input, image_enc_input, dec_text_input, dec_out_seq, dec_seq_length = get_batch_mmd_data(
				batch_data, config['data']['start_id'], config['data']['end_id'], config['data']['pad_id'])
			optimizer.zero_grad()
			dec_output_prob = model(text_enc_input, image_enc_input, dec_text_input)
			loss = loss_criterion(dec_output_prob.contiguous().view(-1, vocab_size),
				dec_out_seq.view(-1))
			n_words = dec_seq_length.float().sum().item()
			n_total_words += n_words
			loss.backward()
			# Gradient clipping to avoid exploding gradients
			nn.utils.clip_grad_norm_(model.parameters(), config['training']['clip_grad'])
			optimizer.step()
			total_loss += loss.item() * n_words
		epoch_loss = total_loss / n_total_words
		epoch_elapsed = time.time() - epoch_start
		print('Epoch Loss: Epoch [%d], Loss: %.6f, Perplexity: %5.5f, Epoch Time:%5.4f'
			  %(epoch+1, epoch_loss, np.exp(epoch_loss), epoch_elapsed))
		if (epoch+1) % config['training']['evaluate_every'] == 0:
			valid_losses.append(evaluate(valid_data, loss_criterion, model, config, vocab_size))
	print('best valid loss %.4f (epoch %d), last %.4f' % (min(valid_losses), int(np.argmin(valid_losses)) + 1, valid_losses[-1]))


if __name__ == "__main__":
	main()
