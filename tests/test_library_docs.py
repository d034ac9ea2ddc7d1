"""The code blocks of docs/library.md run as they are written, with smaller sizes put in
(fewer rounds, fewer rows), and print what the page shows; the day-one block stays within
15 lines of code and the arrays block within 10."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import XLA_CACHE_ENV

PAGE = Path(__file__).resolve().parent.parent / "docs" / "library.md"


def block(title: str) -> str:
    """The first python block of the section `## title`."""
    text = PAGE.read_text()
    section = text.split(f"\n## {title}\n", 1)[1]
    return re.search(r"```python(?: long| fragment)?\n(.*?)```", section, re.S).group(1)


def shrink(code: str, subs: dict[str, str]) -> str:
    for old, new in subs.items():
        assert old in code, f"docs/library.md no longer says {old!r}"
        code = code.replace(old, new)
    return code


def code_lines(code: str) -> int:
    return sum(1 for line in code.splitlines() if line.strip())


def test_the_first_blocks_are_short():
    assert code_lines(block("Day one: your model, your optimizers")) <= 15
    assert code_lines(block("Your own arrays")) <= 10
    assert "register" not in block("Day one: your model, your optimizers")


def test_the_arrays_block_runs(capsys):
    code = shrink(block("Your own arrays"), {"rounds=50, eval_every=10": "rounds=2, eval_every=1",
                                             "20_000": "6_000", "clients=100": "clients=30"})
    exec(compile(code, str(PAGE), "exec"), {})
    out = capsys.readouterr().out.split()
    assert out[0::2] == ["0", "1", "2"]
    assert all(0.0 <= float(a) <= 1.0 for a in out[1::2])


def test_the_early_stopping_example_stops_after_three_evaluations_without_gain():
    ns: dict = {}
    exec(compile(block("Callbacks and early stopping"), str(PAGE), "exec"), ns)
    accs = [0.1, 0.5, 0.6, 0.55, 0.6, 0.58, 0.7]
    stops = [ns["patience"]({"test_acc_seen": a}) for a in accs]
    assert stops == [False, False, False, False, False, True, False]


@pytest.mark.slow
@pytest.mark.data
def test_the_day_one_and_sweep_blocks_run(tmp_path):
    """Both blocks in one fresh process (as a reader runs them, and so that the many
    programs they compile stay out of the test worker's memory)."""
    small = {"*fa.fashion_mnist()": "*(a[:3000] for a in fa.fashion_mnist())",
             "unseen_clients=100": "unseen_clients=5", "clients=100": "clients=20",
             "local_steps=10": "local_steps=2", "batch_size=32": "batch_size=8",
             "cohort=10": "cohort=4"}
    day_one = shrink(block("Day one: your model, your optimizers"),
                     {**small, "rounds=50, eval_every=10": "rounds=2, eval_every=1"})
    sweep = shrink(block("A sweep over client lr x momentum: one program"),
                   {"local_steps=10": "local_steps=2", "batch_size=32": "batch_size=8",
                    "cohort=10": "cohort=4", "[0.02, 0.05, 0.1]": "[0.02, 0.05]",
                    "rounds=10, eval_every=10": "rounds=2, eval_every=2"})
    (tmp_path / "blocks.py").write_text(day_one + "\nprint('--- sweep')\n" + sweep)
    env = {**os.environ, **XLA_CACHE_ENV, "JAX_PLATFORMS": "cpu"}
    r = subprocess.run([sys.executable, "blocks.py"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    first, second = r.stdout.split("--- sweep\n")
    out = first.splitlines()
    assert [line.split()[0] for line in out[:3]] == ["0", "1", "2"]
    assert re.fullmatch(r"train \d+ s, evaluate \d+ s", out[3])
    out = second.splitlines()
    assert out[:4] == [f"{{'client.learning_rate': {lr}, 'client.momentum': {m}}} "
                       f"{line.rsplit(' ', 1)[1]}" for (lr, m), line in zip(
                           [(0.02, 0.0), (0.02, 0.9), (0.05, 0.0), (0.05, 0.9)], out,
                           strict=False)]
    assert out[4] == "compiled once each: ['init', 'eval', 'chunk of 2 rounds']"
