"""Progress while long work runs (`run/progress.py`): the heartbeat's lines (when, what
they name, the pace and time left of training), that a run with a heartbeat is the run
without one bit for bit, and that a hopeless Dirichlet partition is refused after a few
draws instead of all of them."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from conftest import make_tiny_data

from fedjax_appeal.algorithms import build
from fedjax_appeal.core.config import ConfigError, HParams, RunConfig
from fedjax_appeal.core.models import make_model
from fedjax_appeal.data import partition
from fedjax_appeal.run.progress import Heartbeat, duration, training
from fedjax_appeal.run.simulate import simulate


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def _beat(every=10.0, idle=None):
    lines, clock = [], Clock()
    return Heartbeat(lines.append, every=every, clock=clock, idle=idle), lines, clock


def test_a_line_comes_when_a_phase_has_been_silent_for_every_seconds():
    hb, lines, clock = _beat()
    assert not hb.beat()  # no phase, no idle text: nothing to say
    with hb.phase("loading the data"):
        clock.t += 9.9
        assert not hb.beat()
        clock.t += 0.1
        assert hb.beat() and lines == ["loading the data: 10 s so far"]
        clock.t += 5
        assert not hb.beat()  # 5 s since the last line
        hb.mark()  # a line written by other means (an evaluation's progress line)
        clock.t += 9
        assert not hb.beat()
        clock.t += 1
        with hb.scope("[batch 2/3] "), hb.phase("compiling the evaluation program"):
            assert hb.beat()  # the innermost phase, with the scope's prefix, at once
        assert lines[-1] == "[batch 2/3] compiling the evaluation program: 0 s so far"
        clock.t += 10
        assert hb.beat() and lines[-1] == "loading the data: 35 s so far"
    clock.t += 20
    assert not hb.beat() and hb.lines == 3


def test_between_phases_the_idle_text_is_named():
    hb, lines, clock = _beat(idle="working")
    with hb.phase("compiling"):
        clock.t += 4
    clock.t += 7  # 11 s since the start, 7 s since the phase ended
    assert hb.beat() and lines == ["working: 7 s so far"]


def test_the_training_line_counts_rounds_and_the_time_left_by_hand():
    # rounds 11-20 of 50 at 2 s a round, 5 s in: round 12 done; left: 40 rounds x 2 s
    # - 5 s + 3 evaluations x 1.5 s = 79.5 s
    text = training(10, 20, 50, 2.0, 1.5, 3)(5.0)
    assert text == ("training rounds 11-20 of 50: 5 s so far, about 2 s a round; round "
                    "~12/50, about 80 s left")
    assert training(0, 5, 5, None, 0.0, 1)(12.0) == (
        "training rounds 1-5 of 5: 12 s so far (no pace before the first chunk ends; "
        "--eval-every 1 reports each round)")
    assert training(0, 1, 5, None, 0.0, 5)(12.0) == "training rounds 1-1 of 5: 12 s so far"
    assert training(0, 5, 5, 1.0, 0.0, 0)(99.0).endswith("round ~5/5, about 0 s left")
    assert [duration(s) for s in (9.4, 150, 7200)] == ["9 s", "2.5 min", "2.0 h"]


def test_a_run_with_a_heartbeat_is_the_run_without_one_bit_for_bit():
    """The heartbeat only watches: same history, same per-round metrics, same final state,
    while it writes a line at every poll (every=0) naming each step."""
    data = make_tiny_data(num_clients=6, unseen=2)
    model = make_model("mlp", "tiny", 3, (5,), np.float32, scale=1.0)
    cfg = RunConfig(clients=6, unseen_clients=2, cohort=3, local_steps=2, batch_size=4)
    alg = build("fedavg", model, cfg)
    hp = HParams(client_lr=0.1)
    kw = dict(rounds=6, eval_every=3)
    plain = simulate(alg, data, hp, jax.random.key(4), **kw)
    lines = []
    with Heartbeat(lines.append, every=0.0, poll=0.001) as hb:
        watched = simulate(alg, data, hp, jax.random.key(4), heartbeat=hb, **kw)
    assert watched.history == plain.history
    for k, v in plain.round_metrics.items():
        np.testing.assert_array_equal(watched.round_metrics[k], v)
    for a, b in zip(jax.tree.leaves(plain.final_state.params),
                    jax.tree.leaves(watched.final_state.params), strict=True):
        np.testing.assert_array_equal(a, b)
    assert lines and all(": " in line and "so far" in line for line in lines)
    assert {line.split(":")[0].split(" (")[0] for line in lines} <= {
        "compiling the initial state's program", "compiling the initial model's program",
        "compiling the evaluation program", "compiling the round program",
        "computing the initial state", "building the initial model",
        "evaluating every client", "training rounds 1-3 of 6", "training rounds 4-6 of 6",
        "working"}


class Counted:
    """A generator that counts its Dirichlet draws."""

    def __init__(self, seed):
        self.rng, self.draws = np.random.default_rng(seed), 0

    def permutation(self, x):
        return self.rng.permutation(x)

    def dirichlet(self, a):
        self.draws += 1
        return self.rng.dirichlet(a)


def test_a_hopeless_dirichlet_partition_is_refused_after_the_first_draws():
    labels = np.repeat(np.arange(10), 300)  # 3,000 samples, 10 classes
    rng = Counted(0)
    with pytest.raises(ConfigError, match=r"first 10 draws, so none of 1000 draws would do"):
        partition.dirichlet(labels, 250, 0.5, rng, min_samples=10)
    assert rng.draws == 10 * 10  # one Dirichlet per class and draw
    # by hand: 3 short clients a draw leave 990 x e^-3 = 49 expected successes (go on);
    # 12 leave 990 x e^-12 = 0.006 (refuse); never before the first 10 draws
    assert not partition.hopeless(30, 10, 1000) and partition.hopeless(120, 10, 1000)
    assert not partition.hopeless(10 ** 6, 9, 1000)


def test_a_feasible_dirichlet_partition_draws_what_it_drew_before():
    """The early refusal only ever raises: a partition that succeeds after failed draws
    consumes the generator as the plain redraw loop does, so it is the same partition."""
    labels = np.repeat(np.arange(4), 60)
    rng = np.random.default_rng(3)
    got = partition.dirichlet(labels, 12, 0.3, np.random.default_rng(3), min_samples=8)
    by_class = [np.flatnonzero(labels == c) for c in range(4)]
    tries = 0
    while True:  # the redraw loop, written out
        tries += 1
        parts = [[] for _ in range(12)]
        for idx in by_class:
            idx = rng.permutation(idx)
            p = rng.dirichlet(np.full(12, 0.3))
            for k, piece in enumerate(np.split(idx, (np.cumsum(p)[:-1] * len(idx)).astype(int))):
                parts[k].append(piece)
        want = [np.sort(np.concatenate(p)) for p in parts]
        if min(len(w) for w in want) >= 8:
            break
    assert tries > 1  # the case with failed draws first
    assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))


TINY = ["--dataset", "synthetic", "--clients", "6", "--unseen-clients", "2", "--cohort", "3",
        "--rounds", "4", "--local-steps", "2", "--batch-size", "4", "--eval-every", "2",
        "--min-samples", "4", "--partition", "natural"]


@pytest.mark.slow
def test_run_and_sweep_say_each_step_when_it_lasts(tmp_path, capsys, monkeypatch):
    """The commands' heartbeat names every step that lasts `progress.EVERY` seconds (0
    here, polled every millisecond: every step): compiling each program, per sweep batch."""
    from fedjax_appeal.cli.commands import main
    from fedjax_appeal.run import progress

    monkeypatch.setattr(progress, "EVERY", 0.0)
    monkeypatch.setattr(progress, "POLL", 0.001)
    assert main(["run", *TINY, "--out", str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    for step in ("fedjax-appeal: compiling the round program (2 rounds a chunk): ",
                 "fedjax-appeal: compiling the evaluation program: "):
        assert step in err, err
    assert main(["sweep", *TINY, "--grid", "client_lr=0.1,0.05", "--out",
                 str(tmp_path / "s")]) == 0
    err = capsys.readouterr().err
    assert "fedjax-appeal: [group 1/1 (all) batch 1/1, 2 runs] compiling the round program" \
        in err, err
