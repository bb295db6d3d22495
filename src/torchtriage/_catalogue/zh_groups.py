"""中文：自身设置从未生效的参数组。"""

MESSAGES = {
    "dynamics.group_lrs_collapsed":
        "{optimizer} 的 {groups} 个参数组声明了不同的学习率（{declared}），但在全部 {steps} 个优化步中都以相同的 lr 运行"
        "（峰值 {peak}，最后 {last}）：各组各自的学习率从未生效",
    "dynamics.group_lrs_collapsed.scheduler":
        "{optimizer} 的 {groups} 个参数组声明了不同的学习率（{declared}），但 {scheduler} 调度器覆盖了它们：全部 {steps} "
        "个优化步中各组都以相同的 lr 运行（峰值 {peak}，最后 {last}），各组各自的学习率从未生效",
    "dynamics.group_lrs_collapsed.cause":
        "调度器在需要每组一个值的参数处只收到一个标量（OneCycleLR 的 max_lr、CyclicLR 的 base_lr/max_lr）时，会把该值写入"
        "每个参数组，丢弃各组自己的 lr；循环中把同一个 lr 写进所有参数组也是如此",
    "dynamics.group_lrs_collapsed.next":
        "为每个参数组传一个值，例如 max_lr=[g['lr'] for g in optimizer.param_groups]，或按各组自己的比例缩放写入的 lr",
    "dynamics.group_lrs_collapsed.unread":
        "{optimizer} 的 {groups} 个参数组在键 '{key}' 下存放了不同的学习率值（{declared}），但 torch.optim 不读取这个键，运行中也没有代码把它写入 'lr'：全部 {steps} 个优化步中各组都以相同的 lr 运行（峰值 {peak}，最后 {last}），各组的学习率设置被忽略",
    "dynamics.group_lrs_collapsed.unread.cause":
        "参数组会保留传入的任何额外键，但优化器只用组里的 'lr' 更新；'lr_mul'、'lr_scale' 这类倍率只有在某段代码（自定义调度器、训练循环）据此设置 group['lr'] 时才生效，这里没有",
    "dynamics.group_lrs_collapsed.unread.next":
        "把学习率本身放进参数组，例如 {{'params': ..., 'lr': base_lr * lr_mul}}，或让调度器在每一步设置 group['lr'] = base_lr * group['lr_mul']",
    "dynamics.empty_param_group":
        "{optimizer} 的参数组 {index} 不含任何参数（各组张量数 {sizes}），其设置 {settings} 不作用于任何参数；"
        "其他组使用 {others}",
    "dynamics.empty_param_group.meant":
        "{optimizer} 的参数组 {index}（{settings}）为空（各组张量数 {sizes}）：用来填充它的名字判断没有匹配到任何参数，"
        "本应属于它的 {meant} 个 {kind} 张量（{meant_numel} 个值；不衰减组通常是偏置和归一化缩放）在全部 {steps} "
        "步中都以 {others} 运行",
    "dynamics.empty_param_group.cause":
        "参数组通常按 named_parameters() 的名字划分；`n in no_decay` 把 'encoder.norm.bias' 这样的完整名字与 "
        "['bias', 'LayerNorm.weight'] 这些短键逐一比较，永远不成立，本意是子串判断",
    "dynamics.empty_param_group.next":
        "按子串判断：any(nd in n for nd in no_decay)，并在构建优化器后检查每个参数组的大小",
}
