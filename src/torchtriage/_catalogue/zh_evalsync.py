"""分片评估的指标只属于单个 rank 的消息（issue 26，第 8 阶段）。"""

MESSAGES = {
    "evalsync.not_reduced":
        "在 {where} 创建的加载器（{sampler}）上的评估只给了本 rank {size} 个样本中的 {samples} 个（{share} %），"
        "之后也没有任何集合通信合并各 rank 的结果：每个 rank 计算的指标只属于它自己的分片",
    "evalsync.not_reduced.cause":
        "DistributedSampler 把评估集分给 {world} 个 rank；若不对指标的和与计数做 all_reduce（或对预测做 all_gather），"
        "每个 rank 报告的数值都不同，且都不是整个评估集的指标，基于它的决定（最佳检查点、早停）也因 rank 而异",
    "evalsync.hand_sharded":
        "{where} 的评估前向在 {world} 个 rank 上看到的输入各不相同（评估集被手工按 rank 切分），之后也没有任何集合通信合并各 rank 的结果："
        "rank 0 的指标只覆盖 {total} 个被评估批次中它自己的 {forwards} 个（{share} %），其余在其他 rank 上被评估后丢弃",
    "evalsync.hand_sharded.cause":
        "评估数据像训练数据一样按 rank 切分，但只有一个 rank 报告指标（并保存最佳检查点），而且没有对和与计数做 all_reduce，"
        "所以报告的数值和选出的模型都只属于评估集的一个 rank 的子集",
    "evalsync.not_reduced.next":
        "在相除之前对指标的和与计数做跨 rank 的 all_reduce（t = torch.tensor([correct, total]); dist.all_reduce(t); "
        "acc = t[0] / t[1]），或收集预测（torchmetrics、accelerator.gather_for_metrics），或只在一个 rank 上评估整个集合",
}
