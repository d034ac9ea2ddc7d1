"""`tools/mutants.py` stays current: every snippet occurs exactly once, every test file exists.

The mutation run itself is slow (minutes) and not part of the suite; this check is instant,
so a change that moves a mutated line fails here and the entry is updated with the change.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _tool():
    spec = importlib.util.spec_from_file_location("mutants_tool", ROOT / "tools" / "mutants.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_snippet_occurs_exactly_once_and_tests_exist():
    t = _tool()
    assert t.check_snippets(t.MUTANTS) == []
    assert len(t.MUTANTS) >= 16
    for m in t.MUTANTS:
        files = [a for a in m.tests if a.startswith("tests/")]
        assert files, m.id
        for f in files:
            assert (ROOT / f.split("::")[0]).is_file(), (m.id, f)


def test_stale_or_duplicate_entries_are_reported():
    t = _tool()
    m = t.MUTANTS[0]
    stale = m._replace(id="stale", old=m.old + "  # not in the file")
    errs = t.check_snippets([m, stale, m])
    assert any("stale: snippet found 0 times" in e for e in errs)
    assert any(f"{m.id}: duplicate id" in e for e in errs)
    assert t.main(["--only", "no-such-mutant"]) == 2
