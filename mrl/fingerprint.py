"""Fingerprints of the code for the caches: a cached zoo or run never outlives the code that made it.

The fingerprint of a set of source files is a sha256 over each file's syntax tree without docstrings (comments never
reach the tree), so an edited comment or docstring keeps what is cached and any change of the code does not. A
user's own probe is fingerprinted too (`user_code_fingerprint`): its whole module and the user's modules it reaches.
A probe written in a notebook cell has no file to fingerprint, so its runs are computed every time and never cached
(mrl.experiments.runs.run_one).
"""
from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import sys
import types
from pathlib import Path

from mrl.paths import PACKAGE


ZOO_MODULES = ("runtime/zoo.py", "runtime/fast.py", "runtime/rollout.py", "core/batch.py", "core/token_logprobs.py",
               "core/stop_tokens.py", "core/tasks.py", "core/seeding.py", "numerics.py")
"""the modules a zoo member's weights depend on: tokenizer training, the corpus, the model, the warm-up loop, the
log-probs it trains on (rollout.py's forward, token_logprobs.py's softmax) and the numerics contract its kernels run
under (config.py's values that matter are in the key itself)"""


def tree_without_docs(text: str) -> ast.Module:
    """The syntax tree of `text` with every docstring removed: a body's first string and the strings that document an
    attribute after its assignment, i.e. every statement that is a bare string and so does nothing (comments never
    reach the tree)."""
    tree = ast.parse(text)
    for node in ast.walk(tree):
        for name in ("body", "orelse", "finalbody"):
            statements = getattr(node, name, None)
            if isinstance(statements, list) and statements and isinstance(statements[0], ast.stmt):
                kept = [s for s in statements if not is_bare_string(s)]
                setattr(node, name, kept or ([ast.Pass()] if name == "body" else []))
    return tree


def code_without_docs(text: str) -> str:
    """ast.dump of tree_without_docs(text): the code a fingerprint hashes."""
    return ast.dump(tree_without_docs(text))


def is_bare_string(statement: ast.stmt) -> bool:
    """A statement that is only a string: a docstring, of a body or of an attribute."""
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant) \
        and isinstance(statement.value.value, str)


def source_fingerprint(sources: list[Path]) -> str:
    """16 hex digits of sha256 over the package-relative path and docstring-free code of each source, in order."""
    digest = hashlib.sha256()
    for source in sources:
        digest.update(str(source.relative_to(PACKAGE)).encode() + code_without_docs(source.read_text()).encode())
    return digest.hexdigest()[:16]


NOT_RUN = ("reports", "reproduce.py")   # mrl/reports/ (tables, figures, the README's blocks); papermill's driver


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """The fingerprint of every source file of the mrl package a run can execute (sorted by path; NOT_RUN, which
    only drives notebooks or reads finished runs into tables and figures, is left out)."""
    return source_fingerprint(sorted(p for p in PACKAGE.rglob("*.py")
                                     if p.relative_to(PACKAGE).parts[0] not in NOT_RUN))


@functools.lru_cache(maxsize=1)
def zoo_fingerprint() -> str:
    """The fingerprint of the code a zoo member's weights depend on (ZOO_MODULES)."""
    return source_fingerprint([PACKAGE / name for name in ZOO_MODULES])


def written_here(value, module: str) -> bool:
    """A function written in `module`'s source, unwrapping staticmethod, classmethod and property; not one that
    `dataclass`, pydantic or mrl generated for it (their code lies in '<string>' or in a library's file)."""
    value = getattr(value, "__func__", None) or getattr(value, "fget", None) or value
    if not (inspect.isfunction(value) and value.__module__ == module):
        return False
    file = value.__code__.co_filename
    return not file.startswith("<") and not in_library(Path(file))


def in_library(path: Path) -> bool:
    """A file of mrl's or of the interpreter's (standard library, site-packages)."""
    path = path.resolve()
    return any(path.is_relative_to(root) for root in (PACKAGE, Path(sys.prefix).resolve(),
                                                      Path(sys.base_prefix).resolve()))


def functions_of(obj) -> list:
    """The functions whose code `obj` runs: itself, or a class's methods written in its body."""
    if inspect.isfunction(obj):
        return [obj]
    values = [getattr(v, "__func__", None) or getattr(v, "fget", None) or v for v in vars(obj).values()]
    return [v for v in values if written_here(v, obj.__module__)]


def user_file(module) -> Path | None:
    """The source file of a module of the user's own: neither mrl nor the interpreter's (standard library,
    site-packages); None otherwise."""
    path = getattr(module, "__file__", None)
    if not path or not path.endswith(".py") or not Path(path).is_file():
        return None
    return None if in_library(Path(path)) else Path(path).resolve()


def reached_modules(namespace: dict) -> list:
    """The modules of the user's own (user_file) that the values of a module's namespace come from or are."""
    found = []
    for value in namespace.values():
        module = value if inspect.ismodule(value) else sys.modules.get(getattr(value, "__module__", None) or "")
        if module is not None and user_file(module) is not None:
            found.append(module)
    return found


def module_files(modules: list) -> list[Path]:
    """The files of `modules` and of every user module they reach, recursively, sorted."""
    files, todo = {}, list(modules)
    while todo:
        module = todo.pop()
        path = user_file(module) or Path(module.__file__).resolve()
        if path in files:
            continue
        files[path] = module.__name__
        todo += reached_modules(vars(module))
    return sorted(files)


def defining_module(obj, namespaces: dict[str, dict]):
    """The module that defines `obj`: its entry in sys.modules, or for a module executed without one
    (importlib.util.spec_from_file_location + exec_module, which registers nothing) a stand-in holding its namespace,
    `namespaces[obj.__module__]` (the globals of a function it defines, whose __file__ is the spec's origin). Neither:
    ValueError naming the module and how to import it."""
    module = sys.modules.get(obj.__module__)
    if module is not None:
        return module
    if obj.__module__ not in namespaces:
        raise ValueError(
            f"{obj.__qualname__}'s module {obj.__module__!r} is not in sys.modules, so its code cannot be "
            f"found for the run's cache key: import it with importlib.import_module (its folder on "
            f"sys.path), or register it before executing it: module = importlib.util.module_from_spec(spec);"
            f" sys.modules[spec.name] = module; spec.loader.exec_module(module)")
    stand_in = types.ModuleType(obj.__module__)
    vars(stand_in).update(namespaces[obj.__module__])
    return stand_in


def user_code_fingerprint(objects: list) -> str:
    """16 hex digits of sha256 over the code of `objects` (functions, classes) defined outside the mrl package ('' when
    all are mrl's: code_fingerprint covers them): the docstring-free files of their modules and of the user's modules
    those reach (not the standard library's or site-packages'), found through sys.modules or, for a module executed
    without an entry there, through its functions' globals (defining_module). An object with no file (written in a
    notebook cell) cannot be fingerprinted: ValueError."""
    modules = []
    namespaces = {fn.__module__: fn.__globals__ for obj in objects for fn in [obj, *functions_of(obj)]
                  if inspect.isfunction(fn)}
    for obj in objects:
        module = defining_module(obj, namespaces)
        path = getattr(module, "__file__", None)
        if not path or not Path(path).is_file():
            raise ValueError(f"{obj.__qualname__} has no source file (a notebook cell or an interactive session), so "
                             f"its code cannot be fingerprinted; define it in a .py module")
        if not Path(path).resolve().is_relative_to(PACKAGE):
            modules.append(module)
    digest = hashlib.sha256()
    for path in module_files(modules):
        digest.update(path.name.encode() + code_without_docs(path.read_text()).encode())
    return "" if not modules else digest.hexdigest()[:16]
