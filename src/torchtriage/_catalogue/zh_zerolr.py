"""中文：调度首次给出正学习率之前、学习率为 0 的优化器更新。"""

MESSAGES = {
    "dynamics.warmup_steps_at_lr_zero":
        "{optimizer} 的前 {steps} 次优化器更新都在学习率 0 下运行（占其 {total} 次更新的 {share}）："
        "它们没有移动任何参数；学习率在第 {at} 步才首次变为 {lr}（{scheduler}）",
    "dynamics.warmup_steps_at_lr_zero.cause":
        "在第 0 步因子为 0 的预热（step / warmup_steps）在调度器第一次调用 step() 之前一直给出学习率 0；"
        "若每轮或每次包含多次优化器更新的更新周期才调用一次，此前的每一步都白白计算了梯度（还喂给了 Adam 的动量）",
    "dynamics.warmup_steps_at_lr_zero.next":
        "让预热从大于 0 的值开始（(step + 1) / warmup_steps），或在每个周期的第一次更新之前调用调度器的 step()，"
        "使最初的优化器更新真正训练",
}
