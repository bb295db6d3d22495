"""中文：平均值的分母应是被求和的项数（session 9）。"""

MESSAGES = {
    "denominator.message": "一遍遍历上的累加和被除以 {expr} = {value}，但这一遍只交付了 {batches} 个批次、{samples} 个样本：得到的平均值是按所求和的 {what} 计算的真实平均值的 {factor} 倍",
    "denominator.cause": "分母不是循环所求和的项数：加载器的批次更少时用了一个固定长度（配置的最大批次数），或者本进程只看到数据集的一个分片（DistributedSampler、只覆盖部分数据集的采样器）时却用了整个数据集的大小，所以报告的平均值被这个比例缩放了",
    "denominator.next": "统计循环所求和的项数（每个批次 n += 1，或 n += 批大小）并除以它，或除以 len(loader) / 采样器的长度；在 DDP 下用本 rank 自己的计数去除本 rank 的和，或先对和与计数做 all_reduce",
    "denominator.shard.cause": "在 DDP 下每个 rank 的 DistributedSampler 只给它数据集的 1 / {world}，但它的和却除以了整个数据集的大小：每个 rank 报告的都是自己平均值的 {factor} 倍（基于它做出的决定，如按平台期调整学习率或选择最佳检查点，也跟着这个被缩放的数）",
    "denominator.shard.next": "用本 rank 在循环中实际看到的样本数去除本 rank 的和，或在相除之前对和与计数做跨 rank 的 all_reduce",
}
