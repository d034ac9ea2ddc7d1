"""The configuration schema: every option is declared once (core/config.py) and the CLI's
grouped help, config files, the sweep's grid, validation and results.json all derive from
that declaration. The tests run over every declared field, so an option added to the
schema is checked in each of those places without a new test."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import pytest

from fedjax_appeal.cli.commands import main, make_parser
from fedjax_appeal.core.config import (
    GROUPS,
    ConfigError,
    HParams,
    Registry,
    RunConfig,
    declarations,
)
from fedjax_appeal.run.schema import load_config_file, range_text
from fedjax_appeal.run.sweep import FORBIDDEN, check_grid
from fedjax_appeal.run.validate import validate

RUN = {f.name: f for f in declarations(RunConfig)}
HP = {f.name: f for f in declarations(HParams)}
ALL = {**RUN, **HP}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _help_sections() -> dict[str, str]:
    """`run --help` split into its argument groups: heading -> text."""
    buf = io.StringIO()
    with redirect_stdout(buf), pytest.raises(SystemExit):
        make_parser().parse_args(["run", "--help"])
    sections, title = {}, None
    for line in buf.getvalue().splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            title = line[:-1]
            sections[title] = ""
        elif title is not None:
            sections[title] += line + "\n"
    return sections


HELP = None


def test_every_field_declares_a_known_group_and_help():
    for name, f in ALL.items():
        assert f.metadata["group"] in GROUPS, name
        assert f.metadata["help"].strip(), name


@pytest.mark.parametrize("name", sorted(ALL))
def test_declared_option_reaches_help_config_file_and_grid(name, tmp_path):
    global HELP
    HELP = HELP or _help_sections()
    f = ALL[name]
    section = HELP[GROUPS[f.metadata["group"]]]
    starts = [ln.split()[0].rstrip(",") for ln in section.splitlines() if ln.startswith("  -")]
    assert _flag(name) in starts, name
    if f.metadata.get("range"):
        assert range_text(f.metadata["range"]).split(",")[0] in " ".join(section.split())
    # a config file takes the key with its default value
    default = f.default
    path = tmp_path / "c.json"
    path.write_text(json.dumps({name: default}))
    assert load_config_file(path) == {name: default}
    # the sweep's grid takes it (unless a sweep shares it across runs by design)
    if name not in FORBIDDEN:
        assert check_grid({name: [default]}) == {name: [default]}


def _outside(f):
    """A value just outside the declared range or choices, or None."""
    rng = f.metadata.get("range") or {}
    integer = f.type in ("int", int)
    step = 1 if integer else 1e-3
    if "ge" in rng:
        return rng["ge"] - step
    if "gt" in rng:
        return rng["gt"] if integer or rng["gt"] != 0 else -0.0
    if "le" in rng:
        return rng["le"] + step
    if "lt" in rng:
        return rng["lt"]
    if isinstance(f.metadata.get("choices"), tuple):
        return "no-such-choice"
    if isinstance(f.metadata.get("choices"), Registry) or f.metadata.get("registry"):
        return "no-such-name"
    return None


CHECKED = sorted(n for n, f in ALL.items() if _outside(f) is not None)


@pytest.mark.parametrize("name", CHECKED)
def test_declared_range_or_choice_is_refused_in_one_line_everywhere(name, tmp_path):
    f = ALL[name]
    bad = _outside(f)
    cfg, hp = RunConfig(), HParams()
    if name in RUN:
        cfg = cfg.replace(**{name: bad})
    else:
        hp = hp.replace(**{name: bad})
    with pytest.raises(ConfigError) as e:
        validate(cfg, hp)
    msg = str(e.value)
    assert "\n" not in msg
    assert _flag(name) in msg or f"'{bad}'" in msg
    # the config file and the grid refuse it with the same words, before anything runs
    # (component names are checked against the registries by `validate`, as above)
    path = tmp_path / "c.json"
    path.write_text(json.dumps({name: bad}))
    if not f.metadata.get("registry"):
        with pytest.raises(ConfigError, match="config file"):
            load_config_file(path)
    if name not in FORBIDDEN:
        with pytest.raises(ConfigError, match=f"grid {name}"):
            check_grid({name: [bad]})


def test_misspelled_names_get_a_suggestion():
    for kw, want in ((dict(algorithm="maxFL"), "did you mean 'maxfl'?"),
                     (dict(dataset="FMNIST"), "did you mean 'fmnist'?"),
                     (dict(dp="fixd"), "did you mean 'fixed'?"),
                     (dict(selector="divf"), "did you mean 'divfl'?")):
        with pytest.raises(ConfigError, match=want):
            validate(RunConfig(**kw), HParams())


@pytest.mark.parametrize("argv, want", [
    (["run", "--algorithm", "maxFL"], "did you mean 'maxfl'?"),
    (["run", "--dataset", "FMNIST"], "did you mean 'fmnist'?"),
    (["run", "--appeal", "ON"], "did you mean 'on'?"),
    (["run", "--log", "Tensorboard"], "did you mean 'tensorboard'?"),
    (["run", "--hp", "clinet_lr=0.1"], "did you mean 'client_lr'?"),
    (["sweep", "--grid", "Client_LR=0.1"], "did you mean client_lr?"),
    (["sweep", "--metric-mode", "MAX"], "did you mean 'max'?"),
    (["compare", "x", "--band", "STD", "--out", "y"], "did you mean 'std'?"),
    (["reproduce", "appeal-tunee"], "did you mean 'appeal-tune'?"),
])
def test_misspelled_names_on_the_command_line_get_a_did_you_mean(argv, want, capsys,
                                                                 tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    try:
        code = main(argv)
    except SystemExit as e:  # refused by the argument parser
        code = e.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fedjax-appeal: error: ") and want in err


def test_config_file_key_gets_a_did_you_mean(tmp_path, capsys):
    (tmp_path / "c.json").write_text('{"clinet_lr": 0.1}')
    assert main(["run", "--config", str(tmp_path / "c.json")]) == 2
    assert "did you mean 'client_lr'?" in capsys.readouterr().err


def test_wrong_type_from_python_is_refused():
    with pytest.raises(ConfigError, match=r"--cohort must be an integer .*got '10'"):
        validate(RunConfig(cohort="10"), HParams())


def test_results_config_block_holds_every_declared_field():
    # results.json's config block is every key, the RunConfig fields and the options the
    # components declare in their own files; checkpoints keep every hyperparameter
    # (results.json lists the ones a configuration uses, test_records.py)
    assert set(RunConfig().as_dict()) == set(RUN)
    assert set(HParams().to_dict()) >= set(HP)
