"""Mutation check: do the tests notice a broken rule?

Each entry of `MUTANTS` is a deliberate one-line bug in a core rule of `fedjax_appeal`: the
file, the exact snippet it replaces, the replacement, and the tests that should catch it.
For every mutant the script copies the package and the tests to a temporary directory,
applies that one change there (the working tree is never touched), runs the named tests with
`pytest -x` under a timeout, and reports the mutant as

    caught    the tests failed (what we want)
    SURVIVED  the tests passed: no test notices this bug
    TIMEOUT   the tests did not finish within --timeout seconds
    ERROR     the tests could not run (collection error, ...)

Before the mutants, every distinct test selection runs once on the unmodified copy (the
baseline); a selection that fails there would make its mutants look caught, so the script
stops. Every snippet must occur exactly once in its file, checked before anything runs: when
the code moves, the script fails loudly and the entry has to be updated, so the list stays
current.

Usage (from the repository root; the data-free tests need nothing else):

    python tools/mutants.py                  # all mutants (about 10-20 min on 2 cores)
    python tools/mutants.py --list           # the mutants and their tests
    python tools/mutants.py --only opt-out-boundary --only poc-uniform
    python tools/mutants.py -j 2             # two mutants at a time
    python tools/mutants.py --no-baseline --timeout 300

Exit status: 0 when every mutant was caught, 1 when one survived, timed out or errored,
2 for a usage error, a stale snippet or a failing baseline.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
PKG = "fedjax_appeal"


class Mutant(NamedTuple):
    id: str
    file: str  # relative to the repository root
    old: str  # exact snippet; must occur exactly once in the file
    new: str
    tests: tuple[str, ...]  # pytest arguments: files, node ids, -k expressions
    description: str


A = f"{PKG}/aggregate/aggregation.py"
S = f"{PKG}/select/selectors.py"
SM = f"{PKG}/select/submodular.py"
AP = f"{PKG}/protocols/appeal/appeal.py"
SRV = f"{PKG}/aggregate/server.py"
R_ROUNDS = "tests/test_ref_rounds.py"
R_SEL = "tests/test_ref_selection.py"
R_APP = "tests/test_ref_appeal.py"
R_SWEEP = "tests/test_ref_sweep.py"

MUTANTS: list[Mutant] = [
    # --- rules with a bug that the suite already caught before the reference tests ---
    Mutant("maxfl-q-sigma", f"{PKG}/algorithms/maxfl.py", "return s * (1.0 - s)", "return s",
           ("tests/test_maxfl.py", "-k", "q_by_hand or server_step_by_hand"),
           "MaxFL q_k = sigma instead of sigma (1 - sigma)"),
    Mutant("expalpha-sign", A, "logits = (loss_after - loss_before) / alpha",
           "logits = (loss_before - loss_after) / alpha",
           ("tests/test_aggregation.py", "-k", "exp_alpha"), "Exp-alpha sign flipped in the rule"),
    Mutant("fedavg-uniform", A,
           "return masked_normalize(num_samples.astype(jnp.float32), valid)",
           "return masked_normalize(jnp.ones(valid.shape, jnp.float32), valid)",
           (R_ROUNDS, "-k", "server_optimizer"),
           "FedAvg weights uniform instead of proportional to n_k"),
    Mutant("fl-gain-no-max", SM,
           "return jnp.sum(w[:, None] * jnp.maximum(c[:, None] - d, 0.0), axis=0)",
           "return jnp.sum(w[:, None] * (c[:, None] - d), axis=0)",
           (R_SEL, "-k", "facility"),
           "facility-location gain without max(0, .) (dense oracle; the lazy greedy of the "
           "selectors reads it only at the first step, where it makes no difference)"),
    Mutant("gm-appeal-le", AP, "appeal = loss < requirement", "appeal = loss <= requirement",
           ("tests/test_appeal.py", "-k", "appeal_stats_by_hand or each_appeal_def"),
           "GM-Appeal: < replaced by <="),
    Mutant("qffl-no-q", f"{PKG}/algorithms/qffl.py",
           "h = fq * (q * sq_norm / (lr * lr) / f + 1.0 / lr)",
           "h = fq * (sq_norm / (lr * lr) / f + 1.0 / lr)",
           ("tests/test_qffl.py", "tests/test_simulate.py",
            "tests/end_to_end/test_cli_algorithms.py", "-k", "qffl"),
           "q-FFL h_k without the q factor"),
    Mutant("resume-key-relative", f"{PKG}/run/driver.py",
           "rarr = jnp.arange(r, stop, dtype=jnp.int32)",
           "rarr = jnp.arange(r - self.start, stop - self.start, dtype=jnp.int32)",
           ("tests/test_checkpoint.py", "-k", "interrupt_saves_checkpoint"),
           "resumed run's round keys relative to the start round"),
    # --- the bugs that no test caught before the reference tests ---
    Mutant("expalpha-after-at-received", f"{PKG}/local/client.py",
           "loss_after = client_loss(model, *t.end, data.train, k)[0]",
           "loss_after = client_loss(model, *t.start, data.train, k)[0]",
           (R_ROUNDS, "-k", "exp_alpha"),
           "Exp-alpha's loss after local training measured at the received model"),
    Mutant("solo-test-on-train", f"{PKG}/protocols/appeal/requirement.py",
           "return solo_stats(model, params, mstate, data.train, data.test, solo_key(init_key, 0),",
           "return solo_stats(model, params, mstate, data.train, data.train, "
           "solo_key(init_key, 0),",
           (R_APP, "-k", "solo"), "seen clients' solo test statistics computed on the train split"),
    Mutant("opt-out-boundary", AP, "appealed = loss < requirement",
           "appealed = loss <= requirement", (R_APP, "-k", "opt_out"),
           "opt-out pool: < replaced by <= (a client at its requirement stays)"),
    Mutant("poc-uniform", S,
           "weighted(key, state.pool, d, data.train.count.astype(jnp.float32))",
           "weighted(key, state.pool, d, jnp.ones(state.pool.shape, jnp.float32))",
           (R_SEL, "-k", "power_of_choice"),
           "Power-of-Choice candidates uniform instead of proportional to n_k"),
    Mutant("subtrunc-phi-swap", S,
           'phi_fn = jnp.log1p if opts.subtrunc_phi == "log" else (lambda x: x)',
           'phi_fn = (lambda x: x) if opts.subtrunc_phi == "log" else jnp.log1p',
           (R_SEL, "-k", "subtrunc"), "SubTrunc phi: ln(1+x) and identity swapped"),
    Mutant("metrics-acc-seen-pooled", f"{PKG}/evaluate/metrics.py",
           'out[f"test_acc_{tag}"] = float(np.mean(ev.acc))',
           'out[f"test_acc_{tag}"] = _pooled(np.asarray(ev.acc), np.asarray(ev.count))',
           (R_APP, "-k", "metrics"), "test_acc_seen pooled instead of the mean over clients"),
    Mutant("byzantine-no-noise", f"{PKG}/aggregate/adversary.py",
           "hp.byzantine_noise * jax.random.normal(k, d.shape, d.dtype), 0.0)",
           "0.0 * jax.random.normal(k, d.shape, d.dtype), 0.0)",
           (R_APP, "-k", "byzantine"), "Byzantine Gaussian noise removed"),
    Mutant("sweep-neighbour-history", f"{PKG}/run/sweep.py",
           '"final": hist[i][-1], "history": hist[i],',
           '"final": hist[i][-1], "history": hist[(i + 1) % len(batch)],',
           (R_SWEEP,), "a sweep row given its neighbour's history"),
    Mutant("fl-no-normalisation", SM, "w = w / jnp.maximum(jnp.sum(w), 1.0)", "w = w",
           (R_SEL, "-k", "subtrunc"),
           "facility-location 1/N normalisation dropped (changes SubTrunc's trade-off)"),
    # --- one (or more) per rule with a reference test ---
    Mutant("expalpha-n-drop-n", A,
           "logits = logits + jnp.log(jnp.maximum(num_samples.astype(jnp.float32), 1e-30))",
           "logits = logits + 0.0 * jnp.log(jnp.maximum(num_samples.astype(jnp.float32), "
           "1e-30))",
           (R_ROUNDS, "-k", "exp_alpha"), "exp-alpha-n without its n_i factor"),
    Mutant("expalpha-alpha-times", A, "logits = (loss_after - loss_before) / alpha",
           "logits = (loss_after - loss_before) * alpha", (R_ROUNDS, "-k", "exp_alpha"),
           "Exp-alpha temperature multiplies instead of dividing"),
    Mutant("fedadam-betas-swapped", SRV,
           "optax.adam(hp.server_lr, b1=hp.server_momentum, b2=hp.server_beta2,",
           "optax.adam(hp.server_lr, b1=hp.server_beta2, b2=hp.server_momentum,",
           (R_ROUNDS, "-k", "server_optimizer"), "FedAdam beta1 and beta2 swapped"),
    Mutant("fedyogi-is-adam", SRV, "optax.yogi(hp.server_lr,",
           "optax.adam(hp.server_lr,", (R_ROUNDS, "-k", "server_optimizer"),
           "FedYogi runs Adam's second-moment rule"),
    Mutant("fedavgm-no-nesterov", SRV, "momentum=hp.server_momentum, nesterov=True)",
           "momentum=hp.server_momentum, nesterov=False)",
           (R_ROUNDS, "-k", "server_optimizer"), "Nesterov server momentum runs heavy ball"),
    Mutant("server-opt-state-dropped", f"{PKG}/core/round.py",
           "opt_state=opt_state)", "opt_state=state.opt_state)",
           (R_ROUNDS, "-k", "server_optimizer"),
           "server optimizer state (momentum, Adam moments) not carried between rounds"),
    Mutant("chunk-weights-renormalised", f"{PKG}/execute/cohort.py", "wp = wp.reshape(n, c)",
           "wp = (wp / jnp.sum(wp)).reshape(n, c)", (R_ROUNDS, "-k", "chunked"),
           "chunked aggregation pass renormalises the weights (MaxFL, q-FFL change)"),
    Mutant("chunk-qffl-no-norm", f"{PKG}/algorithms/qffl.py",
           "sq = upd.delta_sq_norm if", "sq = 0.0 * upd.delta_sq_norm if",
           (R_ROUNDS, "-k", "chunked"), "chunked q-FFL reads a zero squared update norm"),
    Mutant("poc-sampler-linear", f"{PKG}/select/selection.py",
           "scores = jnp.log(jnp.maximum(weights, 1e-30)) + g", "scores = weights + g",
           (R_SEL, "-k", "power_of_choice"),
           "Gumbel top-k with w instead of log w (wrong inclusion probabilities)"),
    Mutant("poc-lowest-loss", S, "score = jnp.where(cvalid, losses, -jnp.inf)",
           "score = jnp.where(cvalid, -losses, -jnp.inf)", (R_SEL, "-k", "power_of_choice"),
           "Power-of-Choice keeps the lowest-loss candidates"),
    Mutant("divfl-lazy-gain-no-max", SM,
           "fl = jnp.sum(w[:, None] * jnp.maximum(c[:, None] - oracle.cols(cand), 0.0), axis=0)",
           "fl = jnp.sum(w[:, None] * (c[:, None] - oracle.cols(cand)), axis=0)",
           (R_SEL, "-k", "divfl or subtrunc or unionfl"),
           "lazy greedy re-scores without max(0, .)"),
    Mutant("unionfl-penalty-sign", SM, "g = -pen[cand]", "g = pen[cand]",
           (R_SEL, "-k", "unionfl"), "UnionFL penalty rewards recent clients"),
    Mutant("unionfl-window-ignored", S,
           "penalty = hp.union_mu * in_window.astype(jnp.float32)",
           "penalty = hp.union_mu * 0.0 * in_window.astype(jnp.float32)",
           (R_SEL, "-k", "unionfl"), "UnionFL window not penalised"),
    Mutant("subtrunc-no-truncation", SM,
           "g = g + lam * (jnp.minimum(b, big_phi + phi[cand]) - jnp.minimum(b, big_phi))",
           "g = g + lam * phi[cand]", (R_SEL, "-k", "subtrunc"),
           "SubTrunc term without the truncation min(b, .)"),
    Mutant("opt-in-never-back", AP,
           "return jnp.where(state.round < opt_out_after, True, appealed), appealed",
           "return jnp.where(state.round < opt_out_after, True, appealed & state.pool), "
           "appealed",
           (R_APP, "-k", "opt_out"), "a client that opted out never comes back"),
    Mutant("opt-out-late", AP,
           "return jnp.where(state.round < opt_out_after, True, appealed), appealed",
           "return jnp.where(state.round <= opt_out_after, True, appealed), appealed",
           (R_APP, "-k", "opt_out"), "opt-out starts one round late"),
    Mutant("byzantine-loss-not-inflated", f"{PKG}/aggregate/adversary.py",
           "scale = jnp.where(bad, hp.byzantine_loss_scale, 1.0)",
           "scale = jnp.where(bad, 1.0, 1.0)", (R_APP, "-k", "byzantine"),
           "Byzantine clients report their true loss"),
    Mutant("label-flip-noop", f"{PKG}/data/heterogeneity.py",
           "out[clients[k]] = maps[k][labels[clients[k]]]", "out[clients[k]] = labels[clients[k]]",
           ("tests/test_heterogeneity.py", "tests/test_generated.py", "-k", "flip"),
           "label flipping leaves labels unchanged"),
    Mutant("metrics-train-loss-mean", f"{PKG}/evaluate/metrics.py",
           'out["train_loss"] = _pooled(np.asarray(tr.loss), np.asarray(tr.count))',
           'out["train_loss"] = float(np.mean(tr.loss))', (R_APP, "-k", "metrics"),
           "train_loss a mean over clients instead of sample-weighted"),
    Mutant("sweep-row-slot0", f"{PKG}/run/driver.py",
           "[jax.tree.map(lambda a, i=i: a[i], ev) for i in range(self.runs)]",
           "[jax.tree.map(lambda a, i=i: a[0], ev) for i in range(self.runs)]", (R_SWEEP,),
           "every sweep row evaluated from batch slot 0"),
    Mutant("solo-lr-zero", f"{PKG}/protocols/appeal/requirement.py",
           "jnp.where(jnp.asarray(hp.solo_lr) > 0, hp.solo_lr, hp.client_lr)",
           "jnp.where(jnp.asarray(hp.solo_lr) > 0, hp.client_lr, hp.solo_lr)",
           (R_APP, "-k", "solo"), "solo models trained with lr 0 when --solo-lr is 'same'"),
    Mutant("dp-count-uncentred", f"{PKG}/aggregate/privacy.py",
           "bits = (norms <= clip).astype(jnp.float32) - 0.5",
           "bits = (norms <= clip).astype(jnp.float32)",
           ("tests/test_privacy.py", "-k", "sensitivities or unclipped_share"),
           "adaptive clipping counts uncentred bits (sensitivity 1, not the accounted 1/2)"),
    Mutant("dp-fixed-size-as-poisson", f"{PKG}/aggregate/accounting.py",
           "    if opts.dp_sampling == \"fixed\":\n        return epsilons_fixed(",
           "    if False:\n        return epsilons_fixed(",
           ("tests/test_privacy.py", "-k", "replace_one or equals_uniform"),
           "fixed-size cohorts accounted as Poisson sampling at q = m / N"),
    Mutant("dp-overflow-uncounted", f"{PKG}/aggregate/privacy.py",
           "return {\"dp_overflow\": jnp.maximum(over, 0)}",
           "return {\"dp_overflow\": jnp.maximum(over, 0) * 0}",
           ("tests/test_privacy.py", "-k", "overflow"), "Poisson buffer overflow not counted"),
]


def check_snippets(mutants: list[Mutant]) -> list[str]:
    """Problems with the list: a snippet not found exactly once, a duplicate id, ..."""
    errors, seen = [], set()
    for m in mutants:
        if m.id in seen:
            errors.append(f"{m.id}: duplicate id")
        seen.add(m.id)
        path = ROOT / m.file
        if not path.is_file():
            errors.append(f"{m.id}: no file {m.file}")
            continue
        n = path.read_text().count(m.old)
        if n != 1:
            errors.append(f"{m.id}: snippet found {n} times in {m.file} (must be exactly once; "
                          f"update the entry): {m.old!r}")
        if m.old == m.new:
            errors.append(f"{m.id}: replacement equals the snippet")
    return errors


def make_copy() -> Path:
    """A temporary copy of the package, the tests and pyproject.toml."""
    tmp = Path(tempfile.mkdtemp(prefix="fedjax_appeal_mutant_"))
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".cache")
    shutil.copytree(ROOT / PKG, tmp / PKG, ignore=ignore)
    shutil.copytree(ROOT / "tests", tmp / "tests", ignore=ignore)
    shutil.copy2(ROOT / "pyproject.toml", tmp / "pyproject.toml")
    return tmp


def run_tests(tmp: Path, tests: tuple[str, ...], timeout: float) -> tuple[str, float, str]:
    """(outcome, seconds, last output lines) of `pytest -x` on the copy in `tmp`."""
    env = dict(os.environ, PYTHONPATH=str(tmp), PYTHONDONTWRITEBYTECODE="1")
    env.setdefault("FEDJAX_APPEAL_CACHE", str(ROOT / ".cache"))
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    t = time.perf_counter()
    try:
        p = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", time.perf_counter() - t, ""
    dt = time.perf_counter() - t
    tail = "\n".join((p.stdout + p.stderr).strip().splitlines()[-5:])
    if p.returncode == 0:
        return "passed", dt, tail
    if p.returncode == 1:
        return "failed", dt, tail
    return "error", dt, tail


def run_mutant(m: Mutant, timeout: float) -> tuple[str, float, str]:
    tmp = make_copy()
    try:
        path = tmp / m.file
        path.write_text(path.read_text().replace(m.old, m.new, 1))
        outcome, dt, tail = run_tests(tmp, m.tests, timeout)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    verdict = {"failed": "caught", "passed": "SURVIVED", "timeout": "TIMEOUT",
               "error": "ERROR"}[outcome]
    return verdict, dt, tail


def table(rows: list[tuple[Mutant, str, float]]) -> str:
    out = ["| id | file | result | s | bug | tests |", "|---|---|---|---|---|---|"]
    for m, verdict, dt in rows:
        desc = m.description.replace("|", "\\|")
        out.append(f"| {m.id} | {m.file.removeprefix(PKG + '/')} | {verdict} | {dt:.0f} | "
                   f"{desc} | `{' '.join(m.tests)}` |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", default=[], metavar="ID",
                    help="run only this mutant (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("-j", "--jobs", type=int, default=1, help="mutants run at a time")
    ap.add_argument("--timeout", type=float, default=600.0,
                    help="seconds per test run (default 600)")
    ap.add_argument("--no-baseline", action="store_true",
                    help="skip running the selected tests on the unmodified code first")
    args = ap.parse_args(argv)
    errors = check_snippets(MUTANTS)
    if errors:
        for e in errors:
            print(f"mutants: error: {e}", file=sys.stderr)
        return 2
    mutants = MUTANTS
    if args.only:
        known = {m.id for m in MUTANTS}
        unknown = [i for i in args.only if i not in known]
        if unknown:
            print(f"mutants: error: unknown id(s) {', '.join(unknown)}; see --list",
                  file=sys.stderr)
            return 2
        mutants = [m for m in MUTANTS if m.id in args.only]
    if args.list:
        for m in mutants:
            print(f"{m.id:30s} {m.file:40s} {' '.join(m.tests)}\n    {m.description}")
        return 0
    if args.jobs < 1:
        print("mutants: error: -j must be >= 1", file=sys.stderr)
        return 2
    if not args.no_baseline:
        selections = sorted({m.tests for m in mutants})
        tmp = make_copy()
        try:
            for sel in selections:
                outcome, dt, tail = run_tests(tmp, sel, args.timeout)
                print(f"baseline {' '.join(sel)}: {outcome} ({dt:.0f} s)", flush=True)
                if outcome != "passed":
                    print(f"mutants: error: the tests fail without any mutant:\n{tail}",
                          file=sys.stderr)
                    return 2
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def one(m: Mutant):
        verdict, dt, tail = run_mutant(m, args.timeout)
        print(f"{m.id}: {verdict} ({dt:.0f} s)", flush=True)
        if verdict == "ERROR":
            print(tail, flush=True)
        return m, verdict, dt

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        rows = list(pool.map(one, mutants))
    print()
    print(table(rows))
    bad = [m.id for m, v, _ in rows if v != "caught"]
    print(f"\n{len(rows) - len(bad)}/{len(rows)} caught" + (f"; not caught: {', '.join(bad)}"
                                                            if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
