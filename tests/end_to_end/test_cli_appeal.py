"""End to end: `fedjax-appeal run` with the appeal protocol's flags."""

from __future__ import annotations

import json

import pytest

from fedjax_appeal.cli.commands import main

TINY = ["--dataset", "synthetic", "--clients", "8", "--unseen-clients", "4", "--cohort", "3",
        "--rounds", "4", "--local-steps", "2", "--batch-size", "8", "--eval-every", "2",
        "--min-samples", "4", "--partition", "natural", "--rho-steps", "3"]


@pytest.mark.slow
def test_cli_maxfl_writes_appeal_keys_in_every_history_entry(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["run", *TINY, "--algorithm", "maxfl", "--opt-out-after", "2",
                 "--label-flip-fraction", "0.25", "--byzantine-fraction", "0.25",
                 "--out", str(out)]) == 0
    err = capsys.readouterr().err
    res = json.loads((out / "results.json").read_text())
    assert [h["round"] for h in res["history"]] == [0, 2, 4]
    for h in res["history"]:
        for k in ("gm_appeal_seen", "gm_appeal_unseen", "preferred_acc_seen",
                  "preferred_acc_unseen"):
            assert 0.0 <= h[k] <= 1.0
    last = res["history"][-1]
    for k in ("gm_appeal_ft_seen", "gm_appeal_ft_unseen", "preferred_acc_ft_seen",
              "preferred_acc_ft_unseen"):
        assert 0.0 <= last[k] <= 1.0 and res["personalized"][k] == last[k]
    assert len(res["final_clients"]["appeal_seen"]) == 8
    assert len(res["personalized"]["appeal_ft_unseen"]) == 4
    assert len(res["round_metrics"]["appealed"]) == 4
    # rounds >= 2 draw only from the appealed clients
    av, ap = res["round_metrics"]["available"], res["round_metrics"]["appealed"]
    assert av[:2] == [8, 8] and av[2:] == ap[2:]
    empty = sum(a == 0 for a in av)  # rounds whose pool was empty are reported
    assert (f"warning: {empty} of 4 rounds had no available client" in err) == (empty > 0)


@pytest.mark.slow
def test_everyone_available_by_default(tmp_path):
    out = tmp_path / "r"
    assert main(["run", *TINY[:-2], "--rounds", "3", "--out", str(out)]) == 0  # FedAvg
    res = json.loads((out / "results.json").read_text())
    assert res["round_metrics"]["available"] == [8, 8, 8]
    assert "appealed" not in res["round_metrics"]


def test_cli_no_appeal_flag(tmp_path):
    out = tmp_path / "r"
    plain = TINY[:-2]  # without --rho-steps: no solo models to train
    assert main(["run", *plain, "--no-appeal", "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert "gm_appeal_seen" not in res["history"][0] and "personalized" not in res


@pytest.mark.slow
@pytest.mark.parametrize("appeal_def", ["test-vs-solo-test", "train-vs-solo-minibatch"])
def test_pool_after_opt_out_equals_appealing_seen_clients(tmp_path, appeal_def):
    out = tmp_path / "r"
    assert main(["run", *TINY, "--rounds", "5", "--eval-every", "1", "--opt-out-after", "2",
                 "--appeal-def", appeal_def, "--finetune-steps", "0", "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["config"]["appeal_def"] == appeal_def
    gm = {h["round"]: h["gm_appeal_seen"] for h in res["history"]}
    av, ap = res["round_metrics"]["available"], res["round_metrics"]["appealed"]
    for r in range(5):  # round r decides on the model evaluated at history round r
        assert ap[r] == round(8 * gm[r])
        assert av[r] == (8 if r < 2 else round(8 * gm[r]))


def test_appeal_def_and_solo_lr_flags(tmp_path, capsys):
    from fedjax_appeal.cli.options import hp_float as _hp_float

    assert _hp_float("same") == 0.0 and _hp_float("0.05") == pytest.approx(0.05)
    out = tmp_path / "bad"
    assert main(["run", *TINY, "--appeal-def", "test-vs-train", "--out", str(out)]) == 2
    assert not out.exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("fedjax-appeal: error:") and "test-vs-solo-test" in err[-1]
