"""中文：数据账本的评估遍历（issue 25）：每遍每个样本一次。"""

MESSAGES = {
    "ledger.eval_duplicates.message": "评估加载器 {loader}（{where}，{ranks} 个 rank）的一遍交付了 {delivered} 个样本，其中不同的只有 {distinct} 个：{dup} 个被评估了两次（例如样本 {example}）；对这一遍取平均的指标最多偏移 {bias} 个百分点",
    "ledger.eval_duplicates.cause": "采样器 {sampler} 在一遍评估中重复了样本，它们在对这一遍取平均的任何指标中都被计算了两次",
    "ledger.eval_duplicates.next": "给评估加载器一个每个样本只产出一次的采样器（SequentialSampler），或在计算指标前按样本 id 去重",
    "ledger.eval_duplicates_ranks.cause": "DistributedSampler 通过重复开头的样本把评估集补齐到进程数的整数倍，跨 rank 合并的指标会把它们算两次，结果随进程数而变",
    "ledger.eval_duplicates_ranks.next": "合并结果时按样本 id 去重（保留第一个 rank 的），或只在一个 rank 上评估，或用大小不等的 Subset 分片而不补齐",
    "ledger.eval_lost.message": "评估加载器 {loader}（{where}，{ranks} 个 rank）的一遍只交付了 {n} 个样本中的 {distinct} 个：{lost} 个从未被评估；这一遍的指标最多缺少评估集的 {bias} 个百分点",
    "ledger.eval_lost.cause": "评估加载器丢弃了样本（drop_last=True 丢掉了最后不满的一批），指标只在评估集的一部分上计算",
    "ledger.eval_lost.next": "构建评估加载器时使用 drop_last=False，使每个样本都被评估一次",
    "ledger.eval_lost_ranks.cause": "评估加载器的 DistributedSampler 使用了 drop_last=True，评估集中不能填满每个 rank 的尾部从未被评估",
    "ledger.eval_lost_ranks.next": "评估用的 DistributedSampler 使用 drop_last=False，并在合并时按样本 id 去掉补齐的重复",
}
