"""中文：一次优化器步由什么组成（微批次、批次、平均副本）。"""

MESSAGES = {
    "dynamics.clip_partial_accumulation":
        "clip_grad_norm_ 在同一优化器步的多次 backward() 之间运行（在 {backwards} 个累积微批次的部分和上裁剪了 {clips} 次）："
        "每个部分和在加入下一个微批次之前就被缩放，因此第一个微批次进入更新时的权重只有最后一个的 {weight} 倍",
    "dynamics.clip_partial_accumulation.cause":
        "梯度累积时，直到最后一个微批次的 backward 之前 .grad 都只是部分和；在此时裁剪（每次 backward 后都裁剪，"
        "或未用 accelerator.sync_gradients 判断）会缩小前面微批次的梯度，优化器步应用的既不是总和，也不是总和裁剪后的结果",
    "dynamics.clip_partial_accumulation.cause.quiet":
        "梯度累积时，直到最后一个微批次的 backward 之前 .grad 都只是部分和；在此时裁剪，只要部分和的范数超过 max_norm "
        "就会缩放前面的微批次（在测量的步中尚未发生）",
    "dynamics.clip_partial_accumulation.next":
        "每个优化器步只在最后一个微批次的 backward 之后裁剪一次：用 `if accelerator.sync_gradients:`（accelerate）"
        "或 `if (i + 1) % accumulation_steps == 0:` 包住 clip_grad_norm_ 和 optimizer.step()",
    "ledger.after_loop.message":
        "遍历 {loader} 的批次循环只加载批次：在 {passes} 轮遍历中，循环交付了 {batches} 个批次，期间没有运行任何前向、"
        "反向或优化器步，随后只在最后一个批次上运行了 {steps} 次优化器步；加载的 {samples} 个样本中有 {lost} 个（{share}）"
        "从未进入任何一步",
    "ledger.after_loop.cause":
        "前向、反向和 optimizer.step() 位于批次循环（{loop}）之后而不是之内（缩进错误）：循环变量保留了最后一个批次，"
        "其余批次都被读取后丢弃",
    "ledger.after_loop.next":
        "把前向、loss.backward() 和 optimizer.step()（以及 zero_grad）缩进到批次循环内；按轮次的 scheduler.step() "
        "留在轮次循环中",
    "silent.ema_updated_between_steps":
        "平均副本 {copy} 的更新次数多于优化器步数：{update}() 在 {steps} 个优化器步中运行了 {calls} 次（每步 {per} 次）；"
        "其中 {idle} 次调用与上一次调用之间没有任何优化器步",
    "silent.ema_updated_between_steps.cause":
        "更新位于微批次循环中（在 `with accelerator.accumulate(...)` 之后，或与每 k 次 backward 才执行一次的优化器步并列），"
        "而不是在优化器步之后：它向尚未变化的参数做混合，并且它按调用次数记录的一切（步计数、衰减预热、update_every、"
        "update_after_step）都会提前",
    "silent.ema_updated_between_steps.next":
        "只在优化器实际执行了一步时更新副本：`if accelerator.sync_gradients:`（accelerate），或放在调用 optimizer.step() 的 "
        "`if (i + 1) % accumulation_steps == 0:` 块中",
}
