"""`make test-browser`: JupyterLab in headless Chromium (Debian's package) opens the tour notebook, runs all its
cells from the Run menu as a person would, checks that every code cell ran without an error, and saves
screenshots under results/browser/ for a person to look at.

    python tests/browser/run_tour_in_lab.py [--timeout 600]

Needs JupyterLab (`pip install -e ".[lab]"`), Playwright's Python package and a Chromium executable
(`apt-get install chromium`); the Makefile target installs them.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "results" / "browser"
sys.path.insert(0, str(ROOT / "tests"))
from servers import jupyter  # noqa: E402  (tests/servers.py: shared with tests/test_jupyter.py)


def dismiss_news(page) -> None:
    """JupyterLab asks once, in a toast, whether to fetch its news: answer no, so it covers no output."""
    news = page.get_by_role("button", name="No", exact=True)
    if news.count():
        news.first.click()
        time.sleep(0.5)


PROMPTS = """() => Array.from(document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt'))
                    .map(p => p.textContent.trim())"""


def run_tour(url: str, timeout: float) -> dict:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("no chromium executable on PATH: apt-get install chromium")
    OUT.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        page.goto(url, timeout=120_000)
        page.wait_for_selector(".jp-Notebook .jp-CodeCell", timeout=120_000)
        page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle'], "
                               ".jp-DebuggerBugButton, .jp-KernelStatus", timeout=120_000)
        time.sleep(3)  # the kernel session settles
        dismiss_news(page)
        page.screenshot(path=str(OUT / "tour-opened.png"))
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
        start, prompts = time.monotonic(), []
        while time.monotonic() - start < timeout:
            prompts = page.evaluate(PROMPTS)
            if prompts and all(p.startswith("[") and p[1:-2].isdigit() for p in prompts):
                break
            time.sleep(2)
        else:
            page.screenshot(path=str(OUT / "tour-timeout.png"))
            raise SystemExit(f"the tour did not finish within {timeout} s; prompts: {prompts}")
        seconds = time.monotonic() - start
        errors = page.locator(".jp-OutputArea-output", has_text="Traceback").count()
        page.locator("text=B (source)").first.scroll_into_view_if_needed()
        time.sleep(1)
        dismiss_news(page)
        page.screenshot(path=str(OUT / "tour-thl.png"))
        page.locator("caption", has_text="SGT, live").first.scroll_into_view_if_needed()
        time.sleep(1)
        page.screenshot(path=str(OUT / "tour-sgt.png"))
        browser.close()
    return {"cells": len(prompts), "errors": errors, "seconds": round(seconds, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timeout", type=float, default=600, help="seconds the notebook may take to run")
    args = parser.parse_args()
    token = uuid.uuid4().hex
    OUT.mkdir(parents=True, exist_ok=True)
    with jupyter("jupyterlab", ROOT / "notebooks", token, OUT / "jupyterlab.log") as (url, _):
        result = run_tour(f"{url}/lab/tree/01_tour.ipynb?token={token}", args.timeout)
    print(f"[test-browser] JupyterLab ran the tour's {result['cells']} code cells in {result['seconds']} s, "
          f"{result['errors']} with an error; screenshots: {', '.join(str(p) for p in sorted(OUT.glob('*.png')))}")
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
