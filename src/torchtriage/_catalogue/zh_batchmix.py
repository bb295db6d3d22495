"""批内样本在前向中相互混合的探测的消息（中文）。"""

MESSAGES = {
    "silent.samples_mixed": "只改变样本 0 时，batch 中其余 {others} 个样本里有 {changed} 个的输出也变了：batch 内的样本在前向中相互混合",
    "silent.samples_mixed.site": "只改变样本 0 时，batch 中其余 {others} 个样本里有 {changed} 个的输出也变了：样本首先在 {at} 处混合，它收到的是 {layout}",
    "silent.samples_mixed.at": "只改变样本 0 时，batch 中其余 {others} 个样本里有 {changed} 个的输出也变了：样本首先在 {at} 处混合",
    "silent.samples_mixed.cause": "某一层把 batch 轴当成了另一个轴：RNN / LSTM / GRU 或注意力层的 batch_first 与它收到的张量布局不一致（(batch, time, feature) 对 (time, batch, feature)），本该用 permute / transpose 的地方用了 view / reshape，或者在 batch 轴上做了 softmax / 归一化。于是每个样本的预测都依赖同一 batch 中的其他样本（以及 batch 大小），训练和推理时都是如此。",
    "silent.samples_mixed.next": "在那一行打印张量的形状和该层的 batch_first：让 batch 轴待在该层期望的位置（(batch, time, feature) 用 batch_first=True，或在按时间优先的层之前 permute(1, 0, 2)），移动轴要用 permute / transpose，而不是 view。",
}
