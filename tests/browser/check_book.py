"""`make test-book`: the built book as a reader meets it. Headless Chromium (Debian's package, driven by Playwright)
opens every page of results/book/html/ from a server on localhost and checks that no image is broken, no internal
link leads nowhere, no notebook chapter shows an error output, and every figure of a chapter's notebook is on it; it saves screenshots of the landing page, 75_confirmatory and 80_beyond under results/book/screenshots/ for
a person to look at.

    python tests/browser/check_book.py [--html results/book/html]

Exits 0 when every check passes, 1 with the failures listed, 2 (skipped, with the reason) where Chromium or
Playwright is missing.
"""
from __future__ import annotations

import argparse
import functools
import http.server
import json
import shutil
import sys
import threading
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ("index.html", "notebooks/75_confirmatory.html", "notebooks/80_beyond.html")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
"""as the probe of this machine kind starts Chromium: no connection leaves the machine"""
PAGE_CHECKS = """() => ({
  broken: Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute('src')),
  images: Array.from(document.querySelectorAll('.cell_output img, .output img')).length,
  errors: Array.from(document.querySelectorAll('.output.traceback, .output.error'))
               .map(e => e.textContent.slice(0, 200)),
  links: Array.from(document.querySelectorAll('a[href]')).map(a => a.getAttribute('href')),
})"""


def notebook_figures(html: Path, stem: str) -> int:
    """How many image outputs the chapter's notebook holds (the book's staged copy: the committed notebook, or its
    smoke run under EXECUTE=1)."""
    notebook = json.loads((html.parent / "source" / "notebooks" / f"{stem}.ipynb").read_text())
    return sum(1 for cell in notebook["cells"] for output in cell.get("outputs", [])
               if any(kind.startswith("image/") for kind in output.get("data", {})))


def link_target(html: Path, page: Path, href: str) -> Path | None:
    """The file an internal link of `page` points to (None: an external link, an anchor in the page, or mailto)."""
    parts = urlsplit(href)
    if parts.scheme or parts.netloc or not parts.path:
        return None
    return (page.parent / unquote(parts.path)).resolve()


def serve(folder: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    """A quiet HTTP server of `folder` on localhost (a free port), in a thread."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}/"


def check(html: Path, shots: Path) -> list[str]:
    """Every page's failures, as lines; screenshots of SCREENSHOTS into `shots`."""
    from playwright.sync_api import sync_playwright

    pages = sorted(p for p in html.rglob("*.html") if not p.relative_to(html).parts[0].startswith("_")
                   and p.name not in ("genindex.html", "search.html"))
    failures = []
    server, url = serve(html)
    shots.mkdir(parents=True, exist_ok=True)
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=FLAGS)
            tab = browser.new_page(viewport={"width": 1400, "height": 1000})
            for page in pages:
                name = page.relative_to(html).as_posix()
                tab.goto(url + name, wait_until="load")
                found = tab.evaluate(PAGE_CHECKS)
                failures += [f"{name}: broken image {src}" for src in found["broken"]]
                failures += [f"{name}: error output: {text}" for text in found["errors"]]
                for href in found["links"]:
                    target = link_target(html, page, href)
                    if target is not None and not target.exists():
                        failures.append(f"{name}: broken link {href}")
                if name.startswith("notebooks/"):
                    expected = notebook_figures(html, page.stem)
                    if found["images"] < expected:
                        failures.append(f"{name}: {found['images']} figures shown, the notebook holds {expected}")
                if name in SCREENSHOTS:
                    tab.screenshot(path=str(shots / (name.replace("/", "_").removesuffix(".html") + ".png")))
            browser.close()
    finally:
        server.shutdown()
    print(f"[check_book] {len(pages)} pages checked; screenshots in {shots}")
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--html", default=str(ROOT / "results" / "book" / "html"))
    args = parser.parse_args(argv)
    try:
        import playwright  # noqa: F401
    except ImportError:
        print("[check_book] skipped: Playwright is not installed (pip install -e '.[browser]')")
        return 2
    if shutil.which("chromium") is None:
        print("[check_book] skipped: no chromium executable (apt-get install chromium)")
        return 2
    html = Path(args.html)
    if not (html / "index.html").exists():
        print(f"[check_book] no book in {html}: run `make book` first")
        return 1
    failures = check(html, html.parent / "screenshots")
    for line in failures:
        print(f"[check_book] FAIL {line}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
