"""Client requirements rho_k and the solo models they come from (Cho et al., TMLR,
"Maximizing Global Model Appeal in Federated Learning", Sec. 3).

Every client k owns a requirement rho_k: the loss a global model has to beat for k to want
it. By default (`--requirement solo`) rho_k = F_k(w_hat_k), the TRAIN loss of the client's
solo model w_hat_k, trained by `--rho-steps` local SGD steps (client lr and batch size)
from the initial global model, once, before federated training (`solo.solo_stats`). The
requirement may also be given: a constant (`--requirement 0.5`), or a `.npy`/`.txt` file
of M values (seen clients) or M + U values (seen, then unseen clients); unseen clients of
an M-value file keep their solo requirement.

The solo models are trained from a key derived from the run's init key with
`solo_key`, so MaxFL's init and the appeal protocol (`appeal.with_appeal`) compute the
same solo models.
"""

from __future__ import annotations

import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from ...core.arrays import FederatedData
from ...core.capabilities import capable, supports
from ...core.config import ConfigError, HParams, Options, RunConfig
from ...core.fields import OPTIONS, Applies, option
from ...core.memo import shared
from ...core.models import Model
from ...local.solo import SoloStats, solo_stats

SOLO_TAG = 0x5010  # fold_in tag of the solo-model key
# The configuration fields of the solo models (`seen_solo`, `unseen_solo`; `RunConfig.view`).
SOLO_OPTIONS = ("rho_steps", "batch_size")
# The appeal protocol: on with `--appeal on`, or with `auto` for an algorithm that reads
# requirements or when an option of the protocol (one whose `applies` is `PROTOCOL`) is given.
option("appeal", "auto", "the appeal protocol (solo models, GM-Appeal, opt-out): auto = on "
       "for algorithms that read requirements or when one of its options is given",
       ("auto", "on", "off"), group="appeal")


def appeal_on(cfg: RunConfig) -> bool:
    """Whether a run applies the appeal protocol (`--appeal on|off|auto`)."""
    if isinstance(cfg.appeal, bool):  # RunConfig(appeal=True/False) from Python code
        return cfg.appeal
    if cfg.appeal != "auto":
        return cfg.appeal == "on"
    return supports(cfg.algorithm).needs_requirements or any(
        cfg.get(n) != o.default for n, o in OPTIONS.items()
        if ("protocol", "appeal") in o.applies.mentions and not o.tunable)


def appeal_reason(cfg: RunConfig) -> str:
    """One phrase: whether the appeal protocol is on, and why (for the run header)."""
    on = appeal_on(cfg)
    if cfg.appeal in ("on", "off") or isinstance(cfg.appeal, bool):
        return f"appeal protocol {'on' if on else 'off'} (--appeal)"
    if supports(cfg.algorithm).needs_requirements:
        return f"appeal protocol on (auto: {cfg.algorithm} uses requirements)"
    return ("appeal protocol on (auto: an appeal option was given)" if on else
            "appeal protocol off (auto; --appeal on adds GM-Appeal metrics)")


PROTOCOL = Applies(appeal_on, "it belongs to the appeal protocol, which --appeal off turns off",
                   [("protocol", "appeal")])
# the requirement rho_k: of the protocol, and of the algorithms that read requirements
REQUIREMENT = option(
    "requirement", "solo", "client requirement rho_k: 'solo' (train loss of the solo model), "
    "a constant, or a .npy/.txt file of M (or M+U) values",
    applies=PROTOCOL | capable("needs_requirements"), group="appeal")
# the solo models: trained by the protocol, and for a requirement that is their loss
SOLO_MODELS = Applies(
    lambda cfg: appeal_on(cfg) or (supports(cfg.algorithm).needs_requirements
                                   and str(cfg.requirement).strip() == "solo"),
    "it trains the solo models of the appeal protocol, which --appeal off turns off",
    [("capability", "needs_requirements")])
RHO_STEPS = option("rho_steps", 100, "local SGD steps of each client's solo model (MaxFL "
                   "requirement rho_k, preferred-model metrics)", applies=SOLO_MODELS,
                   group="appeal", ge=0)
SOLO_LR = option(
    "solo_lr", 0.0, "learning rate of the solo models that set the requirements rho_k and the "
    "preferred-model metrics ('same' or 0 = the client lr, as MaxFL D.1); fix it when "
    "comparing or tuning algorithms, so that all of them face the same requirements",
    applies=SOLO_MODELS, tunable=True, group="appeal", ge=0, hint="0 = same = the client lr")


def parse_requirement(value: str) -> None | float | np.ndarray:
    """`--requirement`: None for "solo", a float constant, or the values of a file."""
    v = str(value).strip()
    if v == "solo":
        return None
    try:
        c = float(v)
    except ValueError:
        c = None
    if c is not None:
        if not math.isfinite(c):
            raise ConfigError(f"--requirement must be finite (got {v})")
        return c
    p = Path(v)
    if not p.is_file():
        raise ConfigError(f"--requirement must be 'solo', a number, or a .npy/.txt file of "
                          f"per-client values; no file '{v}'")
    try:
        a = np.load(p) if p.suffix == ".npy" else np.loadtxt(p, ndmin=1)
        a = np.asarray(a, np.float64).reshape(-1)
    except (OSError, ValueError) as e:
        raise ConfigError(f"--requirement file {p} is not a .npy or text file of numbers: "
                          f"{e}") from None
    if a.size == 0 or not np.all(np.isfinite(a)):
        raise ConfigError(f"--requirement file {p} must hold finite per-client values")
    return a


def solo_key(init_key: jax.Array, which: int) -> jax.Array:
    """Key of the solo models of the seen (which=0) or unseen (which=1) clients."""
    return jax.random.fold_in(jax.random.fold_in(init_key, SOLO_TAG), which)


def solo_lr(hp: HParams) -> jax.Array:
    """Learning rate of the solo models: `hp.solo_lr`, or the client lr when it is 0."""
    return jnp.where(jnp.asarray(hp.solo_lr) > 0, hp.solo_lr, hp.client_lr)


def seen_solo(model: Model, opts: Options, params, mstate, data: FederatedData,
              init_key: jax.Array, hp: HParams) -> SoloStats:
    """Solo-model statistics of every seen client (`opts.rho_steps` steps from `params`)."""
    return solo_stats(model, params, mstate, data.train, data.test, solo_key(init_key, 0),
                      solo_lr(hp), steps=opts.rho_steps, batch_size=opts.batch_size)


def unseen_solo(model: Model, opts: Options, params, mstate, data: FederatedData,
                init_key: jax.Array, hp: HParams) -> SoloStats:
    """Solo-model statistics of every unseen client."""
    return solo_stats(model, params, mstate, data.unseen_train, data.unseen_test,
                      solo_key(init_key, 1), solo_lr(hp), steps=opts.rho_steps,
                      batch_size=opts.batch_size)


@shared
def solo_models(model: Model, opts: Options, initial, unseen: bool):
    """pre_init(key, data, hp) -> {"initial": (params, model_state), "solo_seen": SoloStats[,
    "solo_unseen": SoloStats]}: the initial model `initial(key)` and the solo models trained
    from it (`FederatedAlgorithm.pre_init`); those of the unseen clients when `unseen` and
    the data has unseen clients. `compose`'s init starts from "initial", and MaxFL's
    requirement and the appeal protocol read the same solo models, so every algorithm under
    the appeal protocol compiles the same pre-init program. (The initial model is computed
    here, beside the solo models that start from it, so that both are the very values one
    init program computes: XLA may round a value differently in another program.)"""
    def pre_init(key, data, hp):
        params, mstate = initial(key)
        out = {"initial": (params, mstate),
               "solo_seen": seen_solo(model, opts, params, mstate, data, key, hp)}
        if unseen and data.num_unseen:
            out["solo_unseen"] = unseen_solo(model, opts, params, mstate, data, key, hp)
        return out

    return pre_init


def requirement_values(req: None | float | np.ndarray, solo_train_loss: jax.Array | None,
                       num_seen: int, num_unseen: int, unseen: bool = False) -> jax.Array:
    """rho_k of the seen clients ([M]) or, with `unseen`, of the unseen clients ([U]).

    `solo_train_loss` (the solo models' train losses) is used where nothing is given.
    Raises `ConfigError` when a file holds neither M nor M + U values.
    """
    n = num_unseen if unseen else num_seen
    if req is None:
        return solo_train_loss
    if isinstance(req, float):
        return jnp.full((n,), req, jnp.float32)
    if req.size not in (num_seen, num_seen + num_unseen):
        raise ConfigError(f"--requirement file has {req.size} values: give one per seen client "
                          f"({num_seen}) or per seen and unseen client ({num_seen + num_unseen})")
    if not unseen:
        return jnp.asarray(req[:num_seen], jnp.float32)
    if req.size == num_seen:
        return solo_train_loss
    return jnp.asarray(req[num_seen:], jnp.float32)
