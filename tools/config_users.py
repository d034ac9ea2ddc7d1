"""Count the library functions that take the whole run configuration.

Walks fedjax_appeal/**.py and counts the function definitions with a parameter named
`cfg` (total and per top-level folder), and the `getattr(cfg, ...)` lookups (and how many
pass a default, the defensive kind). Run from the
repository root: `python tools/config_users.py`.
"""

from __future__ import annotations

import ast
import collections
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "fedjax_appeal"


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    a = fn.args
    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    names += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
    return names


def count(root: Path = ROOT) -> tuple[int, dict[str, int], int, int]:
    """(functions taking `cfg`, the same per folder, `getattr(cfg, ...)` calls, those of
    them with a default)."""
    per: collections.Counter[str] = collections.Counter()
    lookups = defaulted = 0
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        folder = "/".join(rel.parts[:-1]) or "."
        if rel.parts[0] == "protocols" and len(rel.parts) > 2:
            folder = "/".join(rel.parts[:2])
        else:
            folder = rel.parts[0] if len(rel.parts) > 1 else "."
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                if "cfg" in _params(node):
                    per[folder] += 1
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                  and node.func.id == "getattr" and node.args
                  and isinstance(node.args[0], ast.Name) and node.args[0].id == "cfg"):
                lookups += 1
                defaulted += len(node.args) > 2
    return sum(per.values()), dict(per.most_common()), lookups, defaulted


def main() -> int:
    total, per, lookups, defaulted = count()
    print(f"functions taking cfg: {total}")
    for folder, n in per.items():
        print(f"  {folder}: {n}")
    print(f"getattr(cfg, ...) lookups: {lookups} (with a default: {defaulted})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
