"""CLI: an end-to-end tiny run writes its files; bad input is one line, exit 2, no files,
and is refused before any data is loaded; output folders of other runs are not reused
silently; no NaN/Infinity reaches a JSON file."""

from __future__ import annotations

import importlib
import json
import math

import numpy as np
import pytest
from conftest import assert_refused

import fedjax_appeal.data
from fedjax_appeal.cli.commands import main
from fedjax_appeal.run.report import run_writers, write_outputs

TINY = ["--dataset", "synthetic", "--clients", "8", "--unseen-clients", "4", "--cohort", "3",
        "--rounds", "4", "--local-steps", "2", "--batch-size", "8", "--eval-every", "2",
        "--min-samples", "4", "--partition", "natural"]


@pytest.mark.slow
def test_run_writes_results(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["run", *TINY, "--client-lr", "0.1", "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["config"]["clients"] == 8 and res["hparams"]["client_lr"] == pytest.approx(0.1)
    assert [h["round"] for h in res["history"]] == [0, 2, 4]
    for k in ("train_loss", "test_acc_seen", "test_acc_unseen"):
        assert all(k in h for h in res["history"])
    assert res["timing"]["compile_s"] > 0 and res["timing"]["sec_per_round"] > 0
    assert sum(res["participation"]) == 4 * 3
    csv = (out / "history.csv").read_text().splitlines()
    assert csv[0].startswith("round,train_loss") and len(csv) == 4
    assert (out / "accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    strict_json(out / "results.json")
    err = capsys.readouterr().err
    assert "round    4/4" in err  # progress lines


@pytest.mark.slow
def test_config_file_and_flag_precedence(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('rounds = 2\neval-every = 1\nclient_lr = 0.2\nseed = 4\n')
    out = tmp_path / "r"
    assert main(["run", *TINY, "--config", str(cfg), "--rounds", "3", "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["config"]["rounds"] == 3  # the flag wins over the file
    assert res["config"]["seed"] == 4 and res["hparams"]["client_lr"] == pytest.approx(0.2)
    j = tmp_path / "c.json"
    j.write_text(json.dumps({"rounds": 1, "eval_every": 1}))
    assert main(["run", *TINY, "--config", str(j), "--out", str(out), "--overwrite"]) == 0
    assert json.loads((out / "results.json").read_text())["config"]["rounds"] == 4  # TINY flag


BAD = [
    (["--cohort", "20"], "larger than --clients"),
    (["--dataset", "nope"], "unknown dataset"),
    (["--algorithm", "nope"], "unknown algorithm"),
    (["--partition", "nope"], "unknown partition"),
    (["--client-lr", "-0.1"], "--client-lr must be > 0"),
    (["--dataset", "mnist", "--data-dir", "/nonexistent-dir"], "does not exist"),
    (["--dataset", "fmnist", "--fmnist-dir", "/nonexistent-dir"], "dataset-fashion-mnist"),
    (["--rounds", "abc"], "invalid int value"),
]


@pytest.mark.parametrize("extra,msg", BAD)
def test_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, extra, msg):
    out = tmp_path / "r"
    assert_refused(["run", *TINY, *extra, "--out", str(out)], out, capsys, msg)


@pytest.mark.parametrize("content,suffix,msg", [("x =", ".toml", "not valid"),
                                                ("{bad", ".json", "not valid"),
                                                ("colour = 3", ".toml", "unknown key")])
def test_bad_config_file(tmp_path, capsys, content, suffix, msg):
    cfg = tmp_path / f"c{suffix}"
    cfg.write_text(content)
    assert main(["run", "--config", str(cfg), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and msg in err[0]
    assert not (tmp_path / "r").exists()
    assert main(["run", "--config", str(tmp_path / "missing.toml")]) == 2


def test_list(capsys):
    assert main(["list"]) == 0
    assert "fedavg" in capsys.readouterr().out


def strict_json(path):
    """Parse `path` refusing NaN / Infinity (which the json module accepts by default)."""
    def refuse(token):
        raise AssertionError(f"{path} holds {token}")

    return json.loads(path.read_text(), parse_constant=refuse)


@pytest.fixture
def no_data_load(monkeypatch):
    """Fail the test if anything loads data: bad input must be refused before that."""
    def forbidden(*a, **k):
        raise AssertionError("data were loaded before the bad input was refused")

    # Modules that bind `load_federated` at import are imported first (so none binds the
    # forbidden stand-in for good) and patched too (monkeypatch restores them all).
    mods = [importlib.import_module(f"fedjax_appeal.run.{m}") for m in ("assemble", "sweep")]
    for mod in (fedjax_appeal.data, *mods):
        monkeypatch.setattr(mod, "load_federated", forbidden)


def run_bad(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    assert len(err) == 1 and err[0].startswith("fedjax-appeal: error:"), err
    return err[0]


PRECHECKS = [
    (["--rounds", "0"], "--rounds must be >= 1"),
    (["--rounds", "-3"], "a run trains at least one round"),
    (["--eval-every", "0"], "--eval-every must be >= 1"),
    (["--no-appeal", "--opt-out-after", "3"], "--opt-out-after has no effect here"),
    (["--algorithm", "maxfl", "--aggregation", "uniform"], "--aggregation has no effect here"),
    (["--algorithm", "qffl", "--aggregation", "uniform"], "qffl computes its own"),
    (["--alpha", "0.1"], "--alpha has no effect here"),  # TINY uses --partition natural
    (["--poc-d", "5"], "--selector poc"),
    (["--union-window", "3", "--selector", "divfl"], "--union-window has no effect"),
    (["--no-appeal", "--finetune-steps", "3"], "--finetune-steps has no effect"),
    # options a default FedAvg run once accepted without effect
    (["--cohort-groups", "4,2"], "--cohort-groups has no effect here: it configures "
                                 "--selector stratified"),
    (["--imbalance-nmax", "50"], "it configures the generated imbalanced pool"),
    (["--imbalance-major", "random"], "it configures the generated imbalanced pool"),
    (["--imbalance-test-per-class", "5"], "it configures the generated imbalanced pool"),
    (["--domains", "mnist"], "--domains has no effect here: it configures --dataset digits"),
    (["--domain-samples", "100"], "it configures --dataset digits"),
    (["--no-appeal", "--rho-steps", "20"], "--rho-steps has no effect here: it trains the solo"),
    (["--algorithm", "scaffold", "--local-unroll", "2"],
     "--local-unroll has no effect here: it configures --algorithm afl or fedavg or fednova"),
]


@pytest.mark.parametrize("extra,msg", PRECHECKS)
def test_prechecks_refuse_before_data_loads(tmp_path, capsys, no_data_load, extra, msg):
    out = tmp_path / "r"
    line = run_bad(["run", *TINY, *extra, "--out", str(out)], capsys)
    assert msg in line
    assert list(tmp_path.iterdir()) == []


def test_ignored_option_from_config_file_is_named(tmp_path, capsys, no_data_load):
    cfg = tmp_path / "c.toml"
    cfg.write_text('appeal = false\nopt_out_after = 10\n')
    line = run_bad(["run", *TINY, "--config", str(cfg), "--out", str(tmp_path / "r")], capsys)
    assert "--opt-out-after has no effect" in line and not (tmp_path / "r").exists()


@pytest.mark.parametrize("content,msg", [
    ("rounds = 4.7\n", "key 'rounds' must be an integer"),
    ("rounds = 4.0\n", "key 'rounds' must be an integer"),  # no silent float -> int
    ('rounds = "ten"\n', "key 'rounds' must be an integer"),
    ('client_lr = "fast"\n', "key 'client_lr' must be a number"),
    ("appeal = 1\n", "key 'appeal' must be on, off or auto"),
    ("algorithm = 3\n", "key 'algorithm' must be a string"),
    ("clients = true\n", "key 'clients' must be an integer"),
])
def test_config_value_of_wrong_type_names_the_key(tmp_path, capsys, no_data_load, content,
                                                  msg):
    cfg = tmp_path / "c.toml"
    cfg.write_text(content)
    line = run_bad(["run", "--config", str(cfg), "--out", str(tmp_path / "r")], capsys)
    assert msg in line and not (tmp_path / "r").exists()


def test_json_config_float_for_int_is_refused(tmp_path, capsys, no_data_load):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"local_steps": 2.5}))
    assert "key 'local_steps' must be an integer" in run_bad(
        ["run", "--config", str(cfg), "--out", str(tmp_path / "r")], capsys)


def test_output_location_checked_first(tmp_path, capsys, no_data_load):
    f = tmp_path / "file"
    f.write_text("keep")
    assert "is a file, not a folder" in run_bad(["run", *TINY, "--out", str(f)], capsys)
    assert "cannot be created" in run_bad(["run", *TINY, "--out", str(f / "sub")], capsys)
    assert "cannot be written" in run_bad(["run", *TINY, "--out", "/proc/fedjax/x"], capsys)
    assert "is a file" in run_bad(["sweep", *TINY, "--grid", "client_lr=0.1,0.2", "--out",
                                   str(f)], capsys)
    assert "is a file" in run_bad(["reproduce", "appeal-flexible", "--quick", "--out", str(f)],
                                  capsys)
    assert f.read_text() == "keep" and sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_client_count_checked_against_source_header(tmp_path, capsys, no_data_load):
    # a 60-row MNIST-like source: its size comes from the npz headers, nothing is decoded
    np.savez(tmp_path / "mnist.npz", x_train=np.zeros((40, 28, 28), np.uint8),
             y_train=np.zeros(40, np.int64), x_test=np.zeros((20, 28, 28), np.uint8),
             y_test=np.zeros(20, np.int64))
    base = ["run", "--dataset", "mnist", "--data-dir", str(tmp_path), "--partition",
            "dirichlet", "--cohort", "2", "--out", str(tmp_path / "r")]
    line = run_bad([*base, "--clients", "5000", "--unseen-clients", "0"], capsys)
    assert "need at least 50000 rows" in line and "mnist has 60" in line
    line = run_bad([*base, "--clients", "4", "--unseen-clients", "4", "--min-samples", "10"],
                   capsys)
    assert "need at least 80 rows" in line and "use at most 6 clients" in line
    line = run_bad([*base, "--clients", "4", "--unseen-clients", "0", "--max-samples", "30"],
                   capsys)
    assert "mnist has 30 (--max-samples 30)" in line
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_out_folder_of_another_run_is_refused_unless_overwrite(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["run", *TINY, "--checkpoint-every", "3", "--out", str(out)]) == 0
    first = (out / "results.json").read_text()
    assert (out / "checkpoint.npz").exists()
    capsys.readouterr()
    line = run_bad(["run", *TINY, "--algorithm", "fedprox", "--out", str(out)], capsys)
    assert "already holds another run" in line and "--overwrite" in line
    assert (out / "results.json").read_text() == first  # untouched
    assert "contradict" in run_bad(["run", "--resume", str(out), "--overwrite"], capsys)
    # --overwrite replaces the run and removes its stale checkpoint (no checkpoints now)
    assert main(["run", *TINY, "--algorithm", "fedprox", "--out", str(out),
                 "--overwrite"]) == 0
    res = strict_json(out / "results.json")
    assert res["config"]["algorithm"] == "fedprox"
    assert not (out / "checkpoint.npz").exists()
    # a folder with unrelated files only is fine
    other = tmp_path / "notes"
    other.mkdir()
    (other / "README.txt").write_text("x")
    assert main(["run", *TINY, "--out", str(other)]) == 0


def test_no_nan_or_infinity_in_json(tmp_path):
    results = {"history": [{"round": 0, "train_loss": float("nan"), "test_acc_seen": 0.5}],
               "timing": {"sec_per_round": float("inf"), "x": np.float32("nan")},
               "arr": np.array([1.0, np.nan, -np.inf])}
    write_outputs(tmp_path / "o", run_writers(results, "t"))
    got = strict_json(tmp_path / "o" / "results.json")
    assert got["history"][0]["train_loss"] is None and got["timing"]["sec_per_round"] is None
    assert got["arr"] == [1.0, None, None] and got["timing"]["x"] is None
    assert "nan" not in (tmp_path / "o" / "results.json").read_text().lower()
    assert math.isnan(results["history"][0]["train_loss"])  # the input is not modified


@pytest.mark.parametrize("argv,msg", [
    (["run", "--cohrt", "5"],
     "unrecognized argument --cohrt (did you mean --cohort?); `fedjax-appeal run --help`"),
    (["sweep", "--gird", "client_lr=0.1"], "unrecognized argument --gird (did you mean --grid?)"),
    (["reproduce", "tour", "--seed", "3"],  # no abbreviation: not read as --seeds 3
     "unrecognized argument --seed (did you mean --seeds?)"),
    (["run", "--local-step=3"], "unrecognized argument --local-step (did you mean "
                                "--local-steps?)"),
    (["run", "stray"], "unrecognized arguments: stray"),
])
def test_a_misspelled_flag_gets_the_closest_one(tmp_path, capsys, argv, msg):
    assert_refused([*argv, "--out", str(tmp_path / "r")], tmp_path / "r", capsys, msg)


def test_help_shows_one_true_default_per_option(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--dataset", "mnist", "--help"])  # a dataset of the npz data folder
    text = " ".join(capsys.readouterr().out.split())
    assert "--data-dir DATA_DIR directory with the npz data files (default: $FEDJAX_APPEAL_DATA)" \
        in text
    assert "(default: $FEDJAX_APPEAL_CACHE, else ~/.cache/fedjax_appeal)" in text
    assert "(default: runs/ALGORITHM_DATASET_sSEED; a sweep: runs/sweep_ALGORITHM_DATASET)" \
        in text
    for flag in ("--data-dir", "--cache-dir", "--out"):  # one default each, the true one
        entry = text.split(f"{flag} {flag[2:].upper().replace('-', '_')}", 1)[1].split(" --")[0]
        assert entry.count("default") == 1 and "(default: '')" not in entry, entry


def _help(argv, capsys) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 0
    return capsys.readouterr().out


def test_help_lists_the_options_of_the_combination(capsys):
    default = _help(["run", "--help"], capsys)
    assert "--client-lr" in default and "--rounds" in default
    assert "--maxfl-eps" not in default and "--poc-d" not in default  # another's options
    flat = " ".join(default.split())
    assert "would refuse are not listed;" in flat and "all` lists every option" in flat
    maxfl = _help(["run", "--algorithm", "maxfl", "--help"], capsys)
    assert "--maxfl-eps" in maxfl and "--rho-steps" in maxfl and "--poc-d" not in maxfl
    poc = _help(["sweep", "--selector", "poc", "--help"], capsys)
    assert "--poc-d" in poc and "--grid" in poc
    everything = _help(["run", "--help-all"], capsys)
    assert "--maxfl-eps" in everything and "--poc-d" in everything
    assert everything.count("\n  --") > default.count("\n  --") + 40


def test_an_option_left_out_of_help_is_still_refused_with_its_reason(tmp_path, capsys,
                                                                     no_data_load):
    line = run_bad(["run", *TINY, "--maxfl-eps", "0.1", "--out", str(tmp_path / "r")], capsys)
    assert "--maxfl-eps has no effect here: it configures --algorithm" in line


@pytest.mark.slow
@pytest.mark.parametrize("extra,named", [
    (["--algorithm", "maxfl", "--rho-steps", "2"], ["gm_appeal_seen", "gm_appeal_unseen"]),
    (["--selector", "divfl", "--appeal", "off"], ["client_dissimilarity"]),
    (["--appeal", "off"], []),
])
def test_the_last_line_names_what_the_run_was_for(tmp_path, capsys, extra, named):
    """The line that ends a run names the headline metrics of what it ran: GM-Appeal with
    the appeal protocol, the client dissimilarity with a submodular selector; each the final
    history value, as results.json holds it."""
    out = tmp_path / "r"
    assert main(["run", *TINY, *extra, "--out", str(out)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    final = json.loads((out / "results.json").read_text())["history"][-1]
    assert last.startswith(f"final round 4: test_acc_seen {final['test_acc_seen']:.4f}")
    for k in ("gm_appeal_seen", "gm_appeal_unseen", "client_dissimilarity"):
        if k in named:
            digits = 2 if k == "client_dissimilarity" else 4
            assert f"  {k} {final[k]:.{digits}f}  " in last
        else:
            assert k not in last


def test_a_flag_of_the_wrong_type_names_the_type_and_an_example(capsys):
    for argv, msg in ((["run", "--rounds", "ten"], "argument --rounds: invalid int value: "
                                                   "'ten'; give an integer, e.g. --rounds 200"),
                      (["run", "--client-lr", "abc"], "argument --client-lr: invalid float "
                       "value: 'abc'; give a number, e.g. --client-lr 0.05"),
                      (["sweep", "--max-parallel", "x"], "argument --max-parallel: invalid "
                       "int value: 'x'; give an integer, e.g. --max-parallel")):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and msg in err, err


@pytest.mark.parametrize("files,offers_resume", [(("results.json",), False),
                                                 (("results.json", "checkpoint.npz"), True)])
def test_an_occupied_out_folder_offers_resume_only_with_a_checkpoint(tmp_path, files,
                                                                     offers_resume):
    from fedjax_appeal.core.config import ConfigError
    from fedjax_appeal.run.validate import RUN_FILES, check_out
    for name in files:
        (tmp_path / name).write_text("{}")
    with pytest.raises(ConfigError, match="already holds another run") as e:
        check_out(str(tmp_path), holds=RUN_FILES)
    assert ("--resume" in str(e.value)) is offers_resume
    assert "--overwrite" in str(e.value)


@pytest.mark.parametrize("argv,msg", [
    (["run", "--data-dir", "/nonexistent"], "--data-dir has no effect here: the dataset reads "
     "no file of the npz data folder (fmnist: --fmnist-dir"),
    (["run", "--dataset", "mnist", "--fmnist-dir", "/nonexistent"],
     "--fmnist-dir has no effect here: it applies to --dataset fmnist only"),
])
def test_a_data_folder_the_dataset_does_not_read_is_refused(tmp_path, capsys, argv, msg):
    assert_refused([*argv, "--out", str(tmp_path / "r")], tmp_path / "r", capsys, msg)

