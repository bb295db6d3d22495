"""中文：只设置了模型很少或没有参数的 load_state_dict(strict=False) 调用。"""

MESSAGES = {
    "loads.not_loaded.prefix":
        "load_state_dict(strict=False) 只设置了 {model} 的 {total} 个参数中的 {loaded} 个：{unexpected} 个多余的键"
        "（例如 '{example}'）就是它缺失的 {missing} 个键，只是前缀不同（去掉 '{strip}'，加上 '{add}'）；"
        "未加载的参数保持随机初始化",
    "loads.not_loaded.nothing":
        "load_state_dict(strict=False) 只设置了 {model} 的 {total} 个参数中的 {loaded} 个：state dict 的键没有一个匹配"
        "（缺失 {missing} 个键，多余 {unexpected} 个键，例如 '{example}'）；模型保持随机初始化",
    "loads.not_loaded.cause.prefix":
        "strict=False 会忽略键不匹配而不报错：从 DataParallel / DDP 包装器保存的检查点（'module.' 开头的键）"
        "或从包装模块保存的检查点，给每个权重加上了模型不使用的前缀，因此其中的内容都没有被加载",
    "loads.not_loaded.cause.nothing":
        "strict=False 会忽略键不匹配而不报错：这个 state dict 属于另一个模型或它的另一层级（包装器、子模块、优化器状态）",
    "loads.not_loaded.next.prefix":
        "加载前重命名键，例如 {{k.removeprefix('{strip}'): v for k, v in sd.items()}}，并用 strict=True 加载"
        "（或检查返回的 missing_keys / unexpected_keys）",
    "loads.not_loaded.next.nothing":
        "加载这个模型自己保存的 state dict（打印双方的几个键对比），并检查返回的 missing_keys / unexpected_keys，"
        "或用 strict=True 加载",
    "loads.not_loaded.raised":
        "{model} 的 load_state_dict 报错：state dict 把它的权重存放在另一个前缀下（去掉 '{strip}'，加上 '{add}'）："
        "{unexpected} 个多余的键中有 {fixes} 个（例如 '{example}'）正是 {model} 缺失的 {missing} 个键，形状相同；"
        "它的 {total} 个参数一个也没能设置",
    "loads.not_loaded.cause.raised":
        "检查点是从包装器的 state_dict() 保存的，却加载进未包装的模型（或反过来）：DistributedDataParallel / "
        "DataParallel 把每个权重命名为 'module.<name>'，torch.compile 命名为 '_orig_mod.<name>'，"
        "LightningModule 或 EMA 容器用其属性名作前缀",
    "loads.not_loaded.next.raised":
        "保存未包装的模型（model.module.state_dict()），或在加载时去掉前缀："
        "{{k.removeprefix('{strip}'): v for k, v in sd.items()}}",
    "loads.not_loaded.unchanged":
        "在 {read} 读取的检查点 {file} 含有 {model} 的 {total} 个参数中的 {held} 个（{where}），但这次 "
        "load_state_dict 载入的是 {model} 自己的值：比较的 {compared} 个参数没有一个改变，且都与检查点中的不同；"
        "模型保留了恢复之前的权重",
    "loads.not_loaded.cause.unchanged":
        "传给 load_state_dict 的字典由模型自己的 state_dict() 构造，只填入名字匹配的检查点条目：检查点把权重存放在"
        "另一个键（如 'model_state_dict'、'state_dict'、'model'）或另一个前缀下，所以什么也没复制，"
        "这次加载把模型恢复成了它自己",
    "loads.not_loaded.next.unchanged":
        "载入检查点内部保存的 state dict（ckpt['model_state_dict'] 或保存时用的键），并确认 "
        "load_state_dict(..., strict=True) 能接受它",
}
