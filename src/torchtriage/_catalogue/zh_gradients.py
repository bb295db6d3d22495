"""中文：梯度链路（issue 4）。"""

MESSAGES = {
    "gradients.unregistered_tensor.message":
        "{parameter} 是 {module} 上一个 requires_grad=True 的普通张量属性，并不是已注册的参数",
    "gradients.unregistered_tensor.cause":
        "nn.Module 只注册 nn.Parameter 属性；普通张量不在 parameters() 中，优化器不会更新它，"
        ".to(device) 不会移动它，state_dict() 也不会保存它",
    "gradients.unregistered_tensor.next": "改为 self.{attribute} = nn.Parameter(...)",
    "gradients.unregistered_tensors.message":
        "{parameter} 是一个存放 requires_grad=True 张量的 Python {container}：这些张量没有注册为参数",
    "gradients.unregistered_tensors.cause": "放在普通 {container} 里的张量不会被注册，优化器看不到 {items}",
    "gradients.unregistered_tensors.next": "用 nn.{fix} 代替 Python {container}",
    "gradients.unregistered_modules.message":
        "{parameter} 是一个存放子模块的 Python {container}：其参数（{values} 个数值）没有注册到 {module}",
    "gradients.unregistered_modules.cause":
        "放在普通 {container} 里的子模块（{items}）不会被注册：parameters() 和优化器都看不到它们，"
        ".to(device) 不会移动，state_dict() 不会保存",
    "gradients.unregistered_modules.next": "用 nn.{fix} 代替 Python {container}",
    "gradients.frozen.message": "{module}：{parameters} 个参数（{values} 个数值）已冻结（requires_grad=False）",
    "gradients.frozen.cause": "requires_grad=False 是有意设置的（冻结的主干或嵌入层），这些参数不会得到梯度",
    "gradients.frozen.next": "如果是有意冻结则无需处理；否则在构建优化器之前调用 requires_grad_(True)",
    "gradients.unused.message": "{module} 的 {count} 个可训练参数没有梯度：前向中从未调用 {module}",
    "gradients.unused.cause": "该模块没有参与本次前向（分支未走到，或定义了却没有调用），所以 grad 保持为 None",
    "gradients.unused.next": "检查 forward()：每条需要训练它的路径上都调用了 {module} 吗？",
    "gradients.cut_to_python.message":
        "{count} 个参数（{parameter} 等）没有梯度：通往 loss 的路径在 {op}（{line}）处离开了计算图",
    "gradients.cut_to_python.cause":
        "{op} 把张量变成了 Python 数字；再用 torch.tensor(...) 包回来的新张量不记得原来的计算图，反传到不了它背后的参数",
    "gradients.cut_to_python.next": "保持在张量上计算：在 {line} 处直接使用张量本身，而不是 {op}",
    "gradients.cut_detach.message": "{count} 个参数（{parameter} 等）没有梯度：通往 loss 的路径在 {line} 被 {op} 切断",
    "gradients.cut_detach.cause": "detach() 返回一个没有历史的张量，由它计算出的结果对反传不可见",
    "gradients.cut_detach.next": "如果这些参数需要训练，去掉 {line} 处的 detach()（用于日志或目标值时保留）",
    "gradients.cut_no_grad.message": "{count} 个参数（{parameter} 等）没有梯度：{module} 在 {mode} 下运行（{line}）",
    "gradients.cut_no_grad.cause": "torch.no_grad() 下不记录计算图，在其中计算出的输出不需要梯度",
    "gradients.cut_no_grad.cause.inference_mode": "torch.inference_mode() 下不记录计算图，其中计算出的输出永远不能求梯度",
    "gradients.cut_no_grad.next": "把训练时的前向移出 torch.no_grad()（验证时保留 no_grad）",
    "gradients.cut_no_grad.next.inference_mode": "把训练时的前向移出 torch.inference_mode()",
    "gradients.cut_in_module.message": "{module} 的 {count} 个参数没有梯度：{module} 返回的张量不需要梯度",
    "gradients.cut_in_module.cause": "在 {module}.forward 内部，结果与其参数的联系被切断（detach、no_grad 块，或由数据重建的张量）",
    "gradients.cut_in_module.next": "检查 {module}.forward 中通往输出的 detach()、no_grad 或 torch.tensor(...)",
    "gradients.unreached.message": "{module} 的 {count} 个参数没有从任何 loss 得到梯度",
    "gradients.unreached.cause": "{module} 运行了，但它的输出没有用于 loss，或在中途被一个 requires_grad=False 的新张量替换",
    "gradients.unreached.cause.no_forward": "本次前向没有调用该模块，或它的输出在通往 loss 的途中被丢弃或切断（detach、no_grad、.item() → torch.tensor、requires_grad=False 的新张量）",
    "gradients.unreached.next.no_forward": "把前向作为函数传入：diagnose_gradients(model, lambda: loss_fn(model(x), y))，即可定位到具体算子和代码行",
    "gradients.unreached.next": "沿着 {module} 的输出追到 loss，确认它没有被覆盖或丢弃",
    "gradients.leaf_not_registered.message":
        "loss 依赖一个 requires_grad=True 的张量 {shape}，但它不是模型的参数（{line}）",
    "gradients.leaf_not_registered.cause":
        "用 requires_grad=True 创建的张量（在 forward 内或模型外）是计算图的叶子但不是已注册参数："
        "它会得到 grad，但优化器不持有它，而且每次调用都会重新创建",
    "gradients.leaf_not_registered.next": "在 __init__ 中用 nn.Parameter(...) 创建一次，并交给优化器",
    "gradients.param_recreated.message": "{parameter} 已不是开始观察时的那个 Parameter 对象：它被重新创建了（{line}）",
    "gradients.param_recreated.cause":
        "赋值一个新的 nn.Parameter（例如在 forward 中）会替换已注册的参数；优化器仍持有旧对象，旧对象永远得不到梯度",
    "gradients.param_recreated.next": "只在 __init__ 中创建参数；如需修改数值，请在 no_grad 下原地更新",
    "gradients.zero.message": "{parameter} 的梯度处处恰好为零",
    "gradients.zero.cause": "路径存在但传回的是零：掩码、乘以零，或导数为零的算子",
    "gradients.zero.cause.dead_relu": "{module} 在这个批次上的输出从未为正：后面的 ReLU 不传梯度（神经元死亡）",
    "gradients.zero.next": "检查 {module} 与 loss 之间为 0 的掩码或系数",
    "gradients.zero.next.dead_relu": "检查 {module} 的初始化、偏置和学习率；可尝试 LeakyReLU/GELU",
    "gradients.not_in_optimizer.message":
        "{module} 的 {count} 个参数（{parameter} 等）得到了梯度，但不在任何优化器参数组中",
    "gradients.not_in_optimizer.cause": "优化器只用部分参数构建（或在添加某层之前构建）：这些参数永远不会被更新",
    "gradients.not_in_optimizer.next": "在模型构建完成后，用 model.parameters() 构建优化器",
    "gradients.optimizer_stale.message":
        "优化器 {optimizer}（{optimizer_class}）持有 {not_in_model} 个已不属于模型的参数；模型有 {missing} 个可训练参数不在任何优化器中",
    "gradients.optimizer_stale.cause": "优化器是在模型（或其参数）被替换或重新创建之前构建的：它更新的是旧张量",
    "gradients.optimizer_stale.next": "在得到最终模型之后再创建优化器，例如在加载 / to(device) / 重新创建之后",
    "gradients.optimizer_idle.message": "优化器 {optimizer}（{op}）在 {steps} 次优化器更新中从未 step：其 {parameters} 个参数（{examples}）得到的梯度从未被应用",
    "gradients.optimizer_idle.message.model": "{model} 的优化器 {optimizer}（{op}）在 {steps} 次优化器更新中从未 step：其 {parameters} 个参数（{examples}）得到的梯度从未被应用",
    "gradients.optimizer_idle.cause": "每步的反向传播都会计算这些梯度，但从未对这个优化器调用 step()（每个模型一个优化器，忘了其中一个 .step()），这些参数因此从不改变",
    "gradients.optimizer_idle.next": "在 backward() 之后对这个优化器调用 step()（并在下一次之前 zero_grad()），或把它的参数放进会 step 的优化器",
    "gradients.lr_zero.message": "优化器 {optimizer} 的第 {group} 组在 {steps} 步中学习率都为 0",
    "gradients.lr_zero.cause": "lr=0 时更新量为零：参数虽有梯度却不会改变",
    "gradients.lr_zero.next": "检查 lr 的取值和调度器（从 0 开始的预热必须上升）",
    "gradients.loss_no_grad_fn.message":
        "传给 backward() 的 loss 不需要梯度（没有 grad_fn）：backward() 将报错 "
        "\"element 0 of tensors does not require grad\"",
    "gradients.loss_no_grad_fn.cause.to_python":
        "loss 是由 Python 数字重建的：{line} 处的 {op} 离开了计算图，torch.tensor(...) 又创建了一个新的叶子张量",
    "gradients.loss_no_grad_fn.next.to_python": "用张量计算 loss（例如 x ** 2，而不是 torch.tensor(x.item() ** 2)）",
    "gradients.loss_no_grad_fn.cause.no_grad": "前向在 torch.no_grad() 下运行（{line}）：没有记录计算图",
    "gradients.loss_no_grad_fn.next.no_grad": "去掉训练前向外面的 no_grad 块",
    "gradients.loss_no_grad_fn.cause.inference_mode": "前向在 torch.inference_mode() 下运行（{line}）",
    "gradients.loss_no_grad_fn.next.inference_mode": "去掉训练前向外面的 inference_mode",
    "gradients.loss_no_grad_fn.cause.detach": "通往 loss 的路径在 {line} 被 {op} 切断",
    "gradients.loss_no_grad_fn.next.detach": "去掉 {line} 处的 detach()",
    "gradients.loss_no_grad_fn.cause.frozen": "模型的所有参数都是 requires_grad=False",
    "gradients.loss_no_grad_fn.next.frozen": "解冻需要训练的层（requires_grad_(True)）",
    "gradients.loss_no_grad_fn.cause.leaf": "loss 只由 requires_grad=False 的张量构成（路径上没有任何参数）",
    "gradients.loss_no_grad_fn.next.leaf": "确认 loss 是由模型输出计算的，而不是由数据或其副本计算的",
    "gradients.nonleaf_grad.message": "在 {line} 读取了非叶子张量 {shape} 的 `.grad`：它永远是 None",
    "gradients.nonleaf_grad.cause": "backward() 只为叶子张量（参数、用 requires_grad=True 创建的输入）填写 .grad",
    "gradients.nonleaf_grad.next": "在 backward() 之前对它调用 .retain_grad()，或读取叶子张量的 .grad",
    "gradients.zero_grad_missing.message":
        "梯度在优化器步之间累加：上一次 {op}.step() 用过的梯度在这次 backward 之前没有清零",
    "gradients.zero_grad_missing.cause": "backward() 会累加到 .grad；不调用 optimizer.zero_grad() 时，每一步都在应用过去所有梯度之和",
    "gradients.zero_grad_missing.next": "每个优化器步调用一次 optimizer.zero_grad()（梯度累积时：紧跟在 step() 之后）",
    "gradients.eval_builds_graph.message": "{model} 在 eval() 模式下运行且自动求导开启（{line}）：前向构建了一个没有反传使用的计算图",
    "gradients.eval_builds_graph.cause": "eval() 只改变 dropout / batch norm 的行为，并不关闭自动求导",
    "gradients.eval_builds_graph.next": "把验证放在 torch.no_grad() 或 torch.inference_mode() 中，节省显存和时间",
}
