"""中文：各数据划分的标签编码（数据账本 `_ledger/_encoding.py`）与 DataLoader 各 worker 间重复的样本（`_ledger/_workers.py`）。"""

MESSAGES = {
    "ledger.encoding.message":
        "评估 loader {eval} 与训练 loader {train} 的标签编码不同：评估数据集的 {attr} 中有 {count} 个类别的索引不同"
        "（{shown}）；{n} 个评估样本中有 {wrong} 个的标签在训练中代表另一个类别（依据 {checked} 核对）",
    "ledger.encoding_missing.cause":
        "每个数据集都根据自己找到的类别构建了 {attr}：评估划分缺少 {missing}，其后的类别索引全部前移一位，"
        "模型对正确类别的预测被记为错误",
    "ledger.encoding_extra.cause":
        "每个数据集都根据自己找到的类别构建了 {attr}：评估划分含有训练从未见过的类别（{extra}），占用了训练类别的索引",
    "ledger.encoding_order.cause":
        "每个数据集各自构建了 {attr}，且两者顺序不同：同一个索引在训练和评估中代表不同的类别",
    "ledger.encoding_missing.next":
        "用训练数据集的类别构建评估数据集（ImageFolder(root, ...) 调用 find_classes；传入或重映射到 "
        "train_ds.class_to_idx），或按类别名把评估标签映射到训练索引",
    "ledger.encoding_extra.next":
        "用训练数据集的类别构建评估数据集，并丢弃或单独报告训练从未见过的类别",
    "ledger.encoding_order.next":
        "只从训练划分（或固定的类别列表）构建一次编码，并交给每个划分使用",
    "ledger.workers.message":
        "loader {loader} 在前 {batches} 个批次中交付的 {n} 个样本里，有 {repeated} 个（{share}）与同一轮中另一个 worker "
        "批次同一位置的样本（索引不同）完全相同：它的 {workers} 个 worker 产生了相同的样本",
    "ledger.workers_generator.cause":
        "数据集从自身持有的随机数生成器取数（{generators}）；每个 worker 进程得到一份生成器状态相同的数据集副本，"
        "因此每个 worker 抽到相同的随机数（PyTorch 为每个 worker 重新设置 torch、random 和 numpy 全局生成器的种子，"
        "但不处理数据集持有的生成器对象）：每个 epoch 只训练了所交付样本中 1/{workers} 的不同样本",
    "ledger.workers_generator.next":
        "给 DataLoader 传入 worker_init_fn，用 torch.utils.data.get_worker_info().seed 重新设置数据集生成器的种子"
        "（或改用 PyTorch 会按 worker 设置种子的 np.random / torch 全局生成器）",
    "ledger.workers_same.cause":
        "每个 worker 都从相同的随机状态开始（worker_init_fn 用同一个常数设置种子、数据集持有的生成器），"
        "或完整遍历同一数据流（IterableDataset 没有按 get_worker_info() 切分数据），所以各 worker 交付相同的样本",
    "ledger.workers_same.next":
        "用 torch.utils.data.get_worker_info().seed（或 worker id）为每个 worker 设置种子，并按 worker id 切分 "
        "IterableDataset 的数据流",
    "ledger.eval_random.message":
        "评估 loader {loader} 在第二遍中为 {n} 个样本里的 {changed} 个（{share}）交付了与第一遍不同的输入：它的评估是随机的",
    "ledger.eval_random.cause":
        "评估样本经由一个随机变换的数据集读取（用 sampler 或 Subset 从带增强的训练数据集中切出的验证划分保留了随机裁剪和翻转），"
        "因此每一遍评估的都是不同的增强视图：用于挑选最佳模型的每轮指标部分是增强噪声，而且是在训练分布的输入上测得的",
    "ledger.eval_random.next":
        "用带评估变换的数据集构建评估划分（相同的文件或索引，transform=test_transform），随机增强只留给训练 loader",
    "ledger.eval_random.transform.message":
        "评估 loader {loader} 在第二遍中为 {n} 个样本里的 {changed} 个（{share}）交付了与第一遍不同的输入{weights}："
        "它的数据集在 {applied} 应用了 {transform}，它会随机抽样，所以每次评估给出的都是数据的另一次随机抽样的得分",
    "ledger.eval_random.transform.cause":
        "评估流程中含有随机变换（本用于训练的随机裁剪、翻转、抖动或噪声）：评估不再只取决于权重，同一组权重评估两次"
        "得分不同，最佳轮次部分是由随机抽样挑出的",
    "ledger.eval_random.transform.next":
        "使用确定性的评估变换（用 Resize / CenterCrop 代替 RandomResizedCrop / RandomCrop，不做翻转或加噪）；"
        "若有意做测试时增强，请对每个样本的多次抽样取平均，并使用固定的生成器",
    "ledger.eval_random.same_weights.message":
        "评估 loader {loader} 在同一组权重的两遍评估中（其间没有更新）为 {n} 个样本里的 {changed} 个（{share}）"
        "交付了不同的输入：它的评估是随机的",
    "ledger.eval_random.same_weights.cause":
        "评估样本经由一个随机抽样的数据集读取：同一组权重评估两次得到不同的输入，所以得分是一次随机抽样，而不是对模型的度量",
    "ledger.eval_random.same_weights.next":
        "让评估数据集确定化（不用随机变换，它做的任何抽样都用固定的生成器），并对同一个检查点评估两次：结果必须一致",
}
