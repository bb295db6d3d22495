"""会话 13 中关于只跟随最后一个批次的数值的检查的消息：按 TensorFlow 约定给出动量的 BatchNorm
运行统计量、从未累加的训练损失报告（中文）。"""

MESSAGES = {
    "dynamics.bn_momentum_last_batch":
        "{op} {path} 以 momentum={momentum} 跟踪运行统计量（同类 BatchNorm 共 {count} 个：{examples}）："
        "PyTorch 的 momentum 是新批次的权重，因此每次更新只保留运行均值和方差的 {keep}；经过 {updates} 次更新后，"
        "eval 模式下的运行均值与动量 {intended} 应保持的值相差 {off} 个运行标准差（每次更新跳动 {jump}）",
    "dynamics.bn_momentum_last_batch.cause":
        "TensorFlow、Keras 和 Flax 把旧值的权重称为动量（衰减 0.99）；PyTorch 的 BatchNorm 按 running = "
        "(1 - momentum) * running + momentum * batch 更新。照搬 momentum=0.99 会使运行统计量等于最后一个训练批次的"
        "统计量：eval 模式的模型用最后到来的那个批次做归一化，验证结果在各个 epoch 之间跳动",
    "dynamics.bn_momentum_last_batch.next":
        "传入 momentum = 1 - (TensorFlow 的值)：衰减 0.99 对应 momentum=0.01，或保留 PyTorch 默认的 0.1"
        "（momentum=None 表示累计平均）",
}
MESSAGES.update({
    "unsummed.constant":
        "报告了 {quotient}，但 {name} 只被赋值为 0（第 {lines} 行），在本轮的 {batches} 个批次中没有任何值加到它上面："
        "每次报告的运行数值都是 {reported}",
    "unsummed.constant.losses":
        "报告了 {quotient}，但 {name} 只被赋值为 0（第 {lines} 行），在本轮的 {batches} 个批次中没有任何值加到它上面："
        "每次报告的运行数值都是 {reported}，而本轮 {count} 个训练损失的平均值是 {mean}",
    "unsummed.last":
        "{quotient} 用本轮 {batches} 个批次的计数去除 {name}，但循环是给 {name} 赋值（第 {lines} 行）而不是累加："
        "这个数值是最后一个批次的值除以计数，即 {reported}",
    "unsummed.last.losses":
        "{quotient} 用本轮 {batches} 个批次的计数去除 {name}，但循环是给 {name} 赋值（第 {lines} 行）而不是累加："
        "这个数值是最后一个批次的值除以计数，即 {reported}，而本轮 {count} 个训练损失的平均值是 {mean}",
    "unsummed.reset":
        "{quotient} 用本轮 {batches} 个批次的计数去除 {name}，但循环在每个批次开始时都把 {name} 置为 0（第 {lines} 行）"
        "再累加：这个数值是最后一个批次的值除以计数，即 {reported}",
    "unsummed.reset.losses":
        "{quotient} 用本轮 {batches} 个批次的计数去除 {name}，但循环在每个批次开始时都把 {name} 置为 0（第 {lines} 行）"
        "再累加：这个数值是最后一个批次的值除以计数，即 {reported}，而本轮 {count} 个训练损失的平均值是 {mean}",
    "unsummed.cause":
        "只有当循环把每个值加进总和时（total += loss.item()），运行损失才是本轮数值的平均；缺少这一加法，或写成了赋值，"
        "打印或记录的数值就是一个常数或仅仅是最后一个批次，学习曲线、早停或模型选择读到的是运行中从未计算过的数",
    "unsummed.next":
        "在循环内把每个批次的值加进总和（total += loss.item()，按样本平均时用 loss.item() * batch_size），再除以计数",
})
MESSAGES.update({
    "lastlogged.message":
        "循环在第 {line} 行把 {name} 加进 {total}，但循环之后由 {via} 报告的是 {name}：它只保存本轮 {batches} 个批次中"
        "最后一个批次的值 {last}，而 {total} 在整轮上的平均为 {mean}",
    "lastlogged.cause":
        "循环在总和中构建了本轮的平均值，但循环之后的报告传入的是每批次的变量名，它仍保存着最后一个批次留下的值：只是数据划分中的"
        "一个批次。记录的曲线噪声大，与训练器使用的数值不一致，其最佳点也不是被选中的那个 epoch。",
    "lastlogged.next":
        "报告循环构建的平均值（{total} 除以批次数），而不是 {name}",
})
