"""中文：运行实际遵循的学习率调度（以及权重衰减）与代码声明的调度之比较。"""

MESSAGES = {
    "dynamics.scheduler_extra_steps":
        "{scheduler} 在每次优化器更新时被调用（{regular}），又在两次优化器更新之间在这里被调用了 {extra} 次："
        "{ran} 次优化器更新对应 {calls} 次调度器更新，调度超前了 {ahead}",
    "dynamics.scheduler_extra_steps.cause":
        "按步的调度每个批次调用一次，另一处 scheduler.step()（每个 epoch、或训练函数开头）每运行一次就多走一步："
        "预热和衰减都会提前结束",
    "dynamics.scheduler_extra_steps.next":
        "只以一种节奏调用调度器：删除这处多余的 scheduler.step()，保留 optimizer.step() 之后的那一处",
    "dynamics.scheduler_overridden":
        "{scheduler} 设置的学习率在优化器使用之前被覆盖：它的 {undone} 次改动都被撤销（第一次在第 {first} 步："
        "它设为 {set_lr}，优化器却用 {used} 更新），此后没有一次生效",
    "dynamics.scheduler_overridden.cause":
        "调度器之外的代码在 scheduler.step() 之后写 param_group['lr']（预热结束后仍不断写回 initial_lr 的手动预热）："
        "调度器的衰减从未生效",
    "dynamics.scheduler_overridden.next":
        "只在预热期间手动写学习率，之后保留调度器的值（或把预热写成调度器：LinearLR + SequentialLR）",
    "dynamics.scheduler_not_resumed":
        "{scheduler} 在恢复训练时从头开始：它的优化器状态已计数 {unseen} 步，但调度器从 last_epoch {last_epoch} 开始，"
        "而按它的节奏（每次优化器更新 {rate} 步）应在约 {expected}",
    "dynamics.scheduler_not_resumed.cause":
        "检查点恢复了模型和优化器，却没有恢复调度器（没有保存它的 state_dict，或没有调用 scheduler.load_state_dict）："
        "学习率调度从第一步重新开始",
    "dynamics.scheduler_not_resumed.next":
        "在检查点中保存 scheduler.state_dict()，恢复时调用 scheduler.load_state_dict(...)；若本意是新的调度，则属预期",
    "dynamics.weight_decay_inverted":
        "权重衰减 {wd} 只作用于 {decayed} 个一维张量（{decayed_numel} 个元素：偏置、归一化缩放），"
        "而全部 {matrices} 个权重矩阵（{matrices_numel} 个元素，{share}）都在 weight_decay=0 的组里",
    "dynamics.weight_decay_inverted.cause":
        "no_decay 的名称判断写反了：名称匹配的参数（bias、LayerNorm.weight）进了衰减组，其余参数都进了不衰减组",
    "dynamics.weight_decay_inverted.next":
        "交换名称判断的两个分支：no_decay 名称放入 weight_decay=0 的组，权重矩阵放入衰减组",
    "dynamics.warmup_restarts":
        "学习率在 {rises} 步内从 {start} 升到 {top}，在第 {step} 步又跌回起点，共 {restarts} 次（第 {steps} 步）："
        "预热一再重新开始，始终达不到目标学习率",
    "dynamics.warmup_restarts.cause":
        "预热按每个 epoch 重新计数的步数（epoch 内的步数）计算，而预热比一个 epoch 长：每个 epoch 都从头开始爬升",
    "dynamics.warmup_restarts.next":
        "用整个运行的全局步数（epoch * iters_per_epoch + step）计算预热，而不是 epoch 内的步数",
    "dynamics.schedule_horizon_accumulated":
        "{scheduler} 每次优化器更新只步进一次（共 {calls} 步），但它的调度按 {horizon} 步设定，是更新次数的 {accum} 倍："
        "在梯度累积（每次更新 {accum} 次 backward）下，运行只用了调度的 {used}，结束时学习率为 {lr_end}，"
        "是峰值 {peak} 的 {share}，而调度声明的终点约为 0",
    "dynamics.schedule_horizon_accumulated.cause":
        "调度器的长度（num_training_steps、num_warmup_steps、T_max、total_steps）按微批次计数"
        "（max_train_steps * gradient_accumulation_steps），而调度器只在优化器步进时步进"
        "（在 optimizer.step() 之后，或 accelerate 包装后的调度器）：预热长了 {accum} 倍，衰减永远不会到来",
    "dynamics.schedule_horizon_accumulated.next":
        "按优化器更新次数设定调度（max_train_steps，而不是 max_train_steps * gradient_accumulation_steps），"
        "或者每个微批次步进一次调度器",
    "dynamics.norm_weights_decayed":
        "权重衰减 {wd} 作用于 {scales} 个归一化缩放参数（{examples}），而 weight_decay=0 的组里有另外 {free} 个一维张量"
        "（{free_examples}）：不衰减的划分漏掉了归一化权重；整个运行中衰减把它们拉低了 {pull}（占其变化的 {share}）",
    "dynamics.norm_weights_decayed.cause":
        "no_decay 名称列表与该模型的归一化层名称不匹配（\"LayerNorm.weight\" 对 layer_norm / layernorm / norm / ln_f）："
        "归一化增益每一步都被衰减向 0，而偏置却被豁免",
    "dynamics.norm_weights_decayed.next":
        "按模块类型（isinstance(m, (nn.LayerNorm, ...))）或按维度（p.ndim < 2）豁免归一化权重，而不是按名称列表",
    "dynamics.grad_write_discarded":
        "在跟踪的 {tracked} 个梯度中，有 {written} 个在 optimizer.step() 已经使用之后被原地修改（对上一步梯度的裁剪或缩放），"
        "随后在任何一步读取之前就被 zero_grad() 清空，从第 {first} 步起共 {steps} 步（{examples}）：这次写入没有任何作用；"
        "优化器使用的梯度没有被裁剪",
    "dynamics.grad_write_discarded.cause":
        "裁剪在本步的 backward() 之前运行：位于 LightningModule 的 training_step 中（Lightning 在它返回后才清零梯度并调用 "
        "backward），或位于 optimizer.step() 之后；它作用于随后被 zero_grad() 丢弃的过期梯度",
    "dynamics.grad_write_discarded.next":
        "在 backward() 之后、optimizer.step() 之前裁剪：Lightning 中放在 configure_gradient_clipping（或 "
        "Trainer(gradient_clip_val=...)）里；普通循环中放在 loss.backward() 与 optimizer.step() 之间",
    "dynamics.scheduler_decay_lost":
        "{scheduler} 已把学习率从 {before} 衰减到 {after}，但在任何一步使用它之前，它的优化器就被替换了："
        "新的 {optimizer} 管理同样的参数，却从衰减之前的学习率 {used} 开始（是调度值的 {factor} 倍），运行了 {ran} 步；"
        "这次衰减被重置，从未生效",
    "dynamics.scheduler_decay_lost.cause":
        "优化器（及其调度器）在调度器衰减的那一步被重新创建，使用基础学习率（optim.Adam(params, opt.learning_rate)），"
        "新调度器的计数从 0 开始：调度从第一个值重新开始",
    "dynamics.scheduler_decay_lost.next":
        "用调度器已达到的学习率（scheduler.get_last_lr()）创建新的优化器，或保留优化器只修改参数组，或沿用调度器的状态（last_epoch）",
    "dynamics.scheduler_burst_steps":
        "{scheduler} 在两次优化器更新之间被连续调用 {most} 次，共有 {bursts} 处如此：它只在 {gaps} 处被调用，却走了 "
        "{calls} 步；其中 {skipped} 个学习率从未被任何一次优化器更新使用，当前学习率为 {lr_now}（峰值的 {share}）",
    "dynamics.scheduler_burst_steps.epochs":
        "{scheduler} 在每个 epoch 的边界处被连续调用 {most} 次，中间没有优化器更新：{epochs} 个 epoch 中走了 "
        "{calls} 步（每个 epoch {per_epoch} 步）；其中 {skipped} 个学习率从未被任何一次优化器更新使用，当前学习率为 "
        "{lr_now}（峰值的 {share}）",
    "dynamics.scheduler_burst_steps.cause":
        "调用调度器的代码在连续几个批次上都触发（用 `index % epoch_length < accumulation` 判断的按 epoch 调用，"
        "或在优化器不更新的批次上调用）：每次多余的调用都让调度跳过一个优化器从未使用的位置，衰减比预期快几倍",
    "dynamics.scheduler_burst_steps.next":
        "只在优化器更新时调用调度器，并且按其时间跨度的单位调用一次（step_size / milestones 以 epoch 计时，每个 epoch 一次）",
    "dynamics.schedule_past_end":
        "{scheduler} 被调用了 {calls} 次，但它的调度更早结束：学习率在它的第 {horizon} 步退火到下限 {floor}"
        "（峰值的 {floor_share}），随后在训练继续时又回升到 {back}（峰值 {peak} 的 {back_share}）",
    "dynamics.schedule_past_end.cause":
        "调度的时间跨度（总步数、T_max、num_training_steps）比调度器实际被调用的次数少：按全局步或 epoch 构建，"
        "却在每次优化器更新或每个批次调用，或总步数算小了；过了终点，余弦会重新上升",
    "dynamics.schedule_past_end.next":
        "按调度时间跨度的单位调用调度器（每个全局步在其所有优化器更新之后调用一次），或按实际调用次数构建调度"
        "（每个全局步的优化器更新次数 × 步数）",
    "dynamics.warmup_most_of_run":
        "学习率预热占了本次运行 {total} 次优化器更新中的 {steps} 次（{share}）：它在第 {step} 步才达到峰值 {peak}，"
        "衰减只剩 {left} 步（结束时学习率为 {end}）；损失在预热前半段下降了 {drop1}，后半段下降了 {drop2}",
    "dynamics.warmup_most_of_run.cause":
        "预热占调度的比例过大（本应是 0.1 的预热比例写成了 0.9，或预热步数与总步数的单位不同）："
        "大部分训练在低于设定学习率的情况下进行，损失随学习率上升而下降得更快，说明前面的更新被学习率拖慢了",
    "dynamics.warmup_most_of_run.next":
        "把预热设为运行的一小部分（总步数的 0.01-0.1，用同一单位计算），并确认调度器实际读取的是哪一个预热设置",
}
