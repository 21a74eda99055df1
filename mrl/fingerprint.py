"""Fingerprints of the package's code for the caches: a cached zoo or run never outlives the code that made it.

The fingerprint of a set of source files is a sha256 over each file's syntax tree without docstrings (comments never
reach the tree), so an edited comment or docstring keeps what is cached and any change of the code does not.
"""
from __future__ import annotations

import ast
import functools
import hashlib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent

ZOO_MODULES = ("zoo.py", "fast.py", "rollout.py", "tasks.py", "seeding.py", "numerics.py")
"""the modules a zoo member's weights depend on: tokenizer training, the corpus, the model, the warm-up loop, the
log-probs it trains on and the numerics contract its kernels run under (config.py's values that matter are in the
key itself)"""


def code_without_docs(text: str) -> str:
    """ast.dump of a module with every docstring removed (comments never reach the tree)."""
    tree = ast.parse(text)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


def source_fingerprint(sources: list[Path]) -> str:
    """16 hex digits of sha256 over the package-relative path and docstring-free code of each source, in order."""
    digest = hashlib.sha256()
    for source in sources:
        digest.update(str(source.relative_to(PACKAGE)).encode() + code_without_docs(source.read_text()).encode())
    return digest.hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """The fingerprint of every source file of the mrl package a run can execute (sorted by path; mrl/reports/,
    which only reads finished runs into tables and figures, is left out)."""
    return source_fingerprint(sorted(p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).parts[0] != "reports"))


@functools.lru_cache(maxsize=1)
def zoo_fingerprint() -> str:
    """The fingerprint of the code a zoo member's weights depend on (ZOO_MODULES)."""
    return source_fingerprint([PACKAGE / name for name in ZOO_MODULES])
