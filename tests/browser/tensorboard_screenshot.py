"""`make test-browser`, second half: a short SGT run on the smoke zoo reports to TensorBoard (`mrl run
--report-to tensorboard`), TensorBoard serves results/tensorboard/ on localhost, and headless Chromium saves its
scalars dashboard, filtered to the rescue statistics and rewards, as results/browser/tensorboard.png (the
README's screenshot). Fails when TensorBoard shows none of the run's metrics."""
from __future__ import annotations

import shutil
import subprocess
import sys
import time

import requests

from run_tour_in_lab import OUT, ROOT  # noqa: I001  (it also puts tests/ on the path)
from servers import free_port


def main() -> int:
    logs = ROOT / "results" / "tensorboard"
    shutil.rmtree(logs, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "mrl.cli", "run", "--profile", "smoke", "--probe", "sgt", "--steps", "40",
                    "--report-to", "tensorboard", "--recompute"], check=True, cwd=ROOT)
    port = free_port()
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / "tensorboard.log", "w") as log:
        board = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(logs), "--port", str(port),
                                  "--host", "127.0.0.1"], stdout=log, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            for _ in range(120):
                try:
                    if requests.get(f"{url}/data/runs", timeout=2).ok:
                        break
                except requests.ConnectionError:
                    time.sleep(0.5)
            tags = requests.get(f"{url}/data/plugin/scalars/tags", timeout=30).json()
            shown = sorted({tag for run in tags.values() for tag in run})
            if "A/probe/rescue_size" not in shown:
                raise SystemExit(f"TensorBoard shows no rescue statistics; its tags: {shown}")
            from playwright.sync_api import sync_playwright

            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
                page = browser.new_page(viewport={"width": 1500, "height": 1000})
                page.goto(f"{url}/#timeseries", timeout=120_000)
                page.wait_for_selector("input[placeholder='Filter tags (regex)']", timeout=120_000)
                close = page.locator("button[aria-label='Close side pane'], .settings-pane button:has-text('close')")
                if close.count():
                    close.first.click()
                page.fill("input[placeholder='Filter tags (regex)']", "rescue_size|train/reward")
                page.keyboard.press("Enter")
                time.sleep(5)  # the charts draw
                page.screenshot(path=str(OUT / "tensorboard.png"))
                browser.close()
        finally:
            board.terminate()
            board.wait(timeout=30)
    print(f"[test-browser] TensorBoard shows {len(shown)} scalar tags of the run; screenshot: "
          f"{OUT / 'tensorboard.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
