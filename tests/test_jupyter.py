"""JupyterLab's server as it is used: a Jupyter server on localhost with a token serves the tour notebook through
its contents API, a session starts a kernel as JupyterLab's "open notebook" does, every code cell runs over the
kernel's websocket (the messaging protocol JupyterLab speaks, not papermill), and the outputs are checked."""
import json
import time
import uuid
from pathlib import Path

import pytest
import requests

from servers import jupyter

websocket = pytest.importorskip("websocket")
pytest.importorskip("jupyter_server")

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
TOKEN = uuid.uuid4().hex


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    try:
        with jupyter("jupyter_server", NOTEBOOKS, TOKEN, tmp_path_factory.mktemp("jupyter") / "server.log") as found:
            yield found
    except RuntimeError as err:
        pytest.fail(str(err))


def test_the_server_refuses_requests_without_the_token(server):
    url, _ = server
    assert requests.get(f"{url}/api/contents/01_tour.ipynb", timeout=10).status_code == 403


def execute(ws, session: str, code: str, timeout: float = 300) -> list[dict]:
    """Run `code` on the kernel behind `ws`; the iopub messages its execution produced, until the kernel is
    idle again (outputs, errors, status)."""
    msg_id = uuid.uuid4().hex
    ws.send(json.dumps({"header": {"msg_id": msg_id, "username": "test", "session": session, "date": "",
                                   "msg_type": "execute_request", "version": "5.3"},
                        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
                        "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                                    "allow_stdin": False, "stop_on_error": True}}))
    messages, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = json.loads(ws.recv())
        if message.get("parent_header", {}).get("msg_id") != msg_id or message["channel"] != "iopub":
            continue
        if message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
            return messages
        messages.append(message)
    raise TimeoutError(f"the cell did not finish within {timeout} s:\n{code[:300]}")


def text_of(messages: list[dict]) -> str:
    parts = []
    for message in messages:
        content = message["content"]
        if message["msg_type"] == "stream":
            parts.append(content["text"])
        elif message["msg_type"] in ("execute_result", "display_data"):
            parts += [str(value) for value in content["data"].values()]
    return "\n".join(parts)


@pytest.mark.slow
def test_the_tour_runs_through_the_kernel_api(server):
    url, port = server
    headers = {"Authorization": f"token {TOKEN}"}
    contents = requests.get(f"{url}/api/contents/01_tour.ipynb", headers=headers, timeout=30)
    assert contents.ok, contents.text
    cells = [c for c in contents.json()["content"]["cells"] if c["cell_type"] == "code"]
    started = requests.post(f"{url}/api/sessions", headers=headers, timeout=60, json={
        "path": "01_tour.ipynb", "type": "notebook", "name": "", "kernel": {"name": "python3"}})
    assert started.ok, started.text
    session = started.json()
    ws = websocket.create_connection(f"ws://127.0.0.1:{port}/api/kernels/{session['kernel']['id']}/channels"
                                     f"?token={TOKEN}", timeout=300)
    try:
        outputs = []
        for cell in cells:
            messages = execute(ws, session["id"], "".join(cell["source"]) if isinstance(cell["source"], list)
                               else cell["source"])
            errors = [m["content"] for m in messages if m["msg_type"] == "error"]
            assert not errors, f"{errors[0]['ename']}: {errors[0]['evalue']}\nin cell:\n{cell['source']}"
            outputs.append(text_of(messages))
    finally:
        ws.close()
        requests.delete(f"{url}/api/sessions/{session['id']}", headers=headers, timeout=30)
    shown = "\n".join(outputs)
    # the tour's first output names its zoo: the smoke zoo on a checkout without the held-out zoo cached (CI)
    if "zoo heldout:" in shown:
        assert "zoo heldout: policies ['A', 'B']" in shown and "weak skill" in shown
    else:
        assert "zoo smoke: policies ['A', 'B', 'C']" in shown and "WordPiece" in shown
    assert "Unigram" in shown                                             # how each tokenizer splits the prompt
    assert 'title="group 0"' in shown and "B (source)" in shown           # the THL alignment drawn as HTML
    assert "A/probe/rescue_size" in shown                                 # the live SGT table
    assert "rollout" in shown and "group_stats" in shown                  # SEE's records of step 1
    assert "Traceback" not in shown
