"""第 12 轮关于损失项权重和所报告指标的检查的消息（中文）。"""

MESSAGES = {
    "silent.loss_term_divided_twice": "一个损失项被批大小（{batch}）除了 {times} 次，而它只在批维度上归约了 {reduced} 次（第 {lines} 行）：它以代码所给权重的 1/{factor} 进入损失（{value}，本应为 {intended}，总损失 {loss}）",
    "silent.loss_term_divided_twice.cause": "该项已经是批上的均值（`mean`、损失函数默认的归约，或除以批大小的求和），又被批大小除了一次：它流向每个共享参数的梯度小了同样的倍数，写在它旁边的权重也不再是它字面的意思。",
    "silent.loss_term_divided_twice.next": "像其他项一样只除以一次批大小（去掉多余的 `/ batch_size`，或在相除之前求和而不是取均值）。",
}
MESSAGES.update({
    "silent.metric_never_reset": "指标 {metric} 计算了 {computes} 次却从未重置：第 {k} 次 compute 报告的 {value} 覆盖了迄今全部 {updates} 次更新（{samples} 个样本），而只算上次 compute 之后的 {group} 次更新（{group_samples} 个样本）时它是 {own}",
    "silent.metric_never_reset.counts": "指标 {metric} 计算了 {computes} 次却从未重置：第 {k} 次 compute 覆盖了迄今全部 {updates} 次更新（{samples} 个样本），而不只是上次 compute 之后的 {group} 次更新（{group_samples} 个样本）",
    "silent.metric_never_reset.cause": "有状态的指标会把每次更新累加进状态，直到调用 reset()：在每个 epoch 结束时计算却不重置，第 k 个 epoch 的数值就是第 0..k 个 epoch 合起来的指标。它落后于模型、抹平了进步，据此做的早停或检查点选择跟随的是过时的平均值。",
    "silent.metric_never_reset.next": "在每个 epoch 结束 compute() 之后立即调用 metric.reset()（或在每个 epoch 第一次更新之前）；要覆盖整个训练过程的数值请用另一个指标对象。",
})
MESSAGES.update({
    "batchmetrics.message": "{metric} 按 batch 计分，并在第 {line} 行累加进 {target}：{batches} 个 batch 分数的均值为 {by_batch}，而在这一遍的 {samples} 个样本上它是 {over}",
    "batchmetrics.cause": "精确率、召回率、F1、AUC 不是样本上的均值：逐 batch 分数的平均取决于 batch 的组成（没有正例的 batch 在该类上得 0），即使是准确率也让较小的最后一个 batch 与完整 batch 权重相同。每个 epoch 的数值以及据此做的模型选择或早停，都不是该 epoch 真正的指标。",
    "batchmetrics.next": "收集这一遍的全部目标和预测（或混淆矩阵），在这一遍结束时对它们一次性计算指标。",
})
MESSAGES.update({
    "units.message": "{total} 累加的是 {what}，却除以 {denom}（它计数的是 {counts}）{extra}：报告的均值是被累加值均值的 {factor} 倍（平均批大小 {batch}）",
    "units.cause": "滑动均值只有在累加和计数统计同一种东西时才正确：批均值除以批数，或逐批求和（损失乘以批大小，或 reduction='sum' 的损失）除以样本数。混用会让数值按批大小缩放，再乘以另一个加载器的长度还会再缩放一次；与验证损失的比较、不同批大小运行之间的比较都会偏差这个倍数。",
    "units.next": "累加 loss.item() * batch_size 并除以样本数（或累加批均值并除以批数）；去掉计数另一个加载器的因子。",
})
MESSAGES.update({
    "unreset.message": "{collection} 每个 batch 保存一个值，第 {line} 行对其取平均，但它在各轮之间从未清空：它保存了 {kept} 个值，本轮 {batches} 个、之前各轮 {earlier} 个，所以报告的均值为 {whole}，而本轮的 batch 给出的是 {own}（创建于第 {made} 行）",
    "unreset.cause": "该列表只在重复各轮的循环之前创建一次：每个 epoch 都把自己的 batch 追加到之前所有 epoch 的值之后，第 k 个 epoch 之后打印的数字是从训练开始以来的滑动均值。它落后于模型，抹平了模型的进步，并误报训练/验证的差距。",
    "unreset.next": "在每轮开始时创建该列表（把 `{collection} = []` 移到 epoch 循环内部），或只对本轮的条目取平均。",
})
MESSAGES.update({
    "metricroles.message": "{metric} 以 {first} 作为 y_true、{second} 作为 y_pred 调用，但 {first} 保存的是模型的预测，{second} 是目标：在这 {rows} 行上调用返回 {reported}，按 scikit-learn 的参数顺序（y_true, y_pred）则为 {right}",
    "metricroles.cause": "scikit-learn 的指标把第一个参数当作真实标签。两者互换时 precision 与 recall 互换，加权平均按 y_true 中各类的数量（这里是模型预测它的次数）加权，labels= / pos_label 选的是真实标签的类别：报告的指标度量的是别的东西，会错误地排序模型。",
    "metricroles.next": "把目标放在前面：{metric}({second}, {first}, ...)，或用关键字参数（y_true=..., y_pred=...）。",
})
