"""各 rank 间一致性（DDP 副本之外）的消息（issue 26，第 8 阶段）。"""

MESSAGES = {
    "ranks.replicas_drift":
        "{model} 在 {line} 处被更新的参数在第一步之前于 rank {a} 与 rank {b} 上完全相同，自第 {step} 步起却不同"
        "（第 {last} 步有 {count}/{total} 个，{first} 等）：各 rank 在训练各自的副本",
    "ranks.replicas_drift.cause":
        "每个 rank 用自己的梯度更新这些参数：没有任何 all-reduce 作用于它们（模型未用 DistributedDataParallel 包装、"
        "包装后却通过 .module 调用、该模型缺少手写的梯度 all-reduce），因此每个 rank 只从自己的数据学习，"
        "保存或评估的模型取决于 rank",
    "ranks.replicas_drift.next":
        "用 DistributedDataParallel 包装执行前向的模型并调用该包装器，或在 backward() 与 step() 之间对其梯度做 "
        "all-reduce（dist.all_reduce(p.grad); p.grad /= world_size）",
}
