"""中文：加载器打乱顺序时按批次位置查找的逐样本旁路数据（`_ledger/_sidedata.py`）。"""

MESSAGES = {
    "ledger.side_misaligned.message": "与打乱顺序的加载器 {loader}（{where}）的批次一起输入的逐样本数据，与其自身样本的匹配程度并不比与同批其他样本更高（{batches} 个批次上的对比度 {mixed}），而同一输入在保持数据集顺序的加载器 {other} 中与其样本相匹配（对比度 {ordered}）：旁路数据是按批次位置查找的，因此打乱的加载器把每个样本与另一个样本的数据配在了一起",
    "ledger.side_misaligned.cause": "旁路数据（回馈的掩码、缓存的特征、先验）按批次计数器以数据集顺序索引（side[i * batch_size:(i + 1) * batch_size]），而加载器每个 epoch 都以新的随机顺序抽取样本",
    "ledger.side_misaligned.next": "按样本自身的索引查找旁路数据：让数据集返回每个样本的索引（或旁路数据行本身）并用它来索引旁路数据，或让加载器保持数据集顺序",
}
