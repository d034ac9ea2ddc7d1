"""Every Python example of README.md and docs/*.md runs as written.

A fenced block whose info string is `python` or `py` is a complete example: it runs, as a
user would paste it into a file, in a fresh Python process in an empty folder, and must
exit with status 0. A block that is part of a larger program (it names a variable the page
defines elsewhere, or a run folder that must exist first) is marked `python fragment` (or
`py fragment`) and is only checked to parse. A complete example too long for the suite (a
50-round run on the full Fashion-MNIST) is marked `python long`: it is checked to parse
here and run with smaller sizes by tests/test_library_docs.py, which must name its section.
Nothing else may follow the language: a typo
in the marker would otherwise turn an example into a skipped one. New pages and new blocks
are picked up without a change here.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import XLA_CACHE_ENV

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PYTHON = ("python", "py")
FENCE = re.compile(r"^([ \t]*)```([^\n`]*)\n(.*?)^\1```[ \t]*$", re.S | re.M)


def blocks(page: Path) -> list[tuple[int, str, str]]:
    """(line, info string, dedented code) of every fenced block of `page`."""
    text = page.read_text()
    out = []
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        out.append((line, m.group(2).strip(), textwrap.dedent(m.group(3))))
    return out


def python_blocks() -> list[tuple[str, int, bool, str]]:
    """(page, line, complete?, code) of every Python block of the pages (a `long` block is
    not complete here: its own test runs it, `test_long_blocks_are_run_elsewhere`)."""
    out = []
    for page in PAGES:
        for line, info, code in blocks(page):
            words = info.split()
            if not words or words[0] not in PYTHON:
                continue
            rel = page.relative_to(ROOT).as_posix()
            assert words[1:] in ([], ["fragment"], ["long"]), (
                f"{rel}:{line}: ```{info}: a Python block is `python` (it runs), "
                "`python fragment` (it is checked to parse) or `python long` (run with "
                "smaller sizes by tests/test_library_docs.py)")
            out.append((rel, line, not words[1:], code))
    return out


def long_blocks() -> list[tuple[str, str]]:
    """(page, section title) of every `python long` block."""
    out = []
    for page in PAGES:
        title = ""
        text = page.read_text()
        for m in FENCE.finditer(text):
            before = text[:m.start()]
            heads = re.findall(r"^## (.+)$", before, re.M)
            title = heads[-1] if heads else ""
            if m.group(2).split()[1:] == ["long"]:
                out.append((page.relative_to(ROOT).as_posix(), title))
    return out


BLOCKS = python_blocks()
COMPLETE = [(p, n, c) for p, n, full, c in BLOCKS if full]
FRAGMENTS = [(p, n, c) for p, n, full, c in BLOCKS if not full]


def test_the_examples_are_found():
    """The harness sees the examples the pages are known to hold (a broken pattern would
    find none and pass)."""
    pages = {p for p, _, _ in COMPLETE}
    assert {"README.md", "docs/library.md", "docs/extending.md"} <= pages
    assert sum(p == "docs/library.md" for p, _, _ in COMPLETE) >= 2
    assert any("my-fedavg" in c for _, _, c in COMPLETE)
    assert {p for p, _, _ in FRAGMENTS} >= {"docs/command-line.md", "docs/papers-selection.md"}


def test_long_blocks_are_run_elsewhere():
    """A `python long` block is run (with smaller sizes) by tests/test_library_docs.py,
    which finds it by its section title."""
    runner = (ROOT / "tests" / "test_library_docs.py").read_text()
    found = long_blocks()
    assert found, "the day-one example of docs/library.md is a long block"
    for page, title in found:
        assert page == "docs/library.md" and f'"{title}"' in runner, (page, title)


def test_a_marker_typo_is_refused(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text("text\n\n```python fragmnet\nx = 1\n```\n")
    monkeypatch.setattr(sys.modules[__name__], "PAGES", [page])
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    with pytest.raises(AssertionError, match="is `python` \\(it runs\\), `python fragment`"):
        python_blocks()


def test_blocks_are_read_whole_and_dedented(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("- item:\n\n  ```python fragment\n  if x:\n      y = 1\n  ```\n\n"
                    "```py\nprint(1)\n```\n\n```bash\nls\n```\n")
    assert blocks(page) == [(3, "python fragment", "if x:\n    y = 1\n"),
                            (8, "py", "print(1)\n"), (12, "bash", "ls\n")]


@pytest.mark.parametrize("page,line,code", FRAGMENTS,
                         ids=[f"{p}:{n}" for p, n, _ in FRAGMENTS])
def test_a_fragment_parses(page, line, code):
    ast.parse(code, filename=f"{page}:{line}")


@pytest.mark.slow
@pytest.mark.data
def test_every_complete_example_runs(tmp_path):
    """Each complete example in a fresh process and an empty folder (one test, so that
    parallel test workers do not run the examples twice). The README's example prints the
    final seen-client accuracy and the seconds per round; the custom algorithm of
    docs/library.md trains and prints its accuracy."""
    env = {**os.environ, **XLA_CACHE_ENV, "JAX_PLATFORMS": "cpu"}
    failed, out = [], {}
    for page, line, code in COMPLETE:
        folder = tmp_path / f"{Path(page).stem}_{line}"
        folder.mkdir()
        (folder / "example.py").write_text(code)
        r = subprocess.run([sys.executable, "example.py"], cwd=folder, env=env,
                           capture_output=True, text=True, timeout=600)
        out[page, line] = r.stdout
        if r.returncode != 0:
            tail = "\n".join(r.stderr.strip().splitlines()[-3:])
            failed.append(f"{page}:{line} exits with {r.returncode}: {tail}")
    assert not failed, "\n".join(failed)
    (readme,) = [o for (p, _), o in out.items() if p == "README.md"]
    acc, spr = readme.split()
    assert 0.5 < float(acc) <= 1.0 and float(spr) > 0  # 10 classes: chance is 0.1
    (mine,) = [out[p, n] for p, n, c in COMPLETE if "my-fedavg" in c]
    assert 0.0 < float(mine.split()[-1]) <= 1.0
