"""End to end: `fedjax-appeal run` on the language tasks (Sent140 tweets, one client per
user): FedAvg writes the tokenizer, the baselines and a model that loads back; MaxFL,
Exp-alpha and DivFL selection run on text; the refusals of a model that does not fit."""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest
from conftest import assert_refused, shared_data_dir

from fedjax_appeal.cli.commands import main

TINY = ["--partition", "natural", "--min-samples", "10", "--clients", "6",
        "--unseen-clients", "2", "--cohort", "2", "--rounds", "2", "--local-steps", "2",
        "--batch-size", "4", "--eval-every", "1", "--seq-len", "12", "--client-lr", "0.5"]
ARMS = {"maxfl": ["--algorithm", "maxfl", "--rho-steps", "2"],
        "exp-alpha": ["--aggregation", "exp-alpha"],
        "divfl": ["--selector", "divfl"]}


@pytest.mark.slow
@pytest.mark.data
@pytest.mark.parametrize("dataset", ["sent140_chars", "sent140_words"])
def test_fedavg_on_text_writes_the_tokenizer_and_a_loadable_model(tmp_path, dataset):
    from fedjax_appeal.data.text import Tokenizer
    from fedjax_appeal.run.export import load_model

    out = tmp_path / "run"
    assert main(["run", "--dataset", dataset, "--data-dir", shared_data_dir(), *TINY,
                 "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    tok = Tokenizer.load(out / "tokenizer.json")
    assert res["data"]["num_classes"] == (tok.size if dataset == "sent140_chars" else 2)
    assert set(res["baselines"]) >= ({"unigram_acc_seen", "unigram_perplexity_seen"}
                                     if dataset == "sent140_chars" else {"majority_acc_seen"})
    assert np.isfinite(res["history"][-1]["test_loss_seen"])
    model, params, state = load_model(out)
    assert model.module.vocab_size == tok.size
    x = jnp.asarray([tok.encode("good day")[:12] + [0] * (12 - len(tok.encode("good day")))],
                    jnp.int32)
    logits, _ = model.apply(params, state, x, train=False)
    want = (1, 12, tok.size) if dataset == "sent140_chars" else (1, 2)
    assert logits.shape == want
    if dataset == "sent140_chars":  # the docs' prediction snippet runs on this run
        import re
        from pathlib import Path

        page = (Path(__file__).resolve().parents[2] / "docs" / "language.md").read_text()
        code = re.search(r"## Predicting with a trained model\n\n.*?```python(?: fragment)?\n"
                         r"(.*?)```", page, re.S).group(1)
        exec(compile(code.replace('"runs/chars', f'"{out}'), "language.md", "exec"), {})


@pytest.mark.slow
@pytest.mark.data
@pytest.mark.parametrize("arm", sorted(ARMS))
def test_the_paper_algorithms_run_on_text(tmp_path, arm):
    out = tmp_path / arm
    assert main(["run", "--dataset", "sent140_chars", "--data-dir", shared_data_dir(), *TINY,
                 *ARMS[arm], "--out", str(out)]) == 0
    last = json.loads((out / "results.json").read_text())["history"][-1]
    assert np.isfinite(last["test_acc_seen"]) and np.isfinite(last["client_dissimilarity"])
    if arm == "maxfl":
        assert 0.0 <= last["gm_appeal_seen"] <= 1.0


@pytest.mark.data
def test_an_image_model_on_tokens_is_refused(tmp_path, capsys):
    out = tmp_path / "r"
    assert_refused(["run", "--dataset", "sent140_words", "--data-dir", shared_data_dir(),
                    *TINY, "--model", "mlp", "--out", str(out)], out, capsys,
                   "--model mlp takes images or features; sent140_words holds token ids")


def test_a_sequence_model_on_images_is_refused(tmp_path, capsys):
    out = tmp_path / "r"
    assert_refused(["run", "--dataset", "synthetic", "--clients", "6", "--unseen-clients",
                    "0", "--cohort", "2", "--partition", "natural", "--min-samples", "4",
                    "--model", "lstm", "--out", str(out)], out, capsys,
                   "--model lstm reads token ids; synthetic holds images or features")
