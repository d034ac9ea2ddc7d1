"""Privacy accounting of DP-FedAvg with the `dp-accounting` package (extra `privacy`).

Each round is one Poisson-subsampled Gaussian mechanism on the users: sampling rate
q = cohort / N and noise multiplier z (`HParams.dp_noise`; with adaptive clipping the
update sum and the clip count together are accounted as one Gaussian mechanism with
multiplier z, Andrew et al. 2021, Theorem 1). After r rounds the history reports epsilon at
`--dp-delta` from two accountants of the package:

  * `dp_epsilon_rdp`: the Renyi-DP accountant (Mironov 2017; Mironov, Talwar, Zhang 2019),
  * `dp_epsilon_pld`: the privacy-loss-distribution accountant (Koskela et al. 2020;
    Doroshenko et al. 2022), which is tighter.

Fixed-size cohorts (`--dp-sampling fixed`, m of N without replacement) are accounted with
the same Poisson event at q = m / N: the usual approximation, not a proof, since uniform
fixed-size subsampling is analysed under replace-one adjacency with other bounds.

The accountant runs on the host between evaluations (`simulate` calls `account`), never
inside the jitted rounds.
"""

from __future__ import annotations

import functools
import math

from ..core.config import ConfigError, RunConfig

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


@functools.lru_cache(maxsize=256)
def epsilons(q: float, z: float, steps: int, delta: float) -> dict[str, float]:
    """{"dp_epsilon_rdp", "dp_epsilon_pld"} after `steps` rounds (0 before any; inf if z = 0)."""
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


def accountant(cfg: RunConfig):
    """`account(rounds, hp, num_clients) -> {name: epsilon}` of a DP run, or None."""
    if getattr(cfg, "dp", "off") == "off":
        return None

    def account(rounds: int, hp, num_clients: int) -> dict[str, float]:
        return epsilons(cfg.cohort / num_clients, float(hp.dp_noise), int(rounds),
                        float(cfg.dp_delta))

    return account


def summary(cfg: RunConfig, hp, num_clients: int, rounds: int) -> dict:
    """The `privacy` block of results.json: mechanism, parameters, final epsilons."""
    q = cfg.cohort / num_clients
    return {
        "mechanism": f"DP-FedAvg ({cfg.dp} clipping), user-level, add/remove adjacency",
        "sampling": cfg.dp_sampling, "q": q, "expected_cohort": cfg.cohort,
        "noise_multiplier": float(hp.dp_noise), "clip": float(hp.dp_clip),
        "delta": cfg.dp_delta, "rounds": rounds,
        "accounting": ("Poisson-subsampled Gaussian, RDP and PLD accountants of dp-accounting"
                       + ("; fixed-size cohorts accounted as Poisson at q = m/N "
                          "(approximation)" if cfg.dp_sampling == "fixed" else "")),
        **epsilons(q, float(hp.dp_noise), rounds, float(cfg.dp_delta)),
    }


def header(cfg: RunConfig, hp, num_clients: int) -> str:
    """One phrase for the run header: the DP setting and the epsilon the run will reach."""
    e = epsilons(cfg.cohort / num_clients, float(hp.dp_noise), cfg.rounds, float(cfg.dp_delta))
    return (f"DP-FedAvg {cfg.dp} (C={float(hp.dp_clip):g}, z={float(hp.dp_noise):g}, "
            f"{cfg.dp_sampling} q={cfg.cohort / num_clients:.4g}): after {cfg.rounds} rounds "
            f"epsilon {e['dp_epsilon_rdp']:.3g} (RDP) / {e['dp_epsilon_pld']:.3g} (PLD) at "
            f"delta {cfg.dp_delta:g}")
