"""Regenerate the README's screenshots with the system's headless chromium (`make browser`):

    PYTHONPATH=src python docs/img/screenshots.py

- report.png: the golden NaN report (tests/golden/report_nan.html).
- notebook.png: a notebook executed by a real kernel (nbclient) with the `%%torchtriage` cell
  magic, converted to HTML by nbconvert (`pip install nbconvert`), then shown in chromium.
- tensorboard.png: `torchtriage run --tensorboard` on a regression whose step-12 batch holds an
  Inf, then the real TensorBoard server on 127.0.0.1 and its time-series page in chromium.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]

NOTEBOOK_CELLS = ['%load_ext torchtriage', '''%%torchtriage
import torch
import torch.nn as nn


class LogFeatures(nn.Module):
    def forward(self, x):
        return torch.log(x)  # x can be 0 after the ReLU: log(0) = -inf


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), LogFeatures(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(5):
    loss = nn.functional.mse_loss(model(torch.randn(32, 8)), torch.randn(32, 1))
    opt.zero_grad()
    loss.backward()
    opt.step()''']


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
                OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")


def notebook_html(tmp: Path) -> Path:
    import nbclient
    import nbformat
    from nbconvert import HTMLExporter

    spec = tmp / "jupyter" / "kernels" / "tt-python"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3", "language": "python", "env": {"PYTHONPATH": str(ROOT / "src")}}))
    os.environ.update(JUPYTER_PATH=str(tmp / "jupyter"), IPYTHONDIR=str(tmp / "ipython"))
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in NOTEBOOK_CELLS]
    nbclient.NotebookClient(nb, kernel_name="tt-python", timeout=120).execute()
    body, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    path = tmp / "notebook.html"
    path.write_text(body, encoding="utf-8")
    return path


BAD_BATCH = """
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=20)
w = torch.randn(8, 1)
for step in range(20):
    x = torch.randn(64, 8)
    if step == 12:
        x[3, 5] = float("inf")  # one corrupt sample
    loss = nn.functional.mse_loss(model(x), x @ w)
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
"""


def tensorboard_logs(tmp: Path) -> Path:
    logdir = tmp / "tb"
    script = tmp / "train.py"
    script.write_text(BAD_BATCH, encoding="utf-8")
    subprocess.run([sys.executable, "-m", "torchtriage", "run", "--on-anomaly", "skip_step", "--tensorboard",
                    str(logdir / "train"), str(script)], env=_env(), check=False, capture_output=True, timeout=300)
    return logdir


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as d, sync_playwright() as pw:
        tmp = Path(d)
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        page = browser.new_page(viewport={"width": 1100, "height": 1000})

        page.goto(f"file://{ROOT / 'tests' / 'golden' / 'report_nan.html'}")
        page.screenshot(path=str(OUT / "report.png"), full_page=False)

        page.goto(f"file://{notebook_html(tmp)}")
        page.wait_for_load_state("load")
        page.screenshot(path=str(OUT / "notebook.png"), full_page=False)

        logdir = tensorboard_logs(tmp)
        port = _free_port()
        server = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host",
                                   "127.0.0.1", "--port", str(port)], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        try:
            for _ in range(60):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.5)
            tb = browser.new_page(viewport={"width": 1300, "height": 1050})
            tb.goto(f"http://127.0.0.1:{port}/?pinnedCards=%5B%5D#timeseries", wait_until="load")
            tb.wait_for_selector("text=torchtriage/loss", timeout=60000)
            close = tb.locator("button[aria-label='Close side pane']")
            if close.count():
                close.first.click()  # the settings pane would hide half of the charts
            time.sleep(3)  # the charts draw after the data arrives
            tb.screenshot(path=str(OUT / "tensorboard.png"), full_page=False)
        finally:
            server.terminate()
            server.wait(timeout=30)
        browser.close()
    for name in ("report.png", "notebook.png", "tensorboard.png"):
        print(OUT / name, (OUT / name).stat().st_size, "bytes")


if __name__ == "__main__":
    main()
