"""`make test-book`: the built book as a reader meets it. Headless Chromium (Debian's package, driven by Playwright)
opens every page of results/book/html/ from a server on localhost and checks that no image is broken, no internal
link leads nowhere (its page exists and so does the anchor it names), no notebook chapter shows an error output or a
traceback in a stream, no page raises a script error, and every figure of a chapter's notebook is on it; it saves
screenshots of the landing page, 75_confirmatory and 80_beyond under results/book/screenshots/ for a person to look
at.

    python tests/browser/check_book.py [--html results/book/html]

Exits 0 when every check passes, 1 with the failures listed, 2 (skipped, with the reason) where Chromium or
Playwright is missing.
"""
from __future__ import annotations

import argparse
import functools
import http.server
import json
import re
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
               .map(e => e.textContent.slice(0, 200))
               .concat(Array.from(document.querySelectorAll('.output.stream, .output.stderr'))
                       .filter(e => e.textContent.includes('Traceback (most recent call last)'))
                       .map(e => e.textContent.slice(0, 200))),
  links: Array.from(document.querySelectorAll('a[href]')).map(a => a.getAttribute('href')),
})"""


def notebook_figures(html: Path, stem: str) -> int:
    """How many image outputs the chapter's notebook holds (the book's staged copy: the committed notebook, or its
    smoke run under EXECUTE=1)."""
    notebook = json.loads((html.parent / "source" / "notebooks" / f"{stem}.ipynb").read_text())
    return sum(1 for cell in notebook["cells"] for output in cell.get("outputs", [])
               if any(kind.startswith("image/") for kind in output.get("data", {})))


def link_target(html: Path, page: Path, href: str) -> tuple[Path, str] | None:
    """(the file an internal link of `page` points to, the anchor it names or ''); None for an external link or
    mailto. A link to an anchor of its own page points to the page."""
    parts = urlsplit(href)
    if parts.scheme or parts.netloc or not (parts.path or parts.fragment):
        return None
    return (page.parent / unquote(parts.path)).resolve() if parts.path else page.resolve(), unquote(parts.fragment)


@functools.lru_cache(maxsize=None)
def anchors(page: Path) -> frozenset[str]:
    """The ids (and a names) a built page defines, from its HTML."""
    return frozenset(re.findall(r"""\b(?:id|name)=["']([^"']+)["']""", page.read_text(errors="replace")))


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
            script_errors: list[str] = []
            tab.on("pageerror", lambda error: script_errors.append(str(error)[:200]))
            for page in pages:
                name = page.relative_to(html).as_posix()
                tab.goto(url + name, wait_until="load")
                found = tab.evaluate(PAGE_CHECKS)
                failures += [f"{name}: broken image {src}" for src in found["broken"]]
                failures += [f"{name}: error output: {text}" for text in found["errors"]]
                failures += [f"{name}: script error: {error}" for error in script_errors]
                script_errors.clear()
                for href in found["links"]:
                    target = link_target(html, page, href)
                    if target is None:
                        continue
                    path, anchor = target
                    if not path.exists():
                        failures.append(f"{name}: broken link {href}")
                    elif anchor and path.suffix == ".html" and anchor not in anchors(path):
                        failures.append(f"{name}: link {href} names an anchor its page lacks")
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
