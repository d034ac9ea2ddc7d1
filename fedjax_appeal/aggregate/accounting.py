"""Privacy accounting of DP-FedAvg with the `dp-accounting` package (extra `privacy`).

Each round is one subsampled Gaussian mechanism on the users with noise multiplier z
(`HParams.dp_noise`; with adaptive clipping the update sum and the centred clip count
together are one Gaussian mechanism with multiplier z, Andrew et al. 2021, Theorem 1, see
`privacy.py`). How the cohort is drawn decides the event and the neighbouring relation:

  * `--dp-sampling poisson` (each client independently with rate q = cohort / N):
    `PoissonSampledDpEvent(q, GaussianDpEvent(z))` under add/remove-one adjacency, accounted
    by the Renyi-DP accountant (Mironov 2017; Mironov, Talwar, Zhang 2019; `dp_epsilon_rdp`)
    and the privacy-loss-distribution accountant (Koskela et al. 2020; Doroshenko et al.
    2022; `dp_epsilon_pld`, tighter).
  * `--dp-sampling fixed` (exactly m = cohort of the N clients, uniformly without
    replacement): `SampledWithoutReplacementDpEvent(N, m, GaussianDpEvent(z / 2))` under
    replace-one adjacency (Wang, Balle, Kasiviswanathan 2019), by the RDP accountant only
    (the package's PLD accountant does not support this event, so `dp_epsilon_pld` is
    absent). Replacing one user moves the clipped sum by up to 2C (and the centred count
    by up to 1), hence the multiplier z / 2 of the unit-sensitivity event.

Poisson cohorts run in a padded buffer (`privacy.poisson_buffer`); the probability that
some round overflows it, p = rounds x P(Bin(N, q) > B), is a failure event outside the
mechanism: the run is (epsilon, delta + (1 + e^epsilon) p)-DP, reported as
`dp_delta_total` (with the larger of the two epsilons, so it holds for both).

The accountant runs on the host between evaluations (`simulate` calls `account`), never
inside the jitted rounds.
"""

from __future__ import annotations

import functools
import math

from ..core.config import ConfigError, Options

# The configuration fields the accounting reads (`RunConfig.view`); the run header also
# reads the number of rounds.
OPTIONS = ("dp", "dp_sampling", "dp_delta", "cohort")
HEADER_OPTIONS = (*OPTIONS, "rounds")

MISSING = ("--dp needs the dp-accounting package: pip install 'fedjax-appeal[privacy]' "
           "(or pip install dp-accounting)")


def require() -> None:
    """Raise a one-line `ConfigError` when `dp_accounting` is not installed."""
    try:
        import dp_accounting  # noqa: F401
    except ImportError:
        raise ConfigError(MISSING) from None


def event(q: float, z: float, steps: int):
    """The DpEvent of `steps` rounds: Poisson(q)-subsampled Gaussian(z), self-composed."""
    import dp_accounting as dpa

    return dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z)), steps)


def event_fixed(n: int, m: int, z: float, steps: int):
    """The DpEvent of `steps` rounds of m-of-n sampling without replacement (replace-one):
    Gaussian(z / 2), the sum's replace-one sensitivity being 2C."""
    import dp_accounting as dpa

    return dpa.SelfComposedDpEvent(
        dpa.SampledWithoutReplacementDpEvent(n, m, dpa.GaussianDpEvent(z / 2.0)), steps)


@functools.lru_cache(maxsize=256)
def epsilons(q: float, z: float, steps: int, delta: float) -> dict[str, float]:
    """Poisson sampling: {"dp_epsilon_rdp", "dp_epsilon_pld"} after `steps` rounds (0 before
    any; inf if z = 0)."""
    if steps <= 0 or q <= 0:
        return {"dp_epsilon_rdp": 0.0, "dp_epsilon_pld": 0.0}
    if z <= 0:
        return {"dp_epsilon_rdp": math.inf, "dp_epsilon_pld": math.inf}
    from dp_accounting import pld, rdp

    ev = event(q, z, steps)
    r = rdp.RdpAccountant()
    r.compose(ev)
    p = pld.PLDAccountant()
    p.compose(ev)
    return {"dp_epsilon_rdp": float(r.get_epsilon(delta)),
            "dp_epsilon_pld": float(p.get_epsilon(delta))}


@functools.lru_cache(maxsize=256)
def epsilons_fixed(n: int, m: int, z: float, steps: int, delta: float) -> dict[str, float]:
    """Fixed-size sampling: {"dp_epsilon_rdp"} after `steps` rounds (replace-one RDP)."""
    if steps <= 0 or m <= 0:
        return {"dp_epsilon_rdp": 0.0}
    if z <= 0:
        return {"dp_epsilon_rdp": math.inf}
    import dp_accounting as dpa
    from dp_accounting import rdp

    r = rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE)
    r.compose(event_fixed(n, m, z, steps))
    return {"dp_epsilon_rdp": float(r.get_epsilon(delta))}


def run_epsilons(opts: Options, z: float, num_clients: int, rounds: int) -> dict[str, float]:
    """The epsilons of `opts`'s sampling after `rounds` rounds at `opts.dp_delta`."""
    if opts.dp_sampling == "fixed":
        return epsilons_fixed(num_clients, min(opts.cohort, num_clients), z, rounds,
                              float(opts.dp_delta))
    return epsilons(opts.cohort / num_clients, z, rounds, float(opts.dp_delta))


def overflow_probability(opts: Options, num_clients: int, rounds: int) -> float:
    """P(some round's Poisson draw overflows its buffer) <= rounds x P(Bin(N, q) > B)."""
    if opts.dp_sampling != "poisson" or rounds <= 0:
        return 0.0
    from .privacy import binomial_tail, poisson_buffer

    b = poisson_buffer(opts.cohort, num_clients)
    return min(1.0, rounds * binomial_tail(num_clients, opts.cohort / num_clients, b))


def overflow_delta(eps: dict[str, float], p: float, delta: float) -> float:
    """delta + (1 + e^epsilon) p with the largest finite epsilon of `eps` (inf if none)."""
    finite = [e for e in eps.values() if math.isfinite(e)]
    if p <= 0:
        return delta
    if not finite:
        return math.inf
    return delta + (1.0 + math.exp(min(max(finite), 700.0))) * p


def accountant(opts: Options):
    """`account(rounds, hp, num_clients) -> {name: epsilon}` of a DP run, or None."""
    if opts.dp == "off":
        return None

    def account(rounds: int, hp, num_clients: int) -> dict[str, float]:
        return run_epsilons(opts, float(hp.dp_noise), num_clients, int(rounds))

    return account


def describe(opts: Options) -> str:
    """How `opts`'s epsilon is accounted, in one phrase (results.json, run header)."""
    if opts.dp_sampling == "fixed":
        return ("fixed-size cohorts (m of N without replacement), replace-one adjacency: "
                "SampledWithoutReplacement(N, m, Gaussian(z/2)), RDP accountant of "
                "dp-accounting (its PLD accountant does not support this event)")
    return ("Poisson cohorts (rate q = m/N), add/remove adjacency: PoissonSampled(q, "
            "Gaussian(z)), RDP and PLD accountants of dp-accounting")


def summary(opts: Options, hp, num_clients: int, rounds: int) -> dict:
    """The `privacy` block of results.json: mechanism, parameters, final epsilons."""
    from .privacy import OVERFLOW_BOUND, poisson_buffer

    q = opts.cohort / num_clients
    eps = run_epsilons(opts, float(hp.dp_noise), num_clients, rounds)
    p = overflow_probability(opts, num_clients, rounds)
    relation = "replace-one" if opts.dp_sampling == "fixed" else "add/remove"
    out = {
        "mechanism": f"DP-FedAvg ({opts.dp} clipping), user-level, {relation} adjacency",
        "sampling": opts.dp_sampling, "q": q, "expected_cohort": opts.cohort,
        "noise_multiplier": float(hp.dp_noise), "clip": float(hp.dp_clip),
        "delta": opts.dp_delta, "rounds": rounds,
        "accounting": describe(opts),
        "dp_epsilon_rdp": eps["dp_epsilon_rdp"],
        "dp_epsilon_pld": eps.get("dp_epsilon_pld"),
    }
    if opts.dp_sampling == "poisson":
        out.update(buffer=poisson_buffer(opts.cohort, num_clients),
                   overflow_bound_per_round=OVERFLOW_BOUND, overflow_probability=p,
                   dp_delta_total=overflow_delta(eps, p, float(opts.dp_delta)))
    else:
        out["dp_delta_total"] = float(opts.dp_delta)
    return out


def header(opts: Options, hp, num_clients: int) -> str:
    """One phrase for the run header: the DP setting and the epsilon the run will reach."""
    e = run_epsilons(opts, float(hp.dp_noise), num_clients, opts.rounds)
    pld = (f" / {e['dp_epsilon_pld']:.3g} (PLD)" if "dp_epsilon_pld" in e
           else " (RDP only: no PLD accountant for fixed-size cohorts)")
    total = overflow_delta(e, overflow_probability(opts, num_clients, opts.rounds),
                           float(opts.dp_delta))
    return (f"DP-FedAvg {opts.dp} (C={float(hp.dp_clip):g}, z={float(hp.dp_noise):g}, "
            f"{opts.dp_sampling} q={opts.cohort / num_clients:.4g}): after {opts.rounds} rounds "
            f"epsilon {e['dp_epsilon_rdp']:.3g} (RDP){pld} at delta {total:.3g}")
