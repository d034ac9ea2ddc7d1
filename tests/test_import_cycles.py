"""The package has no import cycle, imports inside functions counted (`tools/import_cycles.py`)."""

from __future__ import annotations

import importlib.util
import os
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location(
    "import_cycles", os.path.join(ROOT, "tools", "import_cycles.py"))
tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tool)


def test_the_package_has_no_import_cycle():
    from pathlib import Path

    found = tool.cycles(Path(ROOT) / "fedjax_appeal")
    assert found == [], "\n".join(" -> ".join(path) for _, path in found)


def test_the_tool_finds_a_cycle_through_a_function_level_import(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text(textwrap.dedent("""
        def f():
            from .sub.c import g
            return g
    """))
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "c.py").write_text("from ..a import x\n")
    (pkg / "d.py").write_text("import pkg.a\n")  # d -> a, but nothing back to d
    found = tool.cycles(pkg)
    assert [comp for comp, _ in found] == [["pkg.a", "pkg.b", "pkg.sub.c"]]
    path = found[0][1]
    assert path[0] == path[-1] == "pkg.a" and len(path) == 4


def test_data_fields_are_exactly_what_the_data_layer_reads():
    """`RunConfig` field metadata `data` (used by the sweep's and reproduce's data caches)
    marks exactly the fields that `fedjax_appeal/data` reads as `cfg.<field>`, or through
    `config.data_seed(cfg)` (which reads seed and data_seed)."""
    import ast
    from pathlib import Path

    from fedjax_appeal.core.config import RunConfig, data_fields, field_names

    read = set()
    for path in (Path(ROOT) / "fedjax_appeal" / "data").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id == "cfg"):
                read.add(node.attr)
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == "data_seed"):
                read |= {"seed", "data_seed"}
    assert read <= set(field_names(RunConfig))
    assert set(data_fields()) == read
