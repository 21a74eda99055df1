"""The shape of mrl/ from its syntax trees: the import graph and the widest signatures.

    python benchmarks/import_graph.py            # files, longest chain, cycles, imports up, imports in functions
    python benchmarks/import_graph.py --top 10   # and the ten longest parameter lists

Nothing of mrl is imported or run; every number comes from `ast` over mrl/**/*.py. An import counts as an edge
from the importing module to the module it names (`from mrl.x import y` is an edge to mrl.x.y when mrl/x/y.py is a
module, else to mrl.x; a package's __init__ is the package). "Runs up" compares layers, lowest first, and a module's
layer is its folder's: 0 the ground (mrl/paths.py, mrl/numerics.py, mrl/aliases.py), 1 mrl/core/, 2 mrl/runtime/,
3 mrl/experiments/, mrl/integrations/ and profiles, 4 mrl/reports/, the notebooks' helper and the command line.
Parameter counts include self/cls, *args and **kwargs, and keyword-only parameters, as the issue counted them.
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "mrl"

LAYERS = {
    0: {"mrl", "mrl.paths", "mrl.aliases", "mrl.numerics", "mrl.fingerprint"},
    1: {"mrl.core"},
    2: {"mrl.runtime"},
    3: {"mrl.experiments", "mrl.integrations", "mrl.profiles"},
    4: {"mrl.reports", "mrl.notebook", "mrl.cli", "mrl.command", "mrl.reproduce"},
}
"""the layers, lowest first: a module's folder says its layer"""


def layer(module: str) -> int:
    """The layer of a module: its own entry, else its nearest package's."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        name = ".".join(parts[:n])
        for level, names in LAYERS.items():
            if name in names:
                return level
    return 1


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def resolve(name: str, known: dict[str, Path]) -> str | None:
    """The module of mrl an imported dotted name lives in (the longest known prefix)."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in known:
            return ".".join(parts[:n])
    return None


def imports(module: str, path: Path, known: dict[str, Path]):
    """(target, line, inside_function, type_checking_only) for each import of an mrl module in one file."""
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []

    def visit(node, in_function, type_checking):
        for child in ast.iter_child_nodes(node):
            func = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            guarded = type_checking or (isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.startswith("mrl") and (target := resolve(alias.name, known)):
                        found.append((target, child.lineno, in_function, type_checking))
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    up = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join(up + ([base] if base else []))
                if not base.startswith("mrl"):
                    continue
                for alias in child.names:
                    target = resolve(f"{base}.{alias.name}", known) or resolve(base, known)
                    if target and target != module:
                        found.append((target, child.lineno, in_function, type_checking))
            visit(child, func, guarded)

    visit(tree, False, False)
    return found


def graph(known):
    edges = {m: {} for m in known}
    for module, path in known.items():
        for target, line, in_function, type_checking in imports(module, path, known):
            uses = edges[module].setdefault(target, [])
            if (line, in_function, type_checking) not in uses:
                uses.append((line, in_function, type_checking))
    return edges


def longest_chain(edges) -> list[str]:
    """The longest simple path of module-level imports (a DFS; the graph is small)."""
    top = {m: [t for t, uses in ts.items() if any(not f and not tc for _, f, tc in uses)] for m, ts in edges.items()}
    best: list[str] = []
    memo: dict[str, list[str]] = {}

    def walk(node, seen):
        if node in memo and not (set(memo[node]) & seen):
            return memo[node]
        longest = [node]
        for nxt in top[node]:
            if nxt not in seen:
                path = [node] + walk(nxt, seen | {nxt})
                if len(path) > len(longest):
                    longest = path
        if not seen - {node}:
            memo[node] = longest
        return longest

    for start in top:
        path = walk(start, {start})
        if len(path) > len(best):
            best = path
    return best


def cycles(edges, module_level_only: bool) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    use = {m: [t for t, uses in ts.items() if not module_level_only or any(not f and not tc for _, f, tc in uses)]
           for m, ts in edges.items()}
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in use[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in use:
        if v not in index:
            strong(v)
    return out


def parameter_counts(known) -> list[tuple[int, str]]:
    counts = []
    for module, path in known.items():
        tree = ast.parse(path.read_text())

        def visit(node, prefix):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.ClassDef):
                    visit(child, f"{prefix}{child.name}.")
                elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    a = child.args
                    n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)
                    counts.append((n, f"{module}:{prefix}{child.name}"))
                    visit(child, f"{prefix}{child.name}.")
        visit(tree, "")
    return sorted(counts, key=lambda c: (-c[0], c[1]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args(argv)
    known = modules()
    edges = graph(known)
    lines = sum(len(p.read_text().splitlines()) for p in known.values())
    print(f"files: {len(known)}, lines: {lines}")
    chain = longest_chain(edges)
    print(f"longest chain of module-level imports: {len(chain)} files: {' -> '.join(chain)}")
    up = [(m, t, line) for m, ts in edges.items() for t, uses in ts.items() for line, f, tc in uses
          if not tc and layer(t) > layer(m)]
    print(f"imports that run up a layer: {len(up)}")
    for m, t, line in up:
        print(f"  {m}:{line} -> {t}")
    for label, only in (("cycles of module-level imports", True), ("cycles counting imports in functions", False)):
        found = cycles(edges, only)
        print(f"{label}: {len(found)}")
        for component in found:
            print(f"  {len(component)} files: {', '.join(component)}")
    inside = [(m, t, line) for m, ts in edges.items() for t, uses in ts.items() for line, f, tc in uses if f]
    print(f"imports of mrl modules inside functions: {len(inside)}")
    for m, t, line in sorted(inside):
        print(f"  {m}:{line} -> {t}")
    counts = parameter_counts(known)
    print(f"functions with more than 8 parameters: {sum(n > 8 for n, _ in counts)}")
    for n, name in counts[: args.top]:
        print(f"  {n:3d}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
