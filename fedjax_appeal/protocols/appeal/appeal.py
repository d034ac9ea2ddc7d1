"""The appeal protocol of MaxFL (Cho et al., TMLR, "Maximizing Global Model Appeal in
Federated Learning"), as a wrapper around ANY `FederatedAlgorithm`.

`with_appeal(alg, model, opts)` returns an algorithm with the same round and evaluation plus:

* init: every client (seen and unseen) trains a solo model w_hat_k once, `--rho-steps`
  local SGD steps from the initial global model (`--solo-lr`, default the client lr, and
  the client batch size; TMLR App. D.1); its loss and accuracy on the client's train and
  test split and the mean of its training minibatch losses are kept in
  `state.protocol` (`AppealState`), with the requirements rho_k of `--requirement`.
* ONE appeal definition, `--appeal-def` (`APPEAL_DEFS`): client k finds the global model w
  appealing iff L_k(w) < r_k (strict), with

    ===========================  =====================  ==================================
    `--appeal-def`               L_k(w)                 r_k
    ===========================  =====================  ==================================
    test-vs-solo-test (default)  f_k(w), test split     f_k(w_hat_k), solo test loss
    test-vs-solo-train           f_k(w), test split     F_k(w_hat_k) (TMLR Definition 1
                                                        with rho_k = F_k(w_hat_k))
    train-vs-solo-train          F_k(w), train split    F_k(w_hat_k), solo train loss
    train-vs-solo-minibatch      F_k(w), train split    mean minibatch loss of the solo run
    ===========================  =====================  ==================================

  A given `--requirement` (constant or file) replaces r_k under every definition. The same
  definition decides GM-Appeal, preferred-model accuracy, the `appealed` round metric and
  opt-out/opt-in; MaxFL's own objective keeps rho_k = `--requirement` (Algorithm 1).
* metrics at every evaluation (added to `evaluate(...)["metrics"]`), for S in {seen,
  unseen}: `gm_appeal_S` = (1/|S|) sum_k appeal_k (GM-Appeal, in [0, 1]);
  `preferred_acc_S` = (1/|S|) sum_k (appeal_k ? A_k^test : A_hat_k^test), the test accuracy
  of the model each client prefers (global if it appeals, else solo); `solo_acc_S`,
  `train_loss_S_mean` / `test_loss_S_mean` (the paper's f_k ~ F_k check); per client
  `appeal_S`, `solo_test_acc_S`, `solo_test_loss_S`, `solo_train_loss_S`,
  `solo_minibatch_loss_S`, `requirement_S`, `global_loss_S` (L_k), so that every definition
  can be evaluated afterwards on the final model.
* flexible participation (`--opt-out-after R0` > 0): in rounds r < R0 every seen client is
  available; from round R0 on, `state.pool` = {k : appeal_k at the current global model},
  recomputed at the start of every round inside the jitted round (one evaluation pass over
  the seen clients' split of the definition), so a client that left comes back once the
  model appeals to it again. Round metrics `appealed` (count) and `available` (pool size).
* personalization (`personalize`): after training every client runs `--finetune-steps` local
  SGD steps from the final global model; GM-Appeal and preferred-model accuracy of the
  fine-tuned models under the same definition (`gm_appeal_ft_S`, `preferred_acc_ft_S`,
  `test_acc_ft_S`).
* `per_cluster`: per-cluster means of these per-client numbers (host side, diagnostics).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ...algorithms.base import FederatedAlgorithm
from ...core.arrays import FederatedData
from ...core.config import HParams, Options, fields_in
from ...core.fields import option
from ...core.memo import shared
from ...core.models import Model
from ...core.round import ServerState
from ...evaluate.evaluation import evaluate_split
from ...local.solo import SoloStats, solo_stats
from .requirement import (
    PROTOCOL,
    parse_requirement,
    requirement_values,
    seen_solo,
    solo_models,
    unseen_solo,
)

FT_TAG = 0xF17E  # fold_in tag of the fine-tuning key


def appeal_stats(loss: jax.Array, acc: jax.Array, requirement: jax.Array, solo_acc: jax.Array
                 ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(appeal_k [n] bool, GM-Appeal [], preferred-model accuracy []).

    appeal_k = loss_k < requirement_k; preferred accuracy = mean_k of acc_k where the
    global model appeals and solo_acc_k where it does not.
    """
    appeal = loss < requirement
    return appeal, jnp.mean(appeal.astype(jnp.float32)), jnp.mean(jnp.where(appeal, acc,
                                                                            solo_acc))


# --appeal-def -> (split of the global model's loss, SoloStats field of the requirement)
APPEAL_DEFS: dict[str, tuple[str, str]] = {
    "test-vs-solo-test": ("test", "test_loss"),
    "test-vs-solo-train": ("test", "train_loss"),
    "train-vs-solo-train": ("train", "train_loss"),
    "train-vs-solo-minibatch": ("train", "minibatch_loss"),
}

# The protocol's options (`applies=PROTOCOL`: refused with --appeal off; given, they turn
# `--appeal auto` on, `requirement.appeal_on`)
APPEAL_DEF = option(
    "appeal_def", "test-vs-solo-test", "appeal definition (global-model loss vs requirement) "
    "used by GM-Appeal, preferred acc, the 'appealed' metric and opt-out: test-vs-solo-test, "
    "test-vs-solo-train, train-vs-solo-train, train-vs-solo-minibatch", tuple(APPEAL_DEFS),
    applies=PROTOCOL, group="appeal")
OPT_OUT_AFTER = option(
    "opt_out_after", 0, "flexible participation (MaxFL's protocol uses 10): after this many "
    "rounds only clients the global model appeals to (on their train data) are available; "
    "0 = off, everyone always available", applies=PROTOCOL, group="appeal", ge=0)
FINETUNE_STEPS = option(
    "finetune_steps", 5, "local SGD steps of the personalization evaluation from the final "
    "global model (0 = skip)", applies=PROTOCOL, group="appeal", ge=0)
# The configuration fields of the appeal protocol (`RunConfig.view`): its own group and the
# local batch size of the solo models and the fine-tuning.
OPTIONS = (*fields_in("appeal"), "batch_size")


def appeal_requirement(appeal_def: str, solo: SoloStats, rho: jax.Array,
                       given: bool) -> jax.Array:
    """r_k of `appeal_def`: the given `--requirement` values `rho` when `given`, else the
    solo statistic the definition names."""
    return rho if given else getattr(solo, APPEAL_DEFS[appeal_def][1])


def appeal_loss_split(appeal_def: str) -> str:
    """'train' or 'test': the split on which the global model's loss L_k is measured."""
    return APPEAL_DEFS[appeal_def][0]


def _requirement(opts: Options, solo: SoloStats, rho: jax.Array) -> jax.Array:
    return appeal_requirement(opts.appeal_def, solo, rho,
                              parse_requirement(opts.requirement) is not None)


class AppealState(NamedTuple):
    """The appeal protocol's state (`ServerState.protocol`), fixed after init."""

    solo_seen: SoloStats  # [M] the seen clients' solo models' losses and accuracies
    rho_seen: jax.Array  # [M] float32 their requirements rho_k
    solo_unseen: SoloStats | None = None  # [U] the unseen clients' (None without any)
    rho_unseen: jax.Array | None = None  # [U] float32 their requirements, likewise


def init_appeal(model: Model, opts: Options, state: ServerState, data: FederatedData,
                key: jax.Array, hp: HParams, pre: dict | None = None) -> AppealState:
    """Solo statistics and requirements of the seen (and unseen) clients; the solo models
    are read from `pre` (`requirement.solo_models`) when given."""
    req = parse_requirement(opts.requirement)
    solo = pre["solo_seen"] if pre is not None else state.solo
    if solo is None:
        solo = seen_solo(model, opts, state.params, state.model_state, data, key, hp)
    out = AppealState(solo, requirement_values(req, solo.train_loss, data.num_clients,
                                               data.num_unseen))
    if data.num_unseen:
        us = (pre["solo_unseen"] if pre is not None else
              unseen_solo(model, opts, state.params, state.model_state, data, key, hp))
        out = out._replace(solo_unseen=us,
                           rho_unseen=requirement_values(req, us.train_loss, data.num_clients,
                                                         data.num_unseen, unseen=True))
    return out


def appeal_metrics(opts: Options, info: AppealState, ev: dict, suffix: str = ""
                   ) -> dict[str, jax.Array]:
    """GM-Appeal and preferred-model metrics of an evaluation `ev` (split -> ClientEval)."""
    out = {}
    for tag, tr, te in (("seen", "train", "test"), ("unseen", "unseen_train", "unseen_test")):
        solo, rho = ((info.solo_seen, info.rho_seen) if tag == "seen" else
                     (info.solo_unseen, info.rho_unseen))
        if solo is None or te not in ev:
            continue
        r = _requirement(opts, solo, rho)
        loss = ev[te].loss if appeal_loss_split(opts.appeal_def) == "test" else ev[tr].loss
        appeal, gm, pref = appeal_stats(loss, ev[te].acc, r, solo.test_acc)
        out[f"gm_appeal{suffix}_{tag}"] = gm
        out[f"preferred_acc{suffix}_{tag}"] = pref
        out[f"appeal{suffix}_{tag}"] = appeal.astype(jnp.float32)
        if not suffix:
            out[f"solo_acc_{tag}"] = jnp.mean(solo.test_acc)
            out[f"train_loss_{tag}_mean"] = jnp.mean(ev[tr].loss)
            out[f"test_loss_{tag}_mean"] = jnp.mean(ev[te].loss)
            out[f"solo_test_acc_{tag}"] = solo.test_acc
            out[f"solo_test_loss_{tag}"] = solo.test_loss
            out[f"solo_train_loss_{tag}"] = solo.train_loss
            out[f"solo_minibatch_loss_{tag}"] = solo.minibatch_loss
            out[f"requirement_{tag}"] = r
            out[f"global_loss_{tag}"] = loss
    return out


def appeal_pool(model: Model, state: ServerState, data: FederatedData, requirement: jax.Array,
                opt_out_after: int, appeal_def: str = "test-vs-solo-test"
                ) -> tuple[jax.Array, jax.Array]:
    """(pool [M] bool, appealed [M] bool) of flexible participation at `state.round`.

    appealed_k = L_k(w) < r_k at the current global model, with L_k on the split that
    `appeal_def` names and r_k = `requirement` (`appeal_requirement`); the pool is everyone
    before round `opt_out_after` and the appealed clients from then on.
    """
    split = data.test if appeal_loss_split(appeal_def) == "test" else data.train
    loss = evaluate_split(model, state.params, state.model_state, split).loss
    appealed = loss < requirement
    return jnp.where(state.round < opt_out_after, True, appealed), appealed


def per_cluster(cluster: np.ndarray, values: dict[str, np.ndarray]) -> dict[str, list]:
    """Per-cluster means of per-client arrays (host-side diagnostics).

    Args:
      cluster: [n] cluster id of each client (ids < 0 are left out).
      values: name -> [n] per-client values (e.g. global and solo test loss and accuracy,
        appeal 0/1, participation count).

    Returns:
      {"cluster": ids, "clients": [count per id], name: [mean per id]} (ids ascending).
    """
    cluster = np.asarray(cluster)
    ids = sorted(int(c) for c in np.unique(cluster) if c >= 0)
    out: dict[str, list] = {"cluster": ids,
                            "clients": [int(np.sum(cluster == c)) for c in ids]}
    for name, v in values.items():
        v = np.asarray(v, np.float64)
        out[name] = [float(np.mean(v[cluster == c])) for c in ids]
    return out


@shared
def appeal_evaluator(evaluate, opts: Options):
    """`evaluate` with the appeal metrics added; one function per evaluator and options
    (`core.memo.shared`), so that arms evaluated alike share the program."""
    def appealed(state, data, hp):
        ev = evaluate(state, data, hp)
        more = appeal_metrics(opts, state.protocol, ev)
        return {**ev, "metrics": {**ev.get("metrics", {}), **more}}

    appealed.__name__ = "evaluate"
    return appealed


def with_appeal(alg: FederatedAlgorithm, model: Model, opts: Options) -> FederatedAlgorithm:
    """`alg` with solo models, appeal metrics and (optionally) appeal-based opt-out.

    When `alg` names its initial model (`FederatedAlgorithm.initial`, every algorithm built
    by `compose`), the solo models are its `pre_init` (`requirement.solo_models`), which
    every algorithm under the protocol shares; they are the same models either way."""
    pre_init = (None if alg.initial is None else
                solo_models(model, opts, alg.initial, unseen=True))

    def init(key, data, hp, pre=None):
        if pre_init is not None and pre is None:
            pre = pre_init(key, data, hp)
        state = alg.init(key, data, hp) if pre is None else alg.init(key, data, hp, pre)
        return state.replace(protocol=init_appeal(model, opts, state, data, key, hp, pre))

    def round_fn(state, data, key, hp):
        appealed = None
        if opts.opt_out_after > 0:
            info: AppealState = state.protocol
            pool, appealed = appeal_pool(model, state, data,
                                         _requirement(opts, info.solo_seen, info.rho_seen),
                                         opts.opt_out_after, opts.appeal_def)
            state = state.replace(pool=pool)
        new, metrics = alg.round(state, data, key, hp)
        if appealed is not None:
            metrics = {**metrics, "appealed": jnp.sum(appealed).astype(jnp.int32)}
        return new, metrics

    return FederatedAlgorithm(alg.name, init, round_fn, appeal_evaluator(alg.evaluate, opts),
                              pre_init=pre_init,
                              initial=alg.initial)


def personalize(model: Model, opts: Options, state: ServerState, data: FederatedData,
                key: jax.Array, hp: HParams) -> dict[str, Any]:
    """GM-Appeal / preferred accuracy after `opts.finetune_steps` local steps per client.

    Every client (seen and unseen; vmapped in chunks) fine-tunes the final global model
    with its client lr and batch size; its fine-tuned model is compared with its
    requirement exactly as the global model is in `appeal_metrics`. Returns
    `{name: scalar or per-client array}` (keys `gm_appeal_ft_S`, `preferred_acc_ft_S`,
    `test_acc_ft_S`, `appeal_ft_S`). Not jitted: wrap it in `jax.jit`.
    """
    from ...evaluate.evaluation import ClientEval

    info = state.protocol
    ev = {}
    pairs = [("train", "test", data.train, data.test)]
    if data.num_unseen:
        pairs.append(("unseen_train", "unseen_test", data.unseen_train, data.unseen_test))
    for i, (tr, te, a_tr, a_te) in enumerate(pairs):
        ft = solo_stats(model, state.params, state.model_state, a_tr, a_te,
                        jax.random.fold_in(jax.random.fold_in(key, FT_TAG), i), hp.client_lr,
                        steps=opts.finetune_steps, batch_size=opts.batch_size)
        ev[tr] = ClientEval(ft.train_loss, ft.train_acc, a_tr.count)
        ev[te] = ClientEval(ft.test_loss, ft.test_acc, a_te.count)
    out = appeal_metrics(opts, info, ev, suffix="_ft")
    out["test_acc_ft_seen"] = jnp.mean(ev["test"].acc)
    if data.num_unseen:
        out["test_acc_ft_unseen"] = jnp.mean(ev["unseen_test"].acc)
    return out
