"""Coverage without a DataLoader (`_ledger/_unbackwarded.py`, session 9): training forwards whose
graph never reaches a backward. The bug asserts the exact finding (code, severity, the forward's
line marked `# HERE`, the counts); the clean script holds the look-alikes."""

from __future__ import annotations

from test_ledger import alarms, here, run_script


def test_small_batches_kept_for_accumulation_never_reach_a_backward(tmp_path):
    report, _ = run_script("bug_small_batches_not_backpropagated.py", tmp_path)
    [f] = [f for f in report.findings if f.code == "data.coverage_lost"]
    assert (f.severity.value, f.line) == ("warning", here("bug_small_batches_not_backpropagated.py"))
    ev = f.evidence
    assert (ev["forwards"], ev["never_backpropagated"], ev["rows"], ev["lost_rows"], ev["share"]) == \
        (147, 62, 9408, 3968, 0.4218)
    assert ev["undecided_after_last_backward"] == 3  # after the last backward: the run stopped
    assert f.message == ("3968 of 9408 rows (42.2%) given to the training forward at " + f.file + ":" + str(f.line)
                         + " never reached a backward pass: 62 of its 147 forwards built a graph that no backward "
                         "went through")


def test_summed_losses_and_measurements_are_quiet(tmp_path):
    report, _ = run_script("clean_forwards_backpropagated.py", tmp_path)
    assert [f for f in report.findings if f.code == "data.coverage_lost"] == []
    assert alarms(report) == []


MASKED_VIEW_AND_LOSS_MODULE = """
import torch, torch.nn as nn, torch.nn.functional as F

torch.manual_seed(0)
class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.out = nn.Embedding(20, 16), nn.Linear(16, 5)
    def forward(self, ids):
        return self.out(self.emb(ids))                 # (B, T, 5): a view of the matmul's output

class Smoothed(nn.Module):                             # a loss module: no parameters
    def forward(self, logits, y):
        return F.cross_entropy(logits.reshape(-1, 5), y.reshape(-1), label_smoothing=0.1)

model, criterion = Tagger(), Smoothed()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
data = [(torch.randint(1 + i % 2, 20, (8, 12)), torch.randint(0, 5, (8, 12))) for i in range(40)]  # odd: no pad

def run(ids, y):
    logits = model(ids)
    pad = ids == 1
    if pad.any():
        logits[pad] = torch.tensor([0.0, -1e4, -1e4, -1e4, -1e4])   # written into the view
    return criterion(logits, y)

for epoch in range(2):
    model.train()
    for ids, y in data[:30]:
        loss = run(ids, y)
        opt.zero_grad(); loss.backward(); opt.step()
    model.eval()                                       # evaluation with gradients on: the loss
    print(sum(run(ids, y).item() for ids, y in data[30:]))   # module stays in train() mode
"""


def test_an_output_written_in_place_and_a_loss_module_in_evaluation_are_quiet(tmp_path):
    # The backward re-bases a view written in place (it passes through the base's node, not the
    # view's), and a module with no parameters gives no model any rows.
    report, _ = run_script("masked.py", tmp_path, source=MASKED_VIEW_AND_LOSS_MODULE)
    assert [f for f in report.findings if f.code == "data.coverage_lost"] == []
