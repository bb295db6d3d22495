"""中文：数据账本（issue 25）：样本的覆盖、顺序、划分与各 rank。"""

MESSAGES = {
    "ledger.coverage.message": "加载器 {loader} 在 {epochs} 个完整 epoch 中提供的 {samples} 个样本里，有 {lost} 个（{share}）从未进入反向传播（第一个这样的 epoch 中 {per_epoch} 个批次里有 {batches} 个）",
    "ledger.coverage.cause": "循环在反向传播之前跳过了一些批次（{skip}），因此每个 epoch 训练的数据少于采样器提供的数据",
    "ledger.coverage.next": "在构建加载器之前过滤数据（最后一个不完整批次可用 drop_last=True），使采样器提供的就是实际训练的数据",
    "ledger.coverage_unknown.cause": "循环在对这些批次做前向或反向传播之前就取了下一个批次，因此每个 epoch 训练的数据少于采样器提供的数据",
    "ledger.coverage_unknown.next": "查找循环中跳过批次的条件，改为在构建加载器之前过滤数据",
    "ledger.order.message": "加载器 {loader}（{where}）在 {compared} 个完整 epoch 中的第 {epochs} 个 epoch 又给出了相同的样本顺序，尽管它的 {sampler} 会打乱顺序",
    "ledger.order.cause": "每个 epoch 之前都用同一个种子重新设定了打乱用的随机数生成器（每个 epoch 新建的加载器传入固定的 generator=，或在 epoch 循环内调用 torch.manual_seed），所以每个 epoch 重复同一顺序",
    "ledger.order.next": "只在 epoch 循环之前设定一次种子，并只构建一次加载器",
    "ledger.order_set_epoch.cause": "DistributedSampler 用 seed + epoch 打乱顺序，而 set_epoch() 从未被调用（其 epoch 一直是 {epoch}），所以每个 epoch 在每个 rank 上都重复相同的顺序",
    "ledger.order_set_epoch.next": "在每个 epoch 开始、遍历加载器之前调用 sampler.set_epoch(epoch)",
    "ledger.split.message": "加载器 {eval}（{eval_where}）只用于评估的 {n} 个样本中有 {count} 个（{share}）通过加载器 {train}（{train_where}）被训练过；按 {how} 匹配，例如样本 {example}",
    "ledger.split.cause": "评估数据并未被留出：它与训练数据重叠（手工划分时索引范围相交、训练加载器用了整个数据集、用相同的行又构建了第二个数据集）",
    "ledger.split.next": "把同一个索引排列切成互不相交的几部分，用它构建所有划分，并检查训练与评估的索引没有交集",
    "ledger.ranks.message": "rank {a} 和 rank {b} 在同一个 epoch 中从加载器 {loader}（{where}）取到了 {n} 个样本中的 {count} 个相同样本（{share}），其采样器是 {sampler}",
    "ledger.ranks.cause": "没有 DistributedSampler 时每个 rank 都遍历整个数据集：各 rank 训练相同的样本，一个 epoch 的数据要花 world_size 倍的计算",
    "ledger.ranks.next": "使用 DataLoader(dataset, sampler=DistributedSampler(dataset), ...)（不要同时设 shuffle=True），并在每个 epoch 调用 sampler.set_epoch(epoch)",
    "ledger.ranks_same_rank.cause": "每个进程的 DistributedSampler 都被传入了相同的 rank（或 num_replicas=1），所以各 rank 取到的是同一分片",
    "ledger.ranks_same_rank.next": "在 init_process_group 之后构建 DistributedSampler，不要传 rank= / num_replicas=（默认取进程组的值）",
}
