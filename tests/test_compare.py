"""`fedjax-appeal compare`: grouping, seed alignment and bands against numbers by hand; a real
three-seed sweep drawn end to end; bad input is one line, exit 2, nothing written."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fedjax_appeal.cli.commands import main

# Student t, 0.975 quantile, 2 degrees of freedom (printed tables: 4.303).
T975_2 = 4.302652729911275


def write_run(path, algorithm, seed, accs, rounds=(0, 2, 4), lr=0.1):
    path.mkdir(parents=True)
    hist = [{"round": r, "test_acc_seen": a, "train_loss": 1.0 - a}
            for r, a in zip(rounds, accs, strict=True)]
    path.joinpath("results.json").write_text(json.dumps(
        {"config": {"algorithm": algorithm, "seed": seed, "out": str(path), "cohort": 3},
         "hparams": {"client_lr": lr}, "history": hist}))


@pytest.fixture
def runs(tmp_path):
    vals = {"fedavg": [[0.1, 0.2, 0.4], [0.1, 0.3, 0.5], [0.1, 0.4, 0.9]],
            "maxfl": [[0.1, 0.5, 0.6], [0.1, 0.5, 0.7], [0.1, 0.5, 0.8]]}
    for alg, per_seed in vals.items():
        for s, accs in enumerate(per_seed):
            write_run(tmp_path / "runs" / f"{alg}-{s}", alg, s, accs)
    return tmp_path / "runs", vals


@pytest.mark.parametrize("band", ["std", "ci95", "minmax"])
def test_groups_and_bands_match_hand_numbers(runs, tmp_path, band, capsys):
    root, vals = runs
    out = tmp_path / "cmp"
    assert main(["compare", str(root), "--band", band, "--out", str(out),
                 "--formats", "png,svg"]) == 0
    res = json.loads((out / "compare.json").read_text())
    assert res["group_by"] == ["algorithm"]  # seed, out differ too but are not settings
    g = {r["label"]: r for r in res["groups"]}
    assert set(g) == {"algorithm=fedavg", "algorithm=maxfl"}
    fa = g["algorithm=fedavg"]
    assert fa["x"] == [0, 2, 4] and fa["n"] == 3 and sorted(fa["seeds"]) == [0, 1, 2]
    # final values 0.4, 0.5, 0.9: mean 0.6, sample std sqrt(((.2)^2 + (.1)^2 + (.3)^2) / 2)
    sd = math.sqrt((0.04 + 0.01 + 0.09) / 2)
    assert fa["final_mean"] == pytest.approx(0.6) and fa["final_std"] == pytest.approx(sd)
    half = {"std": sd, "ci95": T975_2 * sd / math.sqrt(3)}
    if band == "minmax":
        assert fa["low"][-1] == pytest.approx(0.4) and fa["high"][-1] == pytest.approx(0.9)
    elif band == "std":  # 0.6 ± 0.265 lies inside [0, 1]
        assert fa["high"][-1] - 0.6 == pytest.approx(half[band])
        assert 0.6 - fa["low"][-1] == pytest.approx(half[band])
    else:  # 0.6 ± 0.657 leaves [0, 1] on both sides: an accuracy band is clipped to it
        assert 0.6 + half[band] > 1.0 and 0.6 - half[band] < 0.0
        assert fa["high"][-1] == 1.0 and fa["low"][-1] == 0.0
        # maxfl: 0.6, 0.7, 0.8 (std 0.1): 0.7 ± 4.303·0.1/sqrt(3) = 0.7 ± 0.248, not clipped
        ma = g["algorithm=maxfl"]
        assert ma["high"][-1] - 0.7 == pytest.approx(T975_2 * 0.1 / math.sqrt(3))
        assert 0.7 - ma["low"][-1] == pytest.approx(T975_2 * 0.1 / math.sqrt(3))
    assert fa["low"][0] == pytest.approx(0.1) == fa["high"][0]  # identical seeds: no band
    assert (out / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "compare.svg").read_text().lstrip().startswith(("<?xml", "<svg"))
    assert not (out / "compare.pdf").exists()
    md = (out / "compare.md").read_text()
    assert "| algorithm=maxfl | 3 | 0.7000 ± 0.1000 |" in md
    rows = (out / "compare.csv").read_text().splitlines()
    assert rows[0] == "group,round,mean,low,high" and len(rows) == 1 + 2 * 3


def test_baseline_pairs_every_group_seed_by_seed(runs, tmp_path, capsys):
    root, _ = runs
    out = tmp_path / "cmp"
    assert main(["compare", str(root), "--baseline", "algorithm=fedavg", "--out",
                 str(out)]) == 0
    (p,) = json.loads((out / "compare.json").read_text())["paired"]
    # final maxfl − fedavg per seed: 0.6-0.4, 0.7-0.5, 0.8-0.9 = +0.2, +0.2, -0.1;
    # mean +0.1, sd sqrt((0.01 + 0.01 + 0.04) / 2) = 0.1732, half 4.303 * 0.1732 / sqrt(3)
    rep = p["report"]
    assert p["label"] == "algorithm=maxfl" and p["baseline"] == "algorithm=fedavg"
    assert rep["diffs"] == pytest.approx([0.2, 0.2, -0.1]) and rep["mean"] == pytest.approx(0.1)
    half = T975_2 * math.sqrt(0.03) / math.sqrt(3)
    assert rep["t_interval"] == pytest.approx([0.1 - half, 0.1 + half])
    assert rep["perm_interval"] == [None, None]  # 3 seeds: the whole line (JSON null)
    # 3 seeds: the sign-flip interval needs 6, so no verdict, and "n/a", not infinite bounds
    assert p["verdict"] == "no verdict (needs at least 6 seeds, has 3)"
    assert rep["toward"] == 2
    screen = capsys.readouterr().out
    assert "| algorithm=maxfl − algorithm=fedavg | 3 | mean +0.1000, 95% t [-0.3303, +0.5303]" \
        ", sign-flip n/a (needs at least 6 seeds)" in screen
    assert "no verdict (needs at least 6 seeds, has 3) |" in screen and "inf" not in screen
    assert "Paired with algorithm=fedavg" in (out / "compare.md").read_text()
    # a loss: lower is better, so maxfl (lower train loss at the end) is better in 2 of 3
    assert main(["compare", str(root), "--metric", "train_loss", "--baseline",
                 "algorithm=fedavg", "--out", str(tmp_path / "loss")]) == 0
    (q,) = json.loads((tmp_path / "loss" / "compare.json").read_text())["paired"]
    assert q["report"]["want"] == "-" and q["report"]["toward"] == 2
    assert main(["compare", str(root), "--baseline", "algorithm=fedvg", "--out",
                 str(tmp_path / "bad")]) == 2
    assert "did you mean 'algorithm=fedavg'?" in capsys.readouterr().err


def test_rounds_are_aligned_on_the_common_evaluations(tmp_path):
    write_run(tmp_path / "a", "fedavg", 0, [0.1, 0.3, 0.5], rounds=(0, 2, 4))
    write_run(tmp_path / "b", "fedavg", 1, [0.2, 0.4, 0.6, 0.8], rounds=(0, 1, 2, 4))
    out = tmp_path / "cmp"
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--group-by",
                 "algorithm", "--out", str(out)]) == 0
    (g,) = json.loads((out / "compare.json").read_text())["groups"]
    assert g["x"] == [0, 2, 4]
    assert np.allclose(g["mean"], [0.15, 0.45, 0.65])  # b: round 1 dropped, 0.6 at 2, 0.8 at 4


def test_group_by_a_hyperparameter_and_explicit_keys(runs, tmp_path):
    root, _ = runs
    write_run(root / "lr", "fedavg", 0, [0.1, 0.1, 0.1], lr=0.01)
    out = tmp_path / "cmp"
    assert main(["compare", str(root), "--group-by", "algorithm,client_lr", "--metric",
                 "train_loss", "--out", str(out)]) == 0
    labels = {r["label"]: r for r in json.loads((out / "compare.json").read_text())["groups"]}
    assert labels["algorithm=fedavg, client_lr=0.01"]["n"] == 1
    assert labels["algorithm=fedavg, client_lr=0.1"]["final_mean"] == pytest.approx(0.4)


def test_three_seed_sweep_end_to_end(tmp_path):
    tiny = ["--dataset", "synthetic", "--clients", "6", "--unseen-clients", "0", "--cohort",
            "3", "--rounds", "2", "--local-steps", "2", "--batch-size", "8", "--eval-every",
            "1", "--min-samples", "4", "--partition", "natural", "--no-appeal"]
    sw = tmp_path / "sw"
    assert main(["sweep", *tiny, "--grid", "client_lr=0.1,0.01", "--seeds", "0,1,2",
                 "--out", str(sw)]) == 0
    out = tmp_path / "cmp"
    assert main(["compare", str(sw), "--metric", "train_loss", "--out", str(out)]) == 0
    res = json.loads((out / "compare.json").read_text())
    assert res["group_by"] == ["client_lr"]
    rows = json.loads((sw / "sweep.json").read_text())["rows"]
    for g in res["groups"]:
        lr = float(g["label"].split("=")[1])
        finals = [r["final"]["train_loss"] for r in rows if r["hparams"]["client_lr"] == lr]
        assert g["n"] == 3 and g["final_mean"] == pytest.approx(np.mean(finals))


@pytest.mark.parametrize("extra, msg", [
    (["--metric", "test_ac_seen"], "--metric test_ac_seen: not in these runs' history"),
    (["--group-by", "algo"], "--group-by algo: not a setting of these runs"),
    (["--formats", "png,gif"], "--formats png,gif: choose from"),
])
def test_bad_input_is_one_line_and_writes_nothing(runs, tmp_path, capsys, extra, msg):
    root, _ = runs
    out = tmp_path / "cmp"
    assert main(["compare", str(root), *extra, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1
    assert not out.exists()


def test_paths_without_runs_are_refused(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    for p, msg in ((tmp_path / "empty", "no results.json or sweep.json under"),
                   (tmp_path / "missing", "does not exist")):
        assert main(["compare", str(p), "--out", str(tmp_path / "cmp")]) == 2
        assert msg in capsys.readouterr().err
    assert not (tmp_path / "cmp").exists()


def test_seeds_auto_gives_the_group_sequential_verdict(tmp_path, capsys):
    """Ten seeds of +0.2 ± 0.01 against the baseline: with --seeds auto:20 the first look
    (10 seeds) decides "better"; with 5 seeds the first look is still missing and the
    verdict says how many seeds it needs; --seeds takes only auto."""
    for s in range(10):
        write_run(tmp_path / "r" / f"a-{s}", "fedavg", s, [0.1, 0.2, 0.5])
        write_run(tmp_path / "r" / f"b-{s}", "maxfl", s, [0.1, 0.2, 0.7 + 0.01 * (s % 2)])
    out = tmp_path / "cmp"
    assert main(["compare", str(tmp_path / "r"), "--baseline", "algorithm=fedavg",
                 "--seeds", "auto:20", "--out", str(out)]) == 0
    (p,) = json.loads((out / "compare.json").read_text())["paired"]
    seq = p["sequential"]
    assert p["verdict"] == "better" and seq["seeds_used"] == 10
    assert seq["looks_planned"] == [10, 20] and seq["reason"] == "decided at look 1 of 2"
    assert seq["interval"][0] > 0.19 and seq["interval"][1] < 0.22
    assert "95% repeated [+0.20" in capsys.readouterr().out
    for s in range(5, 10):  # leave 5 seeds of each arm
        for arm in ("a", "b"):
            (tmp_path / "r" / f"{arm}-{s}" / "results.json").unlink()
            (tmp_path / "r" / f"{arm}-{s}").rmdir()
    assert main(["compare", str(tmp_path / "r"), "--baseline", "algorithm=fedavg",
                 "--seeds", "auto:20", "--out", str(tmp_path / "c5")]) == 0
    (p,) = json.loads((tmp_path / "c5" / "compare.json").read_text())["paired"]
    assert p["verdict"] == "undecided" and p["sequential"]["next_seeds"] == 10
    assert "the next look needs 10 seeds (5 available)" in p["sequential"]["reason"]
    capsys.readouterr()
    for argv, msg in ((["--seeds", "0,1"], "takes auto or auto:MAX"),
                      (["--seeds", "auto"], "give --baseline GROUP too"),
                      (["--seed-batch", "5"], "goes with --seeds auto")):
        assert main(["compare", str(tmp_path / "r"), *argv, "--out",
                     str(tmp_path / "bad")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and msg in err[0]
    assert not (tmp_path / "bad").exists()


@pytest.mark.slow
def test_sweep_seeds_auto_adds_batches_and_resumes(tmp_path, capsys):
    """sweep --seeds auto:6 --seed-batch 3: a first batch found finished on disk is read
    back, the second runs; sweep.json then holds every seed once, with the decision that
    the library's group-sequential report gives on those rows (train loss: lower is
    better), and `compare OUT` sees each seed once."""
    from fedjax_appeal.run.sequential import seed_design, sequential_report

    tiny = ["--dataset", "synthetic", "--clients", "6", "--unseen-clients", "0", "--cohort",
            "3", "--rounds", "2", "--local-steps", "2", "--batch-size", "8", "--eval-every",
            "1", "--min-samples", "4", "--partition", "natural", "--no-appeal",
            "--grid", "client_lr=0.3,0.001", "--metric", "train_loss"]
    out = tmp_path / "auto"
    first = out / "seed-batches" / "seeds-0-2"  # as if an earlier start had finished it
    assert main(["sweep", *tiny, "--seeds", "0,1,2", "--out", str(first)]) == 0
    capsys.readouterr()
    assert main(["sweep", *tiny, "--seeds", "auto:6", "--seed-batch", "3", "--baseline",
                 "client_lr=1e-3", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "look 1 of 2" not in err and "look 2 of 2: seeds 3..5" in err
    res = json.loads((out / "sweep.json").read_text())
    rows = res["rows"]
    assert sorted((r["label"], r["seed"]) for r in rows) == sorted(
        (lab, s) for lab in ("client_lr=0.3", "client_lr=0.001") for s in range(6))
    by = {lab: {r["seed"]: r["final"]["train_loss"] for r in rows if r["label"] == lab}
          for lab in ("client_lr=0.3", "client_lr=0.001")}
    rep = sequential_report(by["client_lr=0.3"], by["client_lr=0.001"], "-",
                            seed_design(6, 3))
    got = res["seeds_until_decided"]["comparisons"]["client_lr=0.3"]
    assert got["verdict"] == rep.verdict and got["seeds_used"] == rep.n
    assert got["interval"] == pytest.approx(list(rep.interval))
    assert res["seeds"] == list(range(6)) and not (out / "seed-batches").exists()
    assert (out / "decided.md").read_text().startswith("# Seeds until decided")
    assert main(["compare", str(out), "--metric", "train_loss", "--out",
                 str(tmp_path / "cmp")]) == 0
    groups = json.loads((tmp_path / "cmp" / "compare.json").read_text())["groups"]
    assert sorted(g["n"] for g in groups) == [6, 6]
    # started again: the folder holds a finished sweep
    assert main(["sweep", *tiny, "--seeds", "auto:6", "--seed-batch", "3", "--baseline",
                 "client_lr=0.001", "--out", str(out)]) == 2
    assert "holds a finished sweep" in capsys.readouterr().err
    for argv, msg in ((["--seeds", "auto:6"], "give --baseline"),
                      (["--seeds", "0,1", "--baseline", "client_lr=0.3"], "go with --seeds auto"),
                      (["--seeds", "auto:6", "--baseline", "client_lr=0.2"],
                       "no grid point has client_lr=0.2; its values: 0.3, 0.001"),
                      (["--seeds", "auto:6", "--baseline", "seed=1"], "not a --grid key")):
        assert main(["sweep", *tiny, *argv, "--out", str(tmp_path / "bad")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and msg in err[0]
    assert not (tmp_path / "bad").exists()  # refused before any run


def test_a_verdict_needs_six_seeds_and_a_baseline_matches_numerically(tmp_path, capsys):
    """Groups by a float hyperparameter: `--baseline client_lr=1` is the group
    `client_lr=1.0`. With 6 seeds the sign-flip interval can exclude 0: a verdict; with 5
    (the smallest two-sided p-value 2 / 2^5 = 0.0625 > 0.05) none."""
    from fedjax_appeal.run.paired import min_seeds

    assert min_seeds() == 6 and min_seeds(0.9) == 5  # 2/2^5 <= 0.1
    for s in range(6):  # client_lr 0.5 beats 1.0 by 0.1 + 0.01 s on every seed
        write_run(tmp_path / "r" / f"a{s}", "fedavg", s, [0.1, 0.2, 0.5 + 0.01 * s], lr=1.0)
        write_run(tmp_path / "r" / f"b{s}", "fedavg", s, [0.1, 0.2, 0.6 + 0.02 * s], lr=0.5)
    out = tmp_path / "cmp"
    assert main(["compare", str(tmp_path / "r"), "--baseline", "client_lr=1", "--out",
                 str(out)]) == 0
    (p,) = json.loads((out / "compare.json").read_text())["paired"]
    assert p["baseline"] == "client_lr=1.0" and p["label"] == "client_lr=0.5"
    assert p["verdict"] == "better"
    # every difference +0.1 + 0.01 s > 0: the sign-flip interval is finite and above 0
    lo, hi = p["report"]["perm_interval"]
    assert 0 < lo < 0.125 < hi
    # five seeds: no verdict
    for s in (5,):
        (tmp_path / "r" / f"a{s}" / "results.json").unlink()
    assert main(["compare", str(tmp_path / "r"), "--baseline", "client_lr=1e0", "--out",
                 str(tmp_path / "cmp5")]) == 0
    (p,) = json.loads((tmp_path / "cmp5" / "compare.json").read_text())["paired"]
    assert p["verdict"] == "no verdict (needs at least 6 seeds, has 5)"
    capsys.readouterr()
    # a value of the wrong type, a key that is not the group key: one line with an example
    for bad, msg in (("client_lr=fast", "client_lr is a number in these runs, not 'fast'; "
                                        "e.g. --baseline 'client_lr="),
                     ("lr=1", "name a group by its key client_lr as KEY=VALUE, e.g. "
                              "--baseline 'client_lr="),
                     ("client_lr=2", "--baseline 'client_lr=2' is not a group")):
        assert main(["compare", str(tmp_path / "r"), "--baseline", bad, "--out",
                     str(tmp_path / "bad")]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and msg in err, err
    assert not (tmp_path / "bad").exists()

