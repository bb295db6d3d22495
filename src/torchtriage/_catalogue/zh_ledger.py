"""中文：步骤账本（issue 26）：损失项、缩放后的梯度、评估时的 dropout。"""

MESSAGES = {
    "ledger.best_checkpoint_regressed": "{file} 只在部分评估后写入，作为最佳检查点，但它的 {writes} 次写入中有 {bad} 次用更差的 {metric} 覆盖了更好的（首次在第 {step} 步：{before} 之后写入 {value}；{direction} 更好）：最终保存的是 {final}，而此前写入过 {best}，按“最佳”加载的模型并不是见过的最佳模型",
    "ledger.best_checkpoint_regressed.restored": "{file} 只在部分评估后写入，作为最佳检查点，但它的 {writes} 次写入中有 {bad} 次用更差的 {metric} 覆盖了更好的（首次在第 {step} 步：{before} 之后写入 {value}；{direction} 更好）；之后的写入又放回了最佳值",
    "ledger.best_checkpoint_regressed.cause": "最佳模型文件只应被所跟踪指标的更好值覆盖；这里的比较放过了更差的值：从检查点恢复时没有恢复最佳值（被重置为 {{}} / None / inf），早停的 delta 符号写反（score < best - delta），或比较方向写反",
    "ledger.best_checkpoint_regressed.next": "在每次保存时打印比较的值和目前的最佳值；把最佳指标存进每个检查点并在恢复时读回；对得分，只有 score > best + delta 才算更好（对损失：loss < best - delta）",
    "ledger.term_detached.reach":
        "损失项 {term} 由 {model} 的输出计算而来，却到达不了 {model} 的任何参数：它的梯度只流向 {reach}，"
        "且从未被应用；而 {model} 只用其他损失项更新（{others}）",
    "ledger.term_detached.nothing":
        "损失项 {term} 由 {model} 的输出计算而来，却到达不了任何可训练参数：它耗费计算而不改变任何东西；"
        "而 {model} 只用其他损失项更新（{others}）",
    "ledger.term_detached.cause":
        "从 {model} 的输出到该损失项的路径被切断（{cut}）：反向传播无法把该项的梯度送到 {model}，"
        "因此更新 {model} 的优化器从未看到它",
    "ledger.term_detached.next":
        "用仍保留计算图的输出计算该项（{model} 与该项之间不要 .detach() / .data / no_grad）；"
        "只在另一个模型自己的更新中 detach",
    "ledger.clip_before_unscale":
        "第 {step} 步 {fn} 作用于仍乘着 GradScaler 缩放因子（{scale}）的梯度：之前没有调用 scaler.unscale_(optimizer)",
    "ledger.clip_before_unscale.cause":
        "scaler.scale(loss).backward() 之后每个 .grad 都乘着缩放因子，直到 scaler.step() 或 scaler.unscale_()；"
        "裁剪量的是缩放后的范数，阈值因此错了一个缩放因子，一旦裁剪生效，更新就被缩小同样的倍数",
    "ledger.clip_before_unscale.next":
        "在 backward() 之后、{fn} 之前调用 scaler.unscale_(optimizer)，然后 scaler.step(optimizer)",
    "ledger.dropout_in_eval":
        "{module}（{cls}）的 forward 中 {fn}(p={p}) 在 {module} 处于 eval() 模式时仍在丢弃单元："
        "同一输入的两次评估结果不同",
    "ledger.dropout_in_eval.cause":
        "函数式的 {fn} 默认 training=True，不读取模块的模式；model.eval() 只关闭 nn.Dropout 模块，不关闭这个调用",
    "ledger.dropout_in_eval.next":
        "给 {fn} 传 training=self.training（或改用 nn.Dropout 模块）；只有蒙特卡洛 dropout 才自己传 training=True",
    "silent.kl_div_input_not_log": "{loss} 收到的输入不是对数概率",
    "silent.kl_div_input_not_log.cause":
        "kl_div(input, target) 要求 input 是对数概率（所有值 <= 0，例如 log_softmax 的输出）；"
        "传入概率或原始分数时，它在错误的尺度上计算 target * (log target - input)：损失和梯度都不是 KL 散度",
    "silent.kl_div_input_not_log.next":
        "把 F.log_softmax(scores, dim) 作为 input（target 用概率，或设 log_target=True）",
    "ledger.frozen_moved":
        "第 {step} 步 {opt}.step() 改变了 {count} 个 requires_grad=False 的参数（{first} 等）",
    "ledger.frozen_moved.cause":
        "优化器跳过 .grad 为 None 的参数，而不是 requires_grad 关闭的参数：这些参数仍有 .grad 张量"
        "（zero_grad(set_to_none=False) 会留下零），所以 {settings} 仍在移动它们，尽管它们已被冻结",
    "ledger.frozen_moved.next":
        "冻结时把它们的 .grad 设为 None（p.grad = None，或 zero_grad(set_to_none=True)），或把它们移出优化器的参数组",
    "ledger.frozen_moved.nograd":
        "{opt}.step() 从第 {step} 步起移动了 {count} 个冻结参数（requires_grad=False，没有 .grad：{first} 等）："
        "虽然没有梯度到达它们，它们的值仍变化了最多 {change}",
    "ledger.frozen_moved.nograd.cause":
        "torch 的优化器会跳过 .grad 为 None 的参数；这个优化器不跳过（它用零填充缺失的梯度，或更新它持有的每个张量），"
        "因此 {settings} 不断改变本应冻结的权重",
    "ledger.frozen_moved.nograd.next":
        "在优化器的 step 中跳过 .grad 为 None 的参数（`if p.grad is None: continue`），或把冻结的参数移出其参数组",
    "ledger.step_repeated":
        "{opt}.step() 在已经应用过的梯度上再次运行（{steps} 次被检查的步中有 {repeats} 次，自上一步以来没有反向传播）："
        "同一梯度让参数移动了两次",
    "ledger.step_repeated.cause":
        "一次反向传播对应两次对该优化器的 step 调用（此处和 {other}）：训练步包装器已经调用 optimizer.step()"
        "（或 scaler.step(optimizer)），循环之后又自己调用一次；每个批次被应用两次，优化器的状态和步数也前进两次",
    "ledger.step_repeated.next":
        "每次反向传播只保留一次 optimizer.step()：包装器已调用时去掉循环中的调用（或包装器中的），并把优化器的步数与批次数比较",
    "ledger.step_counter":
        "{opt} 的步数计数器 {counter} 每次 optimizer.step() 前进 {per}（在全部 {steps} 次被检查的步中；当前为 {value}）："
        "其偏差校正和按步计算的规则所用的步数不是实际步数",
    "ledger.step_counter.cause":
        "计数器在遍历参数组中参数的循环里递增（或在其中递增不止一次），因此每个张量前进一次而不是每步前进一次，"
        "且每个张量看到的步数各不相同",
    "ledger.step_counter.next":
        "每个参数组每步只在遍历其参数的循环之前递增一次计数器，并检查它等于优化器的步数",
    "ledger.optimizer_not_resumed":
        "运行从它自己写入的 {file} 恢复并加载了模型权重，但其中保存的优化器状态（{key}：{states} 个参数状态）从未进入任何优化器："
        "一个全新的 {opt} 代替它走了 {steps} 步（{differs}）",
    "ledger.optimizer_not_resumed.cause":
        "恢复只还原了模型和轮次计数，却从未调用 optimizer.load_state_dict（接受了 optimizer 参数却忽略它，或在读取检查点之后"
        "重新创建优化器），因此学习率、调度以及动量 / Adam 矩估计都从初始值重新开始",
    "ledger.optimizer_not_resumed.next":
        "在恢复之前创建优化器（和调度器），并把保存的状态加载进去：optimizer.load_state_dict(checkpoint['optimizer'])",
    "ledger.optimizer_load_failed":
        "{opt}.load_state_dict() 抛出异常（{error}）而运行继续进行：加载的字典中的 {held} 个优化器状态从未进入该优化器"
        "（{n} 个参数），它从一个全新的空状态走了 {steps} 步",
    "ledger.optimizer_load_failed.cause":
        "该状态字典不适合这个优化器（其参数组的参数个数不同：是另一个优化器保存的状态，恢复时文件被对调），"
        "而捕获异常的代码只记录了它，因此恢复的运行把 Adam 的矩估计和步数从零重新开始",
    "ledger.optimizer_load_failed.next":
        "把每个保存的优化器状态加载到保存它的那个优化器中，并让失败的恢复抛出异常（或在加载后检查 len(optimizer.state)）",
    "ledger.not_moved.low":
        "{model} 的 {count} 个参数（{first} 等）有非零梯度，{opt} 也执行了 {steps} 次 step，"
        "但其采样值中有 {share} 从未改变：权重是 {dtype}，更新被舍入掉了",
    "ledger.not_moved.low.cause":
        "权重以 {dtype} 存储：在 |w| = {w} 附近相邻可表示数相差约 {spacing}，小于其一半的更新"
        "（Adam 的步长约为 lr = {lr}）会被舍入回原值，所以大多数权重不动",
    "ledger.not_moved.low.next":
        "保留 float32 权重（不要用 .to({dtype}) / .half() 转换模型），在 torch.autocast(dtype={dtype}) 下运行前向；"
        "或为优化器保留一份 float32 主副本",
    "ledger.not_moved.still":
        "{model} 的 {count} 个参数（{first} 等）有非零梯度，{opt} 以 lr {lr} 执行了 {steps} 次 step，"
        "但其采样值从未改变",
    "ledger.not_moved.still.cause":
        "优化器的 step 没有作用到这些值上：它更新的是另一个张量（过期的副本、构建优化器后被替换的参数的旧张量），"
        "或者每次 step 之后有代码把它们恢复了",
    "ledger.not_moved.still.next":
        "检查优化器持有的正是模型使用的张量（比较 model.parameters() 与 optimizer.param_groups 的 id(p)），"
        "并确认 step() 之后没有代码重新加载或覆盖它们",
    "ledger.ranks_drift":
        "{model} 的各副本在第 {step} 步之后不一致：{count} 个参数（{first} 等）在 rank {a} 与 rank {b} 上不同",
    "ledger.ranks_drift.cause":
        "DDP 只有在各 rank 起点相同、执行相同更新并同步每个梯度时才能保持副本一致；这一步中有代码让某个 rank 的参数"
        "发生了不同的变化（只在一个 rank 上的更新、按 rank 设置的随机种子、绕过同步的梯度）",
    "ledger.ranks_drift.next":
        "比较第 {step} 步前后两个 rank 上这些参数的值；查找只在一个 rank 上运行、或在 optimizer.step() 之外更新参数的代码",
    "ledger.ranks_drift.cause.cast":
        "模型被 DistributedDataParallel 包装之后，参数又被转换了类型或设备（{casts}）：DDP 的梯度桶与广播是为旧张量建立的，"
        "各 rank 不再同步它们",
    "ledger.ranks_drift.next.cast":
        "在包装为 DistributedDataParallel 之前完成模型的 .to(dtype)、.half()、.cuda()",
    "ledger.ranks_drift.cause.bypass":
        "在梯度模式下直接调用了被包装的模块（{line}，model.module(x)）：DDP 只为经过包装器的调用同步梯度，"
        "那次调用的 backward 让每个 rank 留下了各自的梯度",
    "ledger.ranks_drift.next.bypass":
        "训练时调用 DDP 包装器本身（model(x)）；只在 torch.no_grad() 下调用 model.module",
    "ledger.grad_summed":
        "第 {step} 步 {count} 个参数（{first} 等）同步后的梯度是 {world} 个 rank 各自梯度均值的 {ratio} 倍："
        "它在各 rank 间求和后没有再除",
    "ledger.grad_summed.cause":
        "dist.all_reduce(p.grad) 默认求和（ReduceOp.SUM）：不除以进程数时，每一步都是平均梯度的 {world} 倍，"
        "相当于学习率放大了 {world} 倍",
    "ledger.grad_summed.next":
        "在 all_reduce 之后除以进程数（p.grad /= dist.get_world_size()），或使用 ReduceOp.AVG，"
        "或交给 DistributedDataParallel 求平均",
    "ledger.sharded_no_grad":
        "{count} 个分片参数（{first} 等）在 {steps} 次优化器 step 中都没有梯度（.grad 为 None）：它们从未被训练",
    "ledger.sharded_no_grad.cause":
        "没有任何 backward 到达这些 fully_shard 参数：其模块不在通往损失的路径上被调用，输出被 detach 或在 no_grad 下计算，"
        "或者它们在 fully_shard 之后被替换了",
    "ledger.sharded_no_grad.next":
        "沿模块的输出追踪到损失；在模型完整之后再调用 fully_shard，并在 forward 中调用分片后的模块（而不是副本）",
    "ledger.not_moved.never":
        "{opt} 持有 {model} 的 {count} 个参数（{first} 等），它们在 {backwards} 次 backward 中得到了非零梯度，"
        "但 step() 从未被调用：其采样值没有任何改变",
    "ledger.not_moved.never.cause":
        "更新从未执行：optimizer.step() 外面的条件（梯度累积、步数计数）从未成立，或漏掉了 step()，"
        "梯度在 .grad 中不断累积而权重从不改变",
    "ledger.not_moved.never.next":
        "检查控制 optimizer.step() 的条件（例如每个 epoch 的批次数少于 accumulation_steps 时的 "
        "(step + 1) % accumulation_steps），并确认每个 epoch 至少执行一次 step()",
    "ledger.not_moved.copy":
        "{model} 的 {count} 个参数（{first} 等）在 {backwards} 次 backward 中得到了非零梯度，但没有任何优化器持有它们；"
        "{opt} 对 {twins} 个从未有过梯度的张量执行了 {steps} 次 step：采样值没有任何改变",
    "ledger.not_moved.copy.cause":
        "优化器是为这些参数的另一份副本构建的（模型的 deepcopy 或克隆，或被替换之前的参数）："
        "它更新的是前向从不使用的张量，所以 {model} 从不改变",
    "ledger.not_moved.copy.next":
        "在复制或替换模型之后，用这个模型自己的参数构建优化器（type(opt)(model.parameters(), **opt.defaults)）",
    "ledger.not_moved.gradless":
        "从第 {since} 步起的每个被检查的步骤（共 {steps} 个）{opt} 都执行了 step，但它持有的 {count} 个张量（属于 {model}）"
        "都没有梯度，尽管 backward 在运行：它的更新不会改变前向用到的任何东西",
    "ledger.not_moved.gradless.cause":
        "优化器持有的张量并不是损失所到达的张量：它是在 deepcopy / 克隆模型之前，或参数被替换之前构建的，"
        "所以此后训练的模型从未改变",
    "ledger.not_moved.gradless.next":
        "在复制或替换模型之后，用所训练模型的参数构建优化器（type(opt)(model.parameters(), **opt.defaults)）",
    "ledger.term_detached.cause.constant":
        "这一项不需要梯度：它由 {model} 的输出经过模型内部的一处切断（.detach()、.data、no_grad，或由数值重建的张量）"
        "计算而来，所以在损失中是一个常数，无论权重多大，它对 {model} 的梯度都是零",
    "ledger.module_flag":
        "{module}.requires_grad = False 只是在 {kind} 模块上设置了一个属性，而不是在它的参数上：它的 {total} 个参数中"
        "有 {n} 个仍然需要梯度，{opt}.step() 移动了它们（第 {step} 步）",
    "ledger.module_flag.cause":
        "nn.Module 没有 requires_grad 标志：给它赋值只会保存一个普通的 Python 属性，什么也不会冻结；"
        "参数仍然是 requires_grad=True，会得到梯度，并且仍在优化器中",
    "ledger.module_flag.next":
        "冻结参数本身：{module}.requires_grad_(False)（或 for p in {module}.parameters(): p.requires_grad = False），"
        "或者不要把它们放进优化器",
    "ledger.stale_step":
        "{opt}.step() 应用的梯度自它上一次更新以来没有任何 backward 写入：{where} 处的 backward 把梯度写到了 {tensors} 个"
        "没有任何优化器持有的张量（{values} 个值）上，而没有写到 {opt} 持有的 {n} 个张量中的任何一个（第 {step} 步）",
    "ledger.stale_step.cause":
        "优化器是在另一个模型的参数上构建的（在超参数扫描、重启或交叉验证折中重建模型却沿用第一个模型的优化器）："
        "被训练的模型得到的梯度从未被应用，而优化器反复应用旧模型最后的梯度",
    "ledger.stale_step.next":
        "为每个新模型在模型之后构建优化器：optimizer = torch.optim.Adam(model.parameters(), ...)",
    "ledger.frozen_norm":
        "{count} 个被冻结的归一化层（首个为 {module}，{kind}）在 {eval_line} 被单独设为 eval()，而这次 train() 调用又把它们"
        "切回了训练模式：尽管参数已冻结，它们的运行统计量又吸收了 {batches} 个训练批次，运行均值最多移动了 {shift} 个标准差",
    "ledger.frozen_norm.own_eval":
        "{count} 个归一化层（首个为 {module}，{kind}）在 {eval_line} 被逐个设为 eval() 以冻结其运行统计量，而这次 train() "
        "调用又把它们切回了训练模式：被冻结的统计量又吸收了 {batches} 个训练批次，运行均值最多移动了 {shift} 个标准差"
        "（方差最多变化 {factor} 倍）",
    "ledger.frozen_norm.own_eval.cause":
        "eval() 是一种模式，而不是会保持的标志：Module.train() 会递归到每个子模块，所以每个 epoch 的 model.train() "
        "都会撤销冻结 BatchNorm 统计量的 eval()；这些层在训练中用批次统计量归一化，而评估使用被新数据覆盖的运行统计量",
    "ledger.frozen_norm.own_eval.next":
        "在每次 model.train() 之后把冻结的层重新设为 eval()（在模型中重写 train() 以重新冻结，或在 model.train() 之后立即调用）",
    "ledger.frozen_norm.train_mode":
        "{model} 中被冻结的部分 {part} 的 {count} 个 BatchNorm 层（首个为 {module}，{kind}）在训练模式下运行：该部分的权重在 "
        "{steps} 个优化器步骤中完全未变，但其运行统计量吸收了 {batches} 个训练批次，运行均值最多移动了 {shift} 个标准差"
        "（方差最多变化 {factor} 倍）",
    "ledger.frozen_norm.train_mode.cause":
        "requires_grad=False（或不把参数交给优化器）冻结的是权重，而不是 BatchNorm 的运行统计量：它们是缓冲区，train() "
        "模式下的每次前向都会把批次并入其中。被训练的层拟合的是冻结部分按批次归一化的特征，评估时却用漂移后的统计量归一化，"
        "保存的冻结部分也不再是预训练的那个",
    "ledger.frozen_norm.train_mode.next":
        "在每次 model.train() 之后把冻结部分设为 eval()（紧接着对 {part} 调用 eval()，或在模型中重写 train() 让它保持 "
        "eval()）；只有在有意适配其统计量时才让它保持 train()",
    "ledger.frozen_norm.cause":
        "eval() 是一种模式，而不是会保持的标志：Module.train() 会递归到每个子模块，所以每个 epoch 的 model.train() "
        "都会撤销冻结该层的 eval()，它会用批次统计量做归一化，并用新数据覆盖它的运行均值和方差",
    "ledger.frozen_norm.next":
        "在每次 model.train() 之后把冻结的层重新设为 eval()（在模型中重写 train()，或紧接着调用 {module}.eval()），"
        "或者换成冻结的归一化层",
    "ledger.best_checkpoint_regressed.cause.unguarded":
        "目前最佳值 {record} 在第 {record_line} 行于每次评估后都被设为 {metric}，而不在保存的分支里：每次保存比较的是"
        "{metric} 与上一次评估的值，而不是目前的最佳值，所以只比上一次好的评估会用更差的模型覆盖最佳检查点",
    "ledger.best_checkpoint_on_training_loss":
        "最佳检查点 {file} 按 {metric} 选择，而它在 {writes} 次写入时都等于刚训练过的那个训练批次的损失，"
        "尽管运行中评估过模型（{evaluations} 次评估前向）：被保留为最佳的是最后一个训练批次拟合得最好的模型，"
        "而不是在留出数据上得分最好的模型（过拟合的模型会一直被保存）",
    "ledger.best_checkpoint_on_training_loss.no_evaluation":
        "最佳检查点 {file} 按 {metric} 选择，而它在 {writes} 次写入时都等于刚训练过的那个训练批次的损失："
        "选择模型的是一个训练批次的损失，而不是留出数据上的得分",
    "ledger.best_checkpoint_on_training_loss.cause":
        "最佳检查点的判断所比较的得分读自训练步的输出（引擎的最后输出、最后一个批次的损失），而不是验证过程："
        "它衡量的是一个训练批次的拟合程度，噪声大，并且在模型过拟合时仍不断下降",
    "ledger.best_checkpoint_on_training_loss.next":
        "用验证结果给最佳检查点打分（把处理器挂到验证器 / 评估器上，或比较该轮的验证损失或指标）；在每次保存时"
        "把比较的得分和验证损失一起打印出来",
}
