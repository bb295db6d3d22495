"""中文：数据账本的归一化统计量（session 11）：用留出行算出的统计量缩放。"""

MESSAGES = {
    "ledger.scaled_with_heldout.message": "加载器 {train}（{train_where}）的输入是用包含留出行的统计量归一化的：它的 {m} 个不同行与 {held_loaders} 的 {held} 行合在一起被标准化为均值 0 / 标准差 1（{how}），而训练行本身的均值为 {tmean}、标准差为 {tstd}：均值和标准差是在划分之前对全部 {n} 行计算的",
    "ledger.scaled_with_heldout.cause": "均值和标准差是在整个数据（含验证和测试行）上计算的，之后才划分，于是留出行决定了每个训练输入的尺度和偏移：测试信息泄入训练和模型选择，训练输入也并未被标准化",
    "ledger.scaled_with_heldout.next": "先划分，只在训练行上计算均值和标准差（拟合缩放器），再把同样的统计量应用到验证和测试行",
}
MESSAGES["ledger.stored_mean_with_heldout.message"] = "加载器 {train}（{train_where}）的数据集用来归一化其 {m} 个原始行的均值向量 '{attr}' 不是这些行的均值：它是训练均值朝 {eval}（{eval_where}）的 {held} 个留出行的均值移动了 {share} 的结果，每个特征都是如此（最多 {shift} 个训练标准差）：归一化统计量是在训练行和留出行上一起计算的"
