"""The library and the paper experiments are separate: `fedjax_appeal` imports nothing of
`papers` (anywhere, functions included), `papers` uses only the library's public API
(`fedjax_appeal`, `fedjax_appeal.extend`, `fedjax_appeal.cli`), every name of that API
resolves, and the papers code reads no environment variable."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PUBLIC = {"fedjax_appeal", "fedjax_appeal.extend", "fedjax_appeal.cli"}


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in `path` (relative ones resolved)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    pkg = parts[:-1] if parts[-1] != "__init__" else parts[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = pkg[:len(pkg) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            out.append((node.lineno, mod))
    return out


def test_the_library_imports_nothing_of_papers():
    files = sorted((ROOT / "fedjax_appeal").rglob("*.py"))
    assert len(files) > 50
    found = [f"{p.relative_to(ROOT)}:{line}: {mod}" for p in files for line, mod in _imports(p)
             if mod == "papers" or mod.startswith("papers.")]
    assert found == [], "\n".join(found)
    texts = [p for p in files if "import_module(\"papers" in p.read_text()]
    assert texts == []


def test_papers_use_only_the_public_api():
    files = sorted((ROOT / "papers").rglob("*.py"))
    assert len(files) > 8
    found = [f"{p.relative_to(ROOT)}:{line}: {mod}" for p in files for line, mod in _imports(p)
             if mod.startswith("fedjax_appeal") and mod not in PUBLIC]
    assert found == [], "private library modules imported:\n" + "\n".join(found)


def test_public_names_resolve():
    import fedjax_appeal
    import fedjax_appeal.extend as ext

    for name in fedjax_appeal.__all__:
        assert getattr(fedjax_appeal, name) is not None, name
    for name in ext.__all__:
        assert getattr(ext, name) is not None, name


def test_papers_read_no_environment_variables():
    for p in sorted((ROOT / "papers").rglob("*.py")):
        text = p.read_text()
        assert "os.environ" not in text and "getenv" not in text, p
