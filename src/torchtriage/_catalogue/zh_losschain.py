"""损失区域中各运算的约定（中文）。"""

MESSAGES = {
    "silent.squashed_twice": "{loss} 的输入被 sigmoid 了两次：对 {inner} 的输出（已经是概率）又做了 sigmoid；输入只能位于 ({lo}, {hi})，在这些目标上损失与其最小值之差不可能小于 {floor}",
    "silent.squashed_twice.cause": "模型最后已经有一个压缩运算（{inner}），损失代码又做了一次 sigmoid：所有预测被挤进一个窄区间，永远到不了 0/1 目标，梯度也被 sigmoid' <= 0.25 衰减",
    "silent.squashed_twice.next": "把模型输出的概率直接交给损失（去掉第二个 sigmoid），或去掉模型最后的 sigmoid 并使用 binary_cross_entropy_with_logits",
    "silent.eps_dominated_division": "除以接近零的除数：有 {count} 个元素的除数只剩 epsilon（{eps}），那里的商达到 {quotient}，而其他位置最多 {regular}",
    "silent.eps_dominated_division.cause": "按标准差（或范数）归一化，而某些组的标准差为零、分子却不为零（留一法或未中心化的分子）：epsilon 成了整个除数，数值巨大但有限，这些元素压倒了损失及其梯度的其余部分",
    "silent.eps_dominated_division.next": "在标准差为零的地方跳过归一化（只在 std > 0 处相除），或在计算标准差的同一组上对分子中心化",
    "silent.softmax_over_singleton": "{op} 作用在大小为 1 的维 {dim} 上（形状 {shape}）：输出恒为 {constant}，之后的一切都是常数，梯度无法经过它",
    "silent.softmax_over_singleton.cause": "在大小为 1 的轴上归一化没有意义：softmax 恒为 1（log_softmax 恒为 0），与输入无关，因此计算该输入的层无法通过它学习；通常是 dim 指向了视图中的单元素轴而不是本意的轴",
    "silent.softmax_over_singleton.next": "在包含候选项的轴（胶囊、类别或键）上做 softmax：对照该行张量的形状检查 dim",
    "silent.softmax_not_contracted_axis": "softmax 作用在形状 {shape} 的维 {dim} 上，但随后的矩阵乘法对维 {contracted} 求和：它得到的权重在该轴上的和为 {lo}..{hi}，而不是 1",
    "silent.softmax_not_contracted_axis.cause": "注意力权重必须是在与之收缩的轴上的分布（每个查询对各个键的权重）；对另一个轴（查询或头）归一化会使每个加权和都未归一化，被屏蔽的位置（在另一个轴上为 -inf）仍会得到权重",
    "silent.softmax_not_contracted_axis.next": "在矩阵乘法收缩的轴上归一化：对形状为 [..., 查询, 键] 的分数使用 softmax(dim=-1)",
    "dynamics.plateau_wrong_mode": "mode='{mode}' 的 ReduceLROnPlateau 降低了学习率，而它监控的指标在每次调用时都{direction}（{calls} 次调用中 {first} -> {last}）：在 mode '{mode}' 下它从未改善",
    "dynamics.plateau_wrong_mode.cause": "mode='{mode}' 把{direction}的指标视为没有改善：在默认 mode='min' 下传入越高越好的分数（准确率），调度器会在模型仍在进步时每隔 `patience` 次评估就降低学习率，训练随之停滞",
    "dynamics.plateau_wrong_mode.next": "为该指标使用 mode='{other}' 构建调度器（ReduceLROnPlateau(optimizer, mode='{other}', ...)），或用验证损失调用它",
    "gradients.loss_no_grad_fn.message.non_differentiable": "传给 backward() 的损失不需要梯度（没有 grad_fn）：它从模型输出出发的路径经过 {line} 处的 {op}，而该运算不可微；backward() 会报错 \"element 0 of tensors does not require grad\"",
    "gradients.loss_no_grad_fn.cause.non_differentiable": "{op} 返回没有梯度的值（索引、比较结果、整数）：由它们算出的一切对 autograd 都是常数，损失无法到达任何参数",
    "gradients.loss_no_grad_fn.next.non_differentiable": "在模型的可微输出上计算损失（logits 配 cross_entropy，或 soft-argmax：softmax(logits) @ bin_centers），{op} 只用于解码预测",
}
