"""Fingerprints of the code for the caches: a cached zoo or run never outlives the code that made it.

The fingerprint of a set of source files is a sha256 over each file's syntax tree without docstrings (comments never
reach the tree), so an edited comment or docstring keeps what is cached and any change of the code does not. A
user's own probe is fingerprinted too (`user_code_fingerprint`): its whole module when it lives in a file, its
definitions when it was written in a notebook cell.
"""
from __future__ import annotations

import ast
import dataclasses
import dis
import functools
import hashlib
import inspect
import sys
import textwrap
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


def definition_source(obj) -> str:
    """The docstring-free code of one function or class, for objects that have no file to read (a notebook cell).

    A function: its source as Python sees it (IPython keeps every cell's source). A class: its qualified name, its
    dataclass fields (name, type, default) and the source of each function it defines (a class in a cell has no
    file that `inspect.getsource` could read)."""
    if isinstance(obj, type):
        fields = [(f.name, str(f.type), repr(f.default)) for f in dataclasses.fields(obj)] \
            if dataclasses.is_dataclass(obj) else []
        methods = [definition_source(v) for _, v in sorted(vars(obj).items()) if inspect.isfunction(v)]
        return repr((obj.__qualname__, fields, methods))
    return code_without_docs(textwrap.dedent(inspect.getsource(obj)))


def global_names(code) -> list[str]:
    """The global names a code object reads (LOAD_GLOBAL / LOAD_NAME; not attribute names)."""
    return [ins.argval for ins in dis.get_instructions(code) if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME")]


CONSTANT_TYPES = (int, float, str, bytes, bool, type(None), tuple, list, dict, frozenset)
"""global values whose repr a notebook-cell probe's fingerprint holds (a set's repr depends on hashing: left out)"""


def referenced_definitions(fn, module: str) -> tuple[list, list]:
    """([`fn` and every function or class of `module` it reaches through global names, recursively],
    [(name, repr) of every plain constant (CONSTANT_TYPES) those reach]), both in a fixed order: what a probe
    written in a notebook cell runs besides its loss function."""
    found, constants, todo = {}, {}, [fn]
    namespace = vars(sys.modules[module])
    while todo:
        obj = todo.pop()
        if obj.__qualname__ in found:
            continue
        found[obj.__qualname__] = obj
        codes = [obj.__code__] if inspect.isfunction(obj) else \
            [v.__code__ for v in vars(obj).values() if inspect.isfunction(v)]
        while codes:
            code = codes.pop()
            codes += [c for c in code.co_consts if inspect.iscode(c)]
            for name in global_names(code):
                target = namespace.get(name)
                if (inspect.isfunction(target) or isinstance(target, type)) and target.__module__ == module:
                    todo.append(target)
                elif name in namespace and isinstance(target, CONSTANT_TYPES):
                    constants[name] = repr(target)
    return [found[name] for name in sorted(found)], sorted(constants.items())


def user_code_fingerprint(objects: list) -> str:
    """16 hex digits of sha256 over the code of `objects` (functions, classes) defined outside the mrl package: the
    whole docstring-free module of each one that lives in a file, else (a notebook cell, an interactive session) the
    object and every definition and plain constant of its module it reaches by name. Objects of the mrl package give '' (code_fingerprint
    covers them)."""
    digest = hashlib.sha256()
    for obj in objects:
        module = sys.modules[obj.__module__]
        path = getattr(module, "__file__", None)
        if path and Path(path).resolve().is_relative_to(PACKAGE):
            continue
        if path and Path(path).is_file():
            digest.update(obj.__module__.encode() + code_without_docs(Path(path).read_text()).encode())
        else:
            definitions, constants = referenced_definitions(obj, obj.__module__)
            for definition in definitions:
                digest.update(definition_source(definition).encode())
            digest.update(repr(constants).encode())
    return "" if digest.digest() == hashlib.sha256().digest() else digest.hexdigest()[:16]
