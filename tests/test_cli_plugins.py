"""Subcommands: the library's are listed in `cli.commands.SUBCOMMANDS`; further ones come
from the entry-point group `fedjax_appeal.commands` (this project's `reproduce` among them).
An entry point that fails to load is one line on stderr and leaves the other commands
working."""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import sys
import types
from pathlib import Path

import pytest

from fedjax_appeal.cli import commands
from fedjax_appeal.cli.commands import ENTRY_POINT_GROUP, Subcommand, main


@pytest.fixture
def entry_points(monkeypatch):
    """Replace the group's entry points by the given {name: value} ones."""
    def install(eps: dict[str, str]):
        found = importlib.metadata.EntryPoints(
            importlib.metadata.EntryPoint(name, value, ENTRY_POINT_GROUP)
            for name, value in eps.items())

        def fake(**kw):
            assert kw == {"group": ENTRY_POINT_GROUP}
            return found

        monkeypatch.setattr(importlib.metadata, "entry_points", fake)
        monkeypatch.setattr(commands, "_COMMANDS", None)

    yield install
    commands._COMMANDS = None


@pytest.fixture
def hello_module(monkeypatch):
    mod = types.ModuleType("fedjax_hello_plugin")

    def configure(p: argparse.ArgumentParser) -> None:
        p.add_argument("who")

    def run(args: argparse.Namespace) -> int:
        print(f"hello {args.who}")
        return 0

    mod.register = lambda: Subcommand(configure, run, "say hello",
                                      listings={"greetings": lambda: ["hello"]})
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    return mod


def test_the_library_lists_its_own_subcommands():
    assert list(commands.SUBCOMMANDS) == ["run", "list", "install-data", "compare", "sweep"]


def test_the_installed_reproduce_entry_point_is_found():
    names = {ep.name: ep.value for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    assert names.get("reproduce") == "papers.cli:register"
    commands._COMMANDS = None
    assert "reproduce" in commands.all_commands()


def test_an_entry_point_adds_a_subcommand_and_a_listing(entry_points, hello_module, capsys):
    entry_points({"hello": "fedjax_hello_plugin:register"})
    assert main(["hello", "world"]) == 0
    assert capsys.readouterr().out == "hello world\n"
    assert main(["list"]) == 0
    assert "greetings:    hello" in capsys.readouterr().out
    assert "reproduce" not in commands.all_commands()  # only the given entry points


def test_an_entry_point_whose_flags_fail_is_left_out(entry_points, hello_module, capsys):
    def bad_configure(p):
        p.add_argument("--x", type=int, default="a", nargs="?", action="store_true")

    hello_module.bad = lambda: Subcommand(bad_configure, lambda a: 0, "bad flags")
    entry_points({"bad": "fedjax_hello_plugin:bad", "hello": "fedjax_hello_plugin:register"})
    assert main(["hello", "x"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fedjax-appeal: warning: command plugin 'bad'")


def test_a_broken_entry_point_is_one_line_and_the_rest_works(entry_points, hello_module,
                                                             capsys):
    entry_points({"broken": "no_such_module_xyz:register", "hello":
                  "fedjax_hello_plugin:register", "run": "fedjax_hello_plugin:register"})
    assert main(["hello", "you"]) == 0
    cap = capsys.readouterr()
    assert cap.out == "hello you\n"
    lines = cap.err.strip().splitlines()
    assert len(lines) == 2, cap.err
    assert lines[0].startswith("fedjax-appeal: warning: command plugin 'broken' "
                               "(no_such_module_xyz:register) is not available: "
                               "ModuleNotFoundError")
    assert "'run'" in lines[1] and "already exists" in lines[1]
    assert "Traceback" not in cap.err
    with pytest.raises(SystemExit) as e:
        main(["broken"])
    assert e.value.code == 2


def test_the_guide_subcommand_runs_through_the_entry_point(entry_points, monkeypatch, capsys):
    """docs/extending.md's subcommand example (its `py` block), loaded as `my_fl.cli`."""
    doc = Path(__file__).resolve().parent.parent / "docs" / "extending.md"
    (code,) = [b for b in re.findall(r"```py\n(.*?)```", doc.read_text(), re.S)
               if b.startswith("# my_fl/cli.py")]
    pkg, mod = types.ModuleType("my_fl"), types.ModuleType("my_fl.cli")
    pkg.__path__ = []
    exec(compile(code, "my_fl/cli.py", "exec"), mod.__dict__)
    monkeypatch.setitem(sys.modules, "my_fl", pkg)
    monkeypatch.setitem(sys.modules, "my_fl.cli", mod)
    entry_points({"hello": "my_fl.cli:register"})
    assert main(["hello", "world"]) == 0
    assert capsys.readouterr().out == "hello world\n"
