"""pFedMe (T. Dinh, Tran, Nguyen, NeurIPS 2020, "Personalized Federated Learning with Moreau
Envelopes", Algorithm 1).

Client k, from the global model w (w_k = w, personal model theta = w), tau = `--local-steps`
local steps, each on a fresh minibatch D (`--batch-size` rows):
    theta <- K = `--pfedme-k` gradient steps (personal lr = `HParams.pfedme_lr`) on
             h(theta) = f(theta; D) + lambda/2 ||theta - w_k||^2, warm-started from the
             previous theta (the approximate personalized model theta_hat(w_k));
    w_k   <- w_k - eta lambda (w_k - theta)   (eta = `HParams.client_lr`,
                                               lambda = `HParams.pfedme_lambda`).
Server: w <- (1 - beta) w + beta sum_k a_k w_k with the `--aggregation` weights a_k
(proportional n_k by default; the paper averages uniformly: `--aggregation uniform`) and
beta = `HParams.pfedme_beta`. Implemented as `make_round` with weights beta a_k on
Delta_k = w - w_k and the configured server optimizer (defaults: SGD, server lr 1).

Evaluation with personalized models: every client, seen and unseen alike, runs the local
procedure above (tau steps, K inner steps each) from the current global model on its own
train data, and its final personal model theta_k is evaluated on its train and test split.
For a seen client this is the personal model it would hold after being sampled in the
current round; for an unseen client it is the same procedure (it never trains the global
model). The adaptation minibatches are drawn with the evaluation key
(`personal.personal_evaluator`).
"""

from __future__ import annotations

import jax

from ..aggregate.aggregation import weight_rule
from ..core.arrays import sample_batch
from ..core.capabilities import algorithm
from ..core.config import Options
from ..core.fields import option
from ..core.models import Model
from ..core.round import WeightRule
from ..evaluate.personal import eval_key_data, personal_evaluator
from ..local.client import Trained
from .base import compose, register

PFEDME = algorithm("pfedme")
LAMBDA = option("pfedme_lambda", 15.0, "pFedMe regularisation lambda of the personal models",
                applies=PFEDME, tunable=True, gt=0)
LR = option("pfedme_lr", 0.05, "pFedMe personal learning rate (K inner steps)", applies=PFEDME,
            tunable=True, gt=0)
BETA = option("pfedme_beta", 1.0, "pFedMe server mixing beta: w <- (1-beta) w + beta avg(w_k)",
              applies=PFEDME, tunable=True, gt=0)
K = option("pfedme_k", 5, "pFedMe inner steps K per local step", applies=PFEDME, ge=1)


def inner_solve(grad_fn, theta, w, lam, lr, steps: int):
    """`steps` gradient steps on f(theta) + lam/2 ||theta - w||^2 from `theta`."""

    def body(_, th):
        g = grad_fn(th)
        return jax.tree.map(lambda t, gi, wi: t - lr * (gi + lam * (t - wi)), th, g, w)

    return jax.lax.fori_loop(0, steps, body, theta)


def pfedme_local_run(model: Model, opts: Options, params, mstate, arrays, k, key, hp):
    """The client's tau local steps from `params`: (w_k, theta_k, mean minibatch loss)."""

    def step(carry, step_key):
        w, theta = carry
        k_row, k_drop = jax.random.split(step_key)
        x, y = sample_batch(arrays, k, k_row, opts.batch_size)

        def f(p):
            return model.loss(p, mstate, x, y, train=True, key=k_drop)[0]

        loss = f(theta)
        theta = inner_solve(jax.grad(f), theta, w, hp.pfedme_lambda, hp.pfedme_lr, opts.pfedme_k)
        w = jax.tree.map(lambda a, t: a - hp.client_lr * hp.pfedme_lambda * (a - t), w, theta)
        return (w, theta), loss

    (w, theta), losses = jax.lax.scan(step, (params, params),
                                      jax.random.split(key, opts.local_steps))
    return w, theta, losses.mean()


def pfedme_parts(model: Model, opts: Options, base: WeightRule):
    """(local objective, weight rule beta a_k from the rule `base` gives a_k, personal
    adaptation for `personal_evaluator`) of pFedMe; `opts` holds `local_steps`,
    `batch_size` and `pfedme_k`."""

    def local(state, data, k, key, hp):
        w, _, loss = pfedme_local_run(model, opts, state.params, state.model_state, data.train,
                                      k, key, hp)
        return Trained((state.params, state.model_state), (w, state.model_state), loss)

    def adapt(params, mstate, arrays, k, key, hp):
        return pfedme_local_run(model, opts, params, mstate, arrays, k, key, hp)[1], mstate

    weights = WeightRule(lambda upd, idx, valid, state, hp: hp.pfedme_beta * base.fn(
        upd, idx, valid, state, hp), base.needs)  # beta a_k
    return local, weights, adapt


@register(PFEDME)
def pfedme(model: Model, opts: Options, executor=None):
    local, weights, adapt = pfedme_parts(model, opts, weight_rule(opts))
    return compose("pfedme", model, opts, local=local, weights=weights, executor=executor,
                   init_fields=lambda key, *_: {"eval_key": eval_key_data(key)},
                   evaluate=personal_evaluator(model, adapt))
