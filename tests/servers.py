"""Local servers the JupyterLab tests start: a free port, a Jupyter server (jupyter_server or JupyterLab) on
localhost with a token, waited for and stopped. Used by tests/test_jupyter.py and tests/browser/."""
from __future__ import annotations

import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import requests


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def jupyter(module: str, root: Path, token: str, log_path: Path, wait: float = 60):
    """`python -m <module>` (jupyter_server or jupyterlab) serving `root` on 127.0.0.1 with `token`, its output in
    log_path; yields (url, port) once /api/status answers, stops it on exit. A server that exits or does not
    answer within `wait` seconds raises RuntimeError with the end of its log."""
    port = free_port()
    with open(log_path, "w+") as log:
        process = subprocess.Popen([sys.executable, "-m", module, f"--ServerApp.port={port}",
                                    "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}",
                                    "--ServerApp.open_browser=False", f"--ServerApp.root_dir={root}",
                                    "--ServerApp.port_retries=0", "--allow-root"], stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + wait
            while not _answers(url, token):
                if process.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise RuntimeError(f"{module} did not start (exit code {process.poll()}):\n{log.read()[-3000:]}")
                time.sleep(0.5)
            yield url, port
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()


def _answers(url: str, token: str) -> bool:
    try:
        return requests.get(f"{url}/api/status", params={"token": token}, timeout=2).ok
    except requests.ConnectionError:
        return False
