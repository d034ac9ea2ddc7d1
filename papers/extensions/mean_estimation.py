"""Mean estimation, the toy problem of MaxFL (Cho et al., TMLR, "Maximizing Global Model
Appeal in Federated Learning", Sec. 3 / Fig. 2).

Setup (everything in units of the estimation variance gamma^2):
  * K clients with true means theta_k = g * u_k, where u is a fixed zero-mean "shape" with
    (1/K) sum u_k^2 = 1, so the heterogeneity is gamma_G^2 = (1/K) sum (theta_k - mean)^2
    = g^2;
  * client k only sees its empirical mean theta_hat_k ~ N(theta_k, gamma^2) (a draw);
  * its true loss is F_k(w) = (w - theta_k)^2 (+ a constant), its solo model is
    w_hat_k = theta_hat_k, and the global model w appeals to it iff
    (w - theta_k)^2 < (theta_hat_k - theta_k)^2;
  * training objective of client k: f_k(w) = (w - theta_hat_k)^2, an estimate of
    F_k(w) + gamma^2; its requirement rho_k = 2 gamma^2, the value of f_k that corresponds
    to the solo model's expected excess loss gamma^2 (appeal iff F_k(w) - F_k(theta_k) <
    gamma^2 in expectation).
Global models:
  * FedAvg: w = (1/K) sum_k theta_hat_k;
  * MaxFL (sigmoid): a minimiser of sum_k sigmoid(f_k(w) - rho_k);
  * MaxFL-ReLU: a minimiser of sum_k max(0, f_k(w) - rho_k).
The MaxFL objectives are non-convex / flat, so each is minimised by gradient descent from
several starts (each theta_hat_k, their mean, and points spread over their range) and the
start with the lowest final objective wins. GM-Appeal of a method at one gamma_G^2 is the
fraction of (client, draw) pairs appealed, over `draws` draws; everything is one `vmap`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

SHAPES = {
    "2 clients": np.array([-1.0, 1.0]),
    "3 clients, spread": np.array([-1.0, 0.0, 1.0]) * np.sqrt(1.5),
    "3 clients, 2 vs 1": np.array([-1.0, -1.0, 2.0]) / np.sqrt(2.0),
}
METHODS = ("fedavg", "maxfl", "maxfl_relu")


def _sigmoid(u: jax.Array) -> jax.Array:
    """sigmoid(u) whose derivatives keep exp(-|u|) instead of rounding 1 - sigmoid to 0."""
    e = jnp.exp(-jnp.abs(u))
    return jnp.where(u >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def objective(w: jax.Array, theta_hat: jax.Array, rho: jax.Array, method: str) -> jax.Array:
    """sum_k s(f_k(w) - rho_k) with s = sigmoid or ReLU."""
    u = (w - theta_hat) ** 2 - rho
    if method == "maxfl":
        return jnp.sum(_sigmoid(u))
    if method == "maxfl_relu":
        return jnp.sum(jax.nn.relu(u))
    raise ValueError(f"unknown method {method!r}")


def solve(theta_hat: jax.Array, rho: jax.Array, method: str, *, steps: int = 300,
          lr: float = 0.1, num_grid: int = 9, newton: int = 30) -> jax.Array:
    """The global model of `method` for one draw of empirical means theta_hat [K].

    Gradient descent (`steps`, `lr`) from the mean of theta_hat and `num_grid` points
    spread over [min - 1, max + 1], then `newton` Newton steps where the curvature is
    positive (the sigmoid minimiser near one client sits an exponentially small distance
    from theta_hat_k towards the others, which plain GD does not resolve); the end point
    with the lowest objective wins (ties: the leftmost start). Use float64 (`gm_appeal_curve`
    does) to resolve those shifts.
    """
    if method == "fedavg":
        return jnp.mean(theta_hat)
    lo, hi = jnp.min(theta_hat) - 1.0, jnp.max(theta_hat) + 1.0
    starts = jnp.concatenate([jnp.mean(theta_hat)[None],
                              lo + (hi - lo) * jnp.linspace(0.0, 1.0, num_grid)])
    f = lambda w: objective(w, theta_hat, rho, method)  # noqa: E731
    g, h = jax.grad(f), jax.grad(jax.grad(f))

    def newton_step(i, w):
        hw = h(w)
        return jnp.where(hw > 0, w - g(w) / jnp.where(hw > 0, hw, 1.0), w)

    def descend(w0):
        w = jax.lax.fori_loop(0, steps, lambda i, w: w - lr * g(w), w0)
        return jax.lax.fori_loop(0, newton, newton_step, w)

    ws = jax.vmap(descend)(starts)
    vals = jax.vmap(f)(ws)
    return ws[jnp.argmin(vals)]


def residual(w: jax.Array, theta_hat: jax.Array, rho: jax.Array, method: str) -> jax.Array:
    """The Newton correction delta = -f'(w)/f''(w) (0 where f'' <= 0 or for FedAvg).

    At a sigmoid minimum next to theta_hat_k the exact minimiser is w + delta with |delta|
    far below one ulp of w; `appeal_fraction` uses it without rounding it away.
    """
    if method == "fedavg":
        return jnp.zeros_like(w)
    f = lambda v: objective(v, theta_hat, rho, method)  # noqa: E731
    g, h = jax.grad(f)(w), jax.grad(jax.grad(f))(w)
    return jnp.where(h > 0, -g / jnp.where(h > 0, h, 1.0), 0.0)


def appeal_fraction(w: jax.Array, theta: jax.Array, theta_hat: jax.Array,
                    delta: jax.Array | float = 0.0) -> jax.Array:
    """Fraction of clients with |w* - theta_k| < |theta_hat_k - theta_k| (strict), w* = w + delta.

    Evaluated as (w - theta_hat_k)(w + theta_hat_k - 2 theta_k) + delta (2 (w - theta_k) +
    delta) < 0, which stays exact when w == theta_hat_k and delta is below one ulp of w.
    """
    lhs = (w - theta_hat) * (w + theta_hat - 2 * theta) + delta * (2 * (w - theta) + delta)
    return jnp.mean((lhs < 0).astype(theta.dtype))


def gm_appeal_curve(shape: np.ndarray, het: np.ndarray, key: jax.Array, *, draws: int = 10_000,
                    gamma2: float = 1.0, steps: int = 300) -> dict[str, np.ndarray]:
    """GM-Appeal of every method at every heterogeneity gamma_G^2 in `het` (mean over draws).

    Returns {method: [len(het)] mean GM-Appeal, method + "_se": standard error}.
    """
    with jax.enable_x64(True):
        return _curve(np.asarray(shape, np.float64), np.asarray(het, np.float64), key, draws,
                      gamma2, steps)


def _curve(shape, het, key, draws, gamma2, steps):
    shape = jnp.asarray(shape, jnp.float64)
    k = shape.shape[0]
    rho = jnp.full((k,), 2.0 * gamma2, jnp.float64)
    noise = jax.random.normal(key, (draws, k), jnp.float64) * np.sqrt(gamma2)

    def at(h):
        theta = jnp.sqrt(h) * shape
        theta_hat = theta + noise  # [draws, K]; the same noise for every gamma_G^2
        out = {}
        for m in METHODS:
            w = jax.vmap(lambda th, m=m: solve(th, rho, m, steps=steps))(theta_hat)
            d = jax.vmap(lambda wi, th, m=m: residual(wi, th, rho, m))(w, theta_hat)
            a = jax.vmap(lambda wi, th, di: appeal_fraction(wi, theta, th, di))(w, theta_hat, d)
            out[m] = jnp.mean(a)
            out[m + "_se"] = jnp.std(a) / np.sqrt(draws)
        return out

    res = jax.jit(jax.vmap(at))(jnp.asarray(het, jnp.float64))
    return {m: np.asarray(v) for m, v in res.items()}


def run(key: jax.Array, het: np.ndarray | None = None, draws: int = 10_000,
        steps: int = 300) -> list[dict]:
    """All cases: rows {case, gamma_G2, method, gm_appeal, se}."""
    het = np.linspace(0.0, 8.0, 17) if het is None else np.asarray(het)
    rows = []
    for i, (case, shape) in enumerate(SHAPES.items()):
        res = gm_appeal_curve(shape, het, jax.random.fold_in(key, i), draws=draws, steps=steps)
        for j, h in enumerate(het):
            for m in METHODS:
                rows.append({"case": case, "gamma_G2": float(h), "method": m,
                             "gm_appeal": float(res[m][j]), "se": float(res[m + "_se"][j])})
    return rows
