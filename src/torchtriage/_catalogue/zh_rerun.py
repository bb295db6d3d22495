"""中文：运行中无法定位非有限值时重跑脚本（issue 27）。"""

MESSAGES = {
    "nonfinite.rerun.start": ("torchtriage：第 {step} 步的非有限值在本次运行中无法定位；"
                              "正在从头重跑脚本到这一步，并记录这一步（--no-rerun 可关闭）"),
    "nonfinite.rerun.cost": "从头重跑脚本：{steps} 步，用时 {seconds} 秒",
    "nonfinite.rerun.failed": "重跑没有交回结果（{error}）",
    "nonfinite.rerun.bundle": "torchtriage：重跑写出的复现包（完整记录了出错的一步）替换了 {path}",
    "nonfinite.rerun.unseeded": ("脚本没有为 torch 设定种子：本次运行的种子是 {a}，重跑是 {b}，"
                                 "所以重跑抽到了不同的数据和权重；请在开头调用 torch.manual_seed(...)"),
    "nonfinite.rerun.cudnn_benchmark": ("torch.backends.cudnn.benchmark 已开启：cuDNN 按计时选择内核，"
                                        "两次运行结果不同；设为 False 才能复现"),
    "nonfinite.rerun.kernels": ("重跑的损失从第 {step} 步起不同（{a} 对 {b}）：非确定性内核（原子加）；"
                                "torch.use_deterministic_algorithms(True) 可使运行可重复"),
    "nonfinite.rerun.parted": ("重跑的损失从第 {step} 步起不同（{a} 对 {b}）：两次运行的数据或状态不同"
                               "（未设种子的数据加载、torch 之外的随机源、运行之间文件有改动）"),
    "nonfinite.rerun.gone": ("重跑到了第 {step} 步，数值保持有限：这个值取决于脚本种子之外的东西"
                             "（时间、环境、另一个进程）"),
    "nonfinite.why.no_rerun_watch": ("在 watch() 中不会重跑，且这一步没有被记录：请在 `torchtriage run` 下运行脚本"
                                     "（用 torch.manual_seed(...) 设定种子，使重跑取到相同的数据），它会把脚本重跑到这一步"
                                     "以定位该值；或给 watch() 传 step_tape='always' 以记录每一步"),
    "nonfinite.rerun.rank": "{world} 个进程中的第 {rank} 号进程，单独重跑（只有一个进程的进程组：DDP 只平均了这个进程的梯度）",
}
