"""中文：梯度裁剪没有作用到优化器更新的参数上。"""

MESSAGES = {
    "dynamics.clip_misses_optimizer":
        "clip_grad_norm_(..., max_norm={max_norm}) 裁剪的是 {clipped}，但随后 step 的 {optimizer} 不包含其中任何参数："
        "在它裁剪之后的全部 {misses} 步中，它应用的梯度（{stepped}）从未被裁剪；读取的 {read} 步中有 {bit} 步范数超过 "
        "max_norm（中位数 {median}）",
    "dynamics.clip_misses_optimizer.cause":
        "裁剪收到的是另一个模块的参数而不是该优化器的参数（例如 minimize(model, optimizer, loss) 这类辅助函数传入了价值头和"
        "策略优化器，或在 actor 的 step 之前裁剪了 critic），所以为这次更新设置的 max_norm 从未作用于它",
    "dynamics.clip_misses_optimizer.next":
        "裁剪该优化器更新的参数：clip_grad_norm_([p for g in optimizer.param_groups for p in g['params']], max_norm)，"
        "或传入其优化器执行 step 的那个模块",
}
