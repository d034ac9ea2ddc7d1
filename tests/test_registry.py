"""`Registry`: one type for every name list; validation and `list` read the same names."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fedjax_appeal.aggregate.aggregation import AGGREGATIONS
from fedjax_appeal.aggregate.server import SERVER_OPTS
from fedjax_appeal.algorithms import ALGORITHMS
from fedjax_appeal.cli.commands import main
from fedjax_appeal.core.config import ConfigError, HParams, RunConfig
from fedjax_appeal.core.models import MODELS
from fedjax_appeal.core.registry import Registry
from fedjax_appeal.extend import DATASETS, PARTITIONS
from fedjax_appeal.run.validate import validate
from fedjax_appeal.select.selectors import SELECTORS


def test_registry_order_extra_and_error():
    r = Registry("thing", {"b": 1, "a": 2}, extra=("auto",))
    assert list(r) == ["b", "a"] and r.choices() == ("auto", "b", "a")
    assert r.get("a") == 2 and "a" in r and len(r) == 2
    r.check("auto")
    with pytest.raises(ConfigError, match=r"^unknown thing 'c'; choose one of: auto, b, a$"):
        r.get("c")
    s = Registry("x", sort=True)

    @s.register("zz")
    def _z():
        return 0

    s["aa"] = 1
    assert list(s) == ["aa", "zz"]


@pytest.mark.parametrize("field,registry,what", [
    ("algorithm", ALGORITHMS, "algorithm"), ("dataset", DATASETS, "dataset"),
    ("partition", PARTITIONS, "partition"), ("model", MODELS, "model"),
    ("selector", SELECTORS, "selector"), ("aggregation", AGGREGATIONS, "aggregation"),
    ("server_opt", SERVER_OPTS, "server optimizer")])
def test_validate_names_every_choice_of_the_registry(field, registry, what):
    with pytest.raises(ConfigError) as e:
        validate(RunConfig(**{field: "nope"}), HParams())
    assert str(e.value) == (f"unknown {what} 'nope'; choose one of: "
                            + ", ".join(registry.choices()))
    for name in registry.choices():  # every listed name passes this check
        try:
            validate(RunConfig(**{field: name}), HParams())
        except ConfigError as err:
            assert f"unknown {what}" not in str(err)


def test_list_prints_every_registry(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for registry in (ALGORITHMS, DATASETS, PARTITIONS, MODELS, SERVER_OPTS, SELECTORS,
                     AGGREGATIONS):
        assert ", ".join(registry.choices()) in out


def test_a_block_opened_before_the_builtins_are_loaded_keeps_them():
    """`registrations()` undoes what its block registered, never the built-in options that
    a first use inside the block declared (their modules stay imported)."""
    code = ("from fedjax_appeal.core.registry import registrations\n"
            "from fedjax_appeal.core.fields import OPTIONS\n"
            "with registrations():\n"
            "    from fedjax_appeal.cli import main\n"
            "    assert main(['list']) == 0\n"
            "assert 'algorithm' in OPTIONS and 'rounds' in OPTIONS, sorted(OPTIONS)\n"
            "assert main(['list']) == 0\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
