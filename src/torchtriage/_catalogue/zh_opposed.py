"""Messages of the opposed-rows check (`_silent/_opposed.py`, session 14), Chinese."""

MESSAGES = {
    "data.opposite_targets": "该输入的 {sampled} 个抽样行中有 {count} 个（{share}）与同一组权重（{first}）在本步看到的另一个输入中的行完全相同，而损失把每一对推向相反方向（梯度平均余弦 {cosine}）：同一个输入被训练朝向两个相反的目标",
    "data.opposite_targets.cause": "这两个输入本应不同（正样本与负样本、数据与采样、对比损失的两侧），但有些行是相同的：通过打乱标签或索引（`y[randperm(n)]`）得到的负样本约有 1/类别数 的行保持不变。损失抬高一个输出又压低与它相同的另一个，这些行的梯度相互抵消，并让模型学到正确的输入是错的。",
    "data.opposite_targets.next": "让负样本总是与其正样本不同（标签偏移 `(y + randint(1, n_classes)) % n_classes`，或重新采样相同的行）；可用 `(x_neg == x_pos).all(1).sum()` 检查。",
}
