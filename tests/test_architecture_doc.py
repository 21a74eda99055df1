"""docs/architecture.md walks one step with links to the lines of the code (`../mrl/<file>.py#L<n>`): each link's
line defines what its text names, so the walk cannot drift from the code it shows."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\[`([\w.]+)`\]\(\.\./(mrl/[\w/]+\.py)#L(\d+)\)")


def test_every_line_link_of_the_architecture_page_lands_on_its_definition():
    links = LINK.findall((ROOT / "docs" / "architecture.md").read_text())
    assert len(links) >= 20, "the step's walk links its functions"
    wrong = []
    for name, path, line in links:
        text = (ROOT / path).read_text().splitlines()[int(line) - 1]
        if not re.match(rf"\s*(def|class) {re.escape(name.split('.')[-1])}\b", text):
            wrong.append(f"{name} -> {path}#L{line}: {text.strip()!r}")
    assert not wrong, "links that miss their definition:\n" + "\n".join(wrong)
