# Rank 0 blocks inside a C call that holds the Python interpreter (as some C++ extensions do;
# here a regular expression that backtracks for minutes) while rank 1 waits in barrier():
# rank 0's own threads cannot run.
import datetime
import re

import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
if dist.get_rank() == 0:
    re.match(r"(a+)+$", "a" * 40 + "b")  # exponential backtracking, interpreter lock held
dist.barrier()
dist.destroy_process_group()
