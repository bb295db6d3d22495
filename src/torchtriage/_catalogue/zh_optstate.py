"""中文：优化器在两次求值或两步之间保留的东西（闭包、状态）。"""

MESSAGES = {
    "gradient.closure_grads_accumulated":
        "{optimizer}.step(closure) 重新求值闭包 {evaluations} 次，其中 {accumulated} 次 backward() 叠加在上一次"
        "求值的梯度上：闭包从不清零梯度，优化器看到的是梯度的累加和，而不是当前点的梯度",
    "gradient.closure_grads_accumulated.cause":
        "backward() 会累加到 .grad；每步多次调用闭包的优化器（LBFGS 的线搜索，最多 max_iter 次求值）要求每次求值"
        "都从清零的梯度开始，而没有 optimizer.zero_grad() 的闭包做不到这一点",
    "gradient.closure_grads_accumulated.next":
        "在闭包开头、计算损失并反向传播之前调用 optimizer.zero_grad()",
    "dynamics.optimizer_state_reset":
        "在上一个优化器已经更新之后，又在同样的 {params} 个参数上新建了 {optimizer}，共 {rebuilds} 次：每个新优化器"
        "都从空状态（{state}）开始，因此每个优化器在 {steps} 步中积累的东西在每次重建时都被丢弃",
    "dynamics.optimizer_state_reset.cause":
        "优化器是在每个 epoch（或每个阶段）调用一次的函数里创建的，而不是在循环之前创建一次；它的矩估计、动量缓冲"
        "和步数每次都重新开始",
    "dynamics.optimizer_state_reset.next":
        "在 epoch 循环之前创建一次优化器，并把它传给训练一个 epoch 的函数",
}

MESSAGES.update({
    "checkpoint.mostly_init":
        "加载到 {model} 的权重大部分仍是本次运行所训练模型的初始值：在 {tensors} 个参数张量上，它们只从初始权重向"
        "训练 {steps} 步后的权重移动了 {share}（仍有 {rest} 是初始值）",
    "checkpoint.mostly_init.cause":
        "该 state dict 来自一个只稍微跟随训练的副本：通常是 EMA / 平均模型，其衰减的时间尺度 1 / (1 - decay) 次更新"
        "长于它实际收到的更新次数（没有预热，或没有把步数传给衰减调度）；保存或评估它，几乎就是随机初始化",
    "checkpoint.mostly_init.next":
        "给 EMA 加预热（衰减随更新次数增大），或选择与运行长度相符的衰减，或直接保存训练后的模型；并比较保存副本"
        "与在线模型的验证分数",
})

MESSAGES.update({
    "dynamics.grad_scale_restarts":
        "梯度的尺度取决于该步在一轮数据中的位置：在每段 {period} 个优化器步内，梯度范数下降了 {shrink} 倍，并在下一段"
        "开始时跳回（{restarts} 次重启），因此每段中后面的更新只得到了梯度的一小部分",
    "dynamics.grad_scale_restarts.cause":
        "自本轮（epoch）开始累积的归一化量在除以每个窗口的损失或梯度，且只在新一轮开始时才重置：按 token 或样本加权"
        "的梯度累积在 optimizer.step() 之后没有重置累计总数",
    "dynamics.grad_scale_restarts.next":
        "在 optimizer.step() / zero_grad() 之后立即重置累积的总数（token 数、样本数、缩放因子），使每次更新只按它自己"
        "的窗口归一化",
})
