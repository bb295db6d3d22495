"""中文：创建后从未调用 step() 的学习率调度器。"""

MESSAGES = {
    "dynamics.scheduler_never_stepped":
        "{scheduler} 调度器从未调用 step()：{optimizer} 的学习率在全部 {epochs} 个训练轮次中一直是 {lr}，"
        "而按照调度，它在 {after} 步之后应为 {next_lr}",
    "dynamics.scheduler_never_stepped.cause":
        "调度器只有在调用 scheduler.step() 时才会改变学习率；在 Lightning 手动优化（automatic_optimization = False）下，"
        "configure_optimizers 返回的调度器不会被自动调用，普通循环也必须自己调用 step()",
    "dynamics.scheduler_never_stepped.next":
        "在 optimizer.step() 之后调用 scheduler.step()（按轮次的调度每轮一次，例如手动优化下在 "
        "self.trainer.is_last_batch 时调用；按步的调度每个批次一次）",
    "dynamics.scheduler_never_stepped.steps":
        "{scheduler} 调度器从未调用 step()：在第 {loop_line} 行循环的全部 {steps} 次优化器更新中，{optimizer} 的学习率"
        "一直是 {lr}，而按照调度，它在 {after} 步之后应为 {next_lr}，到最后一步应为 {end_lr}",
    "dynamics.scheduler_never_stepped.loop":
        "{scheduler} 调度器从未调用 step()：在第 {loop_line} 行训练循环的全部 {epochs} 次迭代（{steps} 次优化器更新）中，"
        "{optimizer} 的学习率一直是 {lr}，而按照调度，它在 {after} 步之后应为 {next_lr}",
}
