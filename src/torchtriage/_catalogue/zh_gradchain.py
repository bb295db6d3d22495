"""中文：梯度链上每个参数必须满足的条件（第 12 轮）。"""

MESSAGES = {
    "ledger.sink":
        "{module} 的 {count} 个参数（{first} 等）每一步都收到梯度，却不在任何优化器中：整个运行中它们从未变化，"
        "其 .grad 不断累积（{g0} -> {g1}）",
    "ledger.sink.cause":
        "该模块建在构造优化器所用的模型之外（由训练器持有的损失或头部），optimizer.step() 从不更新它，"
        "zero_grad() 也从不清零它：模型是通过一个固定的随机投影在训练；{reached} 次被检查的反向传播都在训练路径上到达了它",
    "ledger.sink.next":
        "把 {module} 的参数交给优化器（或用模型和该模块组成的 ModuleList 构造优化器）；若它应保持固定，"
        "对它调用 requires_grad_(False)",
    "ledger.sink_quiet":
        "{module} 的 {count} 个参数（{first} 等）在每次反向传播中都收到梯度，但没有优化器持有它们，且从未变化"
        "（模块处于 {mode}() 模式）",
    "ledger.sink_quiet.cause":
        "一个固定的网络（预训练的特征提取器、目标网络）没有关闭 requires_grad：它的梯度被白白计算并保留",
    "ledger.sink_quiet.next":
        "若 {module} 是固定的，对它调用 requires_grad_(False)；若它应当学习，把它加入优化器",
}
MESSAGES.update({
    "ledger.baseline":
        "策略损失把对数概率（{log}）乘以一个需要梯度的差值：它的梯度到达了基线的 {count} 个参数（{first} 等；"
        "{values} 个值），而对数概率并不依赖这些参数",
    "ledger.baseline.cause":
        "在策略梯度项中，优势（reward - baseline）是常数权重；若未 detach，策略损失还会通过 log p * d baseline "
        "训练评论家，使其估计偏离奖励（评论家被两项同时训练，基线失去作用）",
    "ledger.baseline.next":
        "在策略项中对基线 detach：((reward - value.detach()) * log_prob)，相当于 tf.stop_gradient；"
        "评论家只由它自己的回归项训练",
})
MESSAGES.update({
    "ledger.unfreeze":
        "{model} 的 {count} 个参数（{values} 个值）在构造优化器时需要梯度，结束时却被冻结：{method} 只对已经需要梯度的参数"
        "设置 requires_grad，因此永远无法解冻它们",
    "ledger.unfreeze.cause":
        "在 `if p.requires_grad: p.requires_grad = flag` 下，flag=True 的调用会跳过所有被冻结的参数：本应微调它们的阶段只训练了其余部分",
    "ledger.unfreeze.next":
        "去掉这个条件：对每个参数执行 `p.requires_grad = flag`（或 model.requires_grad_(flag)）",
})
