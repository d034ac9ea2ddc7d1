"""Import cycles of the package, imports inside functions counted.

    python tools/import_cycles.py [package_dir ...]   (default: fedjax_appeal and papers)

Parses every module with `ast` (no import is executed), collects each module's imports of
package modules wherever they occur (module level, functions, methods, branches), and
prints the strongly connected components of that graph with more than one module (and
modules importing themselves), one cycle per line as a path `a -> b -> ... -> a`. Exit
status 1 when there is a cycle, 0 otherwise.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _resolve(name: str, level: int, current: str, is_pkg: bool) -> str:
    if level == 0:
        return name
    base = current.split(".")
    if not is_pkg:
        base = base[:-1]
    base = base[:len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def imports_of(path: Path, current: str, modules: set[str]) -> set[str]:
    """Package modules that `path` imports anywhere in its body."""
    tree = ast.parse(path.read_text(), str(path))
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()

    def add(name: str):
        # the deepest package module that `name` names (a.b.c -> a.b if c is an attribute)
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name:
            out.add(name)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                add(a.name)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module or "", node.level, current, is_pkg)
            for a in node.names:
                full = f"{base}.{a.name}" if base else a.name
                add(full if full in modules else base)
    out.discard(current)
    return out


def graph(root: Path) -> dict[str, set[str]]:
    files = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    modules = set(files)
    return {m: imports_of(p, m, modules) for m, p in files.items()}


def _sccs(g: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in sorted(g):
        if start in index:
            continue
        work = [(start, iter(sorted(g[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(g[nxt]))))
                elif nxt in on:
                    low[v] = min(low[v], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(sorted(comp))
    return out


def _path(g: dict[str, set[str]], comp: list[str]) -> list[str]:
    """A shortest cycle through the first module of a component (breadth-first)."""
    members = set(comp)
    src = comp[0]
    prev = {src: None}
    queue = [src]
    while queue:
        v = queue.pop(0)
        for w in sorted(g[v] & members):
            if w == src:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return [src] + path[::-1][1:] + [src] if len(path) > 1 else [src, v, src]
            if w not in prev:
                prev[w] = v
                queue.append(w)
    return comp


def cycles(root: Path) -> list[tuple[list[str], list[str]]]:
    """[(component, one cycle through it)] for every component with a cycle."""
    g = graph(root)
    return [(c, _path(g, c)) for c in _sccs(g) if len(c) > 1]


def main(argv: list[str]) -> int:
    top = Path(__file__).resolve().parent.parent
    roots = [Path(a) for a in argv] or [top / "fedjax_appeal", top / "papers"]
    found = [c for root in roots for c in cycles(root)]
    for comp, path in found:
        print(f"cycle of {len(comp)} modules: {' -> '.join(path)}")
        print(f"  all: {', '.join(comp)}")
    if not found:
        print(f"no import cycles ({', '.join(r.name for r in roots)})")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
