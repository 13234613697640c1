"""Print tenfold's internal import graph, its cycles and private-name reach-ins.

Run from the project root: ``python tools/import_graph.py [--edges] [PREFIX]``. Imports inside functions count
(a deferred import hides a cycle; it does not remove it). A package's ``__init__`` re-exporting its own
children is not counted as a cycle. Exit status 1 when a cycle or a private reach-in exists.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path("src/tenfold")


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under ``root``."""
    out = {}
    for f in sorted(root.rglob("*.py")):
        parts = f.relative_to(root.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def graph(mods: dict[str, Path]) -> tuple[dict[str, set[str]], list[str]]:
    """Edges (importer -> imported module) and the private names one module takes from another."""
    edges: dict[str, set[str]] = {}
    private: list[str] = []
    for name, f in mods.items():
        pkg = name if f.name == "__init__.py" else name.rsplit(".", 1)[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                if not base.startswith("tenfold"):
                    continue
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    target = full if full in mods else base
                    if target in mods and target != name:
                        deps.add(target)
                    if alias.name.startswith("_") and not alias.name.startswith("__") and full not in mods:
                        private.append(f"{name} imports {base}.{alias.name}")
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name in mods and a.name != name}
        edges[name] = {d for d in deps if not d.startswith(name + ".")}
    return edges, private


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def main(argv: list[str]) -> int:
    show_edges = "--edges" in argv
    prefix = next((a for a in argv if not a.startswith("--")), "tenfold")
    mods = modules()
    edges, private = graph(mods)
    if show_edges:
        for name in sorted(edges):
            if name.startswith(prefix):
                print(f"{name} -> {', '.join(sorted(edges[name])) or '-'}")
    found = cycles(edges)
    print(f"{len(mods)} modules, {sum(map(len, edges.values()))} internal imports")
    for comp in found:
        print(f"cycle ({len(comp)} modules): {', '.join(comp)}")
    for line in private:
        print(f"private: {line}")
    if not found and not private:
        print("no cycles, no private reach-ins")
    return 1 if found or private else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
