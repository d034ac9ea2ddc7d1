"""Per-FedAvg (Fallah, Mokhtari, Ozdaglar, NeurIPS 2020, "Personalized Federated Learning with
Theoretical Guarantees: A Model-Agnostic Meta-Learning Approach", Algorithm 1), first-order
(`--perfedavg-variant fo`) and Hessian-free (`hf`) versions.

Local step (tau = `--local-steps` of them per round, alpha = `HParams.perfedavg_alpha`,
beta = `HParams.perfedavg_beta`), with three independent minibatches D, D', D'' of the
client (`--batch-size` rows each):
    tmp = w_k - alpha grad f(w_k; D)
    g   = grad f(tmp; D')
    FO: w_k <- w_k - beta g
    HF: w_k <- w_k - beta (g - alpha d),  d ~ Hessian f(w_k; D'') g, with
        d = (grad f(w_k + delta g; D'') - grad f(w_k - delta g; D'')) / (2 delta)
        (the paper's finite difference, delta = `HParams.perfedavg_delta` > 0), or the exact
        Hessian-vector product by `jax.jvp` of the gradient when delta = 0.
The server averages the local models (Delta_k = w - w_k with the `--aggregation` weights and
the configured server optimizer; the defaults give w <- sum_k n_k w_k / sum n_k).

Evaluation (after the one-step adaptation the method is designed for): every client, seen
and unseen, takes one SGD step with step size alpha on one minibatch (`--batch-size`) of
its own train data from the global model, and that model is evaluated on its train and
test split (`personal.personal_evaluator`).
"""

from __future__ import annotations

import jax

from ..aggregate.aggregation import weight_rule
from ..core.arrays import sample_batch
from ..core.capabilities import algorithm
from ..core.config import Options
from ..core.fields import option
from ..core.models import Model
from ..evaluate.personal import eval_key_data, personal_evaluator
from ..local.client import Trained
from .base import compose, register

PERFEDAVG = algorithm("perfedavg")
ALPHA = option("perfedavg_alpha", 0.02, "Per-FedAvg inner (adaptation) step size alpha",
               applies=PERFEDAVG, tunable=True, ge=0)
BETA = option("perfedavg_beta", 0.05, "Per-FedAvg outer (meta) step size beta",
              applies=PERFEDAVG, tunable=True, gt=0)
DELTA = option("perfedavg_delta", 1e-3, "Per-FedAvg HF: finite-difference delta of the "
               "Hessian-vector product (0 = exact jvp)", applies=PERFEDAVG, tunable=True, ge=0)
VARIANT = option("perfedavg_variant", "fo", "Per-FedAvg variant: fo (first-order) or hf "
                 "(Hessian-free)", ("fo", "hf"), applies=PERFEDAVG)


def _axpy(a, x, y):
    """y + a x over pytrees."""
    return jax.tree.map(lambda u, v: v + a * u, x, y)


def hvp(grad_fn, w, v, delta):
    """Hessian-vector product H(w) v of the function whose gradient is `grad_fn`.

    delta > 0: central finite difference (grad(w + delta v) - grad(w - delta v)) / (2 delta);
    delta = 0: exact, `jax.jvp` of the gradient (forward-over-reverse).
    """

    def finite(_):
        gp, gm = grad_fn(_axpy(delta, v, w)), grad_fn(_axpy(-delta, v, w))
        return jax.tree.map(lambda a, b: (a - b) / (2.0 * delta), gp, gm)

    def exact(_):
        return jax.jvp(grad_fn, (w,), (v,))[1]

    return jax.lax.cond(delta > 0, finite, exact, None)


def meta_step(grad_fn, w, batches, alpha, beta, delta, variant: str):
    """One Per-FedAvg local step; `grad_fn(w, b)`: gradient on batch b of (D, D', D'')."""
    tmp = _axpy(-alpha, grad_fn(w, batches[0]), w)
    g = grad_fn(tmp, batches[1])
    if variant == "hf":
        d = hvp(lambda p: grad_fn(p, batches[2]), w, g, delta)
        g = _axpy(-alpha, d, g)
    return _axpy(-beta, g, w)


def perfedavg_local(model: Model, opts: Options):
    def local(state, data, k, key, hp):
        def grad_fn(p, batch):
            x, y, kd = batch
            return jax.grad(lambda q: model.loss(q, state.model_state, x, y, train=True,
                                                 key=kd)[0])(p)

        def step(w, step_key):
            kb = jax.random.split(step_key, 3)
            batches = []
            for i in range(3):
                k_row, k_drop = jax.random.split(kb[i])
                batches.append((*sample_batch(data.train, k, k_row, opts.batch_size), k_drop))
            x, y, kd = batches[1]
            loss = model.loss(w, state.model_state, x, y, train=True, key=kd)[0]
            return meta_step(grad_fn, w, batches, hp.perfedavg_alpha, hp.perfedavg_beta,
                             hp.perfedavg_delta, opts.perfedavg_variant), loss

        params, losses = jax.lax.scan(step, state.params, jax.random.split(key, opts.local_steps))
        return Trained((state.params, state.model_state), (params, state.model_state),
                       losses.mean())

    return local


def one_step_adapt(model: Model, opts: Options):
    """adapt(...): one SGD step (alpha) on one minibatch of the client's train data."""

    def adapt(params, mstate, arrays, k, key, hp):
        k_row, k_drop = jax.random.split(key)
        x, y = sample_batch(arrays, k, k_row, opts.batch_size)
        g = jax.grad(lambda p: model.loss(p, mstate, x, y, train=True, key=k_drop)[0])(params)
        return _axpy(-hp.perfedavg_alpha, g, params), mstate

    return adapt


@register(PERFEDAVG)
def perfedavg(model: Model, opts: Options, executor=None):
    return compose("perfedavg", model, opts, local=perfedavg_local(model, opts),
                   weights=weight_rule(opts), executor=executor,
                   init_fields=lambda key, *_: {"eval_key": eval_key_data(key)},
                   evaluate=personal_evaluator(model, one_step_adapt(model, opts)))
