"""会话 11 关于输入尺度与整轮指标的检查的消息（中文）。"""

MESSAGES = {
    "data.int_scaled_as_narrower": "{dtype} 数据被除以 {c}（{kind} 数据的最大值）：其值达到 {top}（该类型最大可到 {limit}），结果达到 {q}，而不是落在 [0, 1] 内",
    "data.int_scaled_as_narrower.cause": "缩放常数是为 {kind} 数据写的，而这个张量更宽（16 位图像解码为 uint16 / int32）：输入远远超出代码想要归一化到的范围，模型照样用它们训练。",
    "data.int_scaled_as_narrower.next": "在转换为浮点之前，除以数据自身类型的最大值（torch.iinfo(x.dtype).max）或其位深的最大值。",
    "batchmeans.message": "{collection} 每个 batch 保存一个比值（{ratio}），第 {line} 行在 {batches} 个 batch 上取平均：{smallest} 到 {largest} 个样本的 batch 权重相同，所以 batch 的均值为 {by_batch}，而 {samples} 个样本给出的是 {by_row}",
    "batchmeans.cause": "每个 batch 的比值已经除以该 batch 的大小；再对比值取平均等于每个 batch 一票，小 batch（一轮最后那个不满的 batch）中的一行与满 batch 中的许多行权重相同，指标随 batch 大小和落入最后一个 batch 的样本而变。",
    "batchmeans.next": "在整轮上累加分子和 batch 大小后只除一次（correct += (pred == y).sum().item(); n += y.size(0); acc = correct / n），或按 batch 大小对每个 batch 的比值加权。",
}
