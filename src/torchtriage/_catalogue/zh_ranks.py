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

MESSAGES.update({
    "ranks.global_divisor":
        "损失被除以一个在所有 rank 上求和的计数（{reduced} 处的 all_reduce），随后 DDP 又在 {world} 个 rank 上对梯度取平均："
        "每一步只有全局均值梯度的 {scale} 倍",
    "ranks.global_divisor.cause":
        "除以全局计数后，各 rank 的损失之和已经是全局均值；DDP 的平均又除了一次 world size（损失上的常数因子为 {factor}），"
        "相当于学习率被除以 {world}",
    "ranks.global_divisor.next":
        "把损失乘以 dist.get_world_size()（loss = loss_sum * world_size / global_count），或除以本 rank 自己的计数并让 DDP 取平均",
})
