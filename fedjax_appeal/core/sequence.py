"""Sequence models over token ids, and the token losses and metrics of language tasks.

A token task's rows are int32 ids `x [S, T]`, padded on the right with `PAD` (id 0: the
padding mask is `x != PAD`). Its targets are either one label per sequence (`y [S]`:
Sent140 sentiment) or one token per position (`y [S, T]`: next-token prediction). Targets
of per-position tasks follow FedJAX's Shakespeare layout (`fedjax.datasets.shakespeare`):

    0 PAD, 1 BOS, 2 EOS, 3 .. V-2 the vocabulary, V-1 OOV

What counts (as FedJAX's language models, `fedjax.models.shakespeare` /
`stackoverflow`):

  * loss (`token_loss` in training, `token_sums` in evaluation): cross-entropy of every
    target but `PAD` (FedJAX's `token_loss`, masked values (pad,)); perplexity = exp(loss).
  * accuracy: every target but `PAD` and `EOS` counts, and the prediction is the argmax
    over the vocabulary only (`PAD`, `BOS`, `EOS` and `OOV` are never predicted), so an OOV
    target always counts as a miss (FedJAX's `accuracy_in_vocab`: masked values (pad, eos)
    and the logits mask of pad, bos, eos, oov).

Per client, both are sums over the client's counted targets divided by their number
(`target_counts`; `core.arrays.ClientArrays.tokens`): per-token means, not means of
per-sequence means.

Models (`--model`; `core.models.MODELS`), each a classifier for `y [S]` and a language
model for `y [S, T]` (`per_position`, set from the data):

  * `lstm`: LEAF's Sent140 `stacked_lstm` (Caldas et al. 2018, `models/sent140/
    stacked_lstm.py`, model params (25, 2, 100)): a learned 100-d embedding, 2 LSTM layers
    of 100 units, a linear 128-unit layer and the output layer. LEAF reads the output at
    the last of the 25 positions, padding included; here at the last real token.
  * `char_lstm`: FedJAX's Shakespeare character model (`fedjax.models.shakespeare.
    create_lstm_model`, after McMahan et al. 2017): an 8-d embedding, 2 LSTM layers of 256
    units each followed by tanh, a linear output over the vocabulary.
  * `transformer`: a small decoder-only transformer (pre-LayerNorm blocks of causal
    multi-head self-attention and a GELU MLP, learned positions; Radford et al. 2019's
    GPT-2 block): width 64, 2 layers, 4 heads, MLP 256, dropout 0.1.

LSTM cells follow TensorFlow's `BasicLSTMCell` and Haiku's `LSTM` (LEAF's and FedJAX's):
one fused gate matrix, forget-gate bias +1. The input projection of every position is one
matrix product before the recurrence (`lax.scan` over positions); padded positions come
after every real one, so they never change a real position's output.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

PAD, BOS, EOS = 0, 1, 2  # special ids; OOV is the last id (V - 1) of per-position tasks


def target_counts(y: np.ndarray) -> np.ndarray:
    """[2] counted targets of the rows `y [n, T]`: (by the loss, by the accuracy)."""
    y = np.asarray(y)
    counted = y != PAD
    return np.array([counted.sum(), (counted & (y != EOS)).sum()], np.float32)


def _banned_bias(vocab: int) -> jax.Array:
    """[V] 0 for the predictable ids, -inf for PAD, BOS, EOS and OOV."""
    ban = np.zeros(vocab, np.float32)
    ban[[PAD, BOS, EOS, vocab - 1]] = -np.inf
    return jnp.asarray(ban)


def token_loss(logits: jax.Array, y: jax.Array) -> jax.Array:
    """Mean cross-entropy over the batch's non-`PAD` targets (logits [B, T, V], y [B, T])."""
    xent = optax.softmax_cross_entropy_with_integer_labels(logits, y)
    mask = (y != PAD).astype(xent.dtype)
    return jnp.sum(xent * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def token_sums(logits: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Per row: (summed cross-entropy of the non-`PAD` targets, number of correct
    non-`PAD`, non-`EOS` targets with the prediction restricted to the vocabulary)."""
    xent = optax.softmax_cross_entropy_with_integer_labels(logits, y)
    loss_mask = y != PAD
    pred = jnp.argmax(logits + _banned_bias(logits.shape[-1]), axis=-1)
    correct = (pred == y) & loss_mask & (y != EOS)
    return (jnp.sum(jnp.where(loss_mask, xent, 0.0), axis=-1),
            jnp.sum(correct.astype(jnp.float32), axis=-1))


def last_valid(h: jax.Array, mask: jax.Array) -> jax.Array:
    """h [B, T, D] at each row's last non-padded position (position 0 for an empty row)."""
    last = jnp.maximum(jnp.sum(mask, axis=-1) - 1, 0)
    return jnp.take_along_axis(h, last[:, None, None], axis=1)[:, 0]


def _cell(z: jax.Array, c: jax.Array):
    """One LSTM step from the pre-activations z [.., 4H] (gate order i, g, f, o) and the
    cell c: (h, c, (i, g, f, o) activations)."""
    zi, zg, zf, zo = jnp.split(z, 4, axis=-1)
    i, g, f, o = (jax.nn.sigmoid(zi), jnp.tanh(zg), jax.nn.sigmoid(zf + 1.0),
                  jax.nn.sigmoid(zo))
    c = f * c + i * g
    return o * jnp.tanh(c), c, (i, g, f, o)


def lstm_scan(xp: jax.Array, wh: jax.Array) -> jax.Array:
    """The LSTM recurrence, plain `lax.scan`: xp [T, B, 4H] input pre-activations (bias
    included), wh [H, 4H]; returns h [T, B, H] from a zero state (the reference of
    `lstm_recurrence`)."""
    zero = jnp.zeros((xp.shape[1], wh.shape[0]), xp.dtype)

    def step(carry, xt):
        h, c = carry
        h, c, _ = _cell(xt + h @ wh, c)
        return (h, c), h

    return jax.lax.scan(step, (zero, zero), xp)[1]


@jax.custom_vjp
def lstm_recurrence(xp: jax.Array, wh: jax.Array) -> jax.Array:
    """`lstm_scan` with a hand-written backward pass, as fused LSTM kernels do it.

    The forward pass keeps, per step, the local derivatives the backward pass multiplies
    by (`_lstm_fwd`), so the reverse scan is one elementwise product and one matrix
    product per step: it carries only the state's cotangents and emits each step's gate
    cotangent dz_t. The recurrent weights' gradient is then one matrix product over all
    steps (sum_t h_{t-1}^T dz_t); autodiff of the scan instead adds an [H, 4H] outer
    product to the gradient inside the loop at every step and recomputes the gates.
    """
    return lstm_scan(xp, wh)


def _lstm_fwd(xp, wh):
    """The recurrence, keeping per step h_t and the local derivatives of the step
    (h_t = o tanh(c_t), c_t = f c_{t-1} + i g):

      k_t = [g i(1-i), i (1-g^2), c_{t-1} f(1-f), tanh(c_t) o(1-o)]  (dz_t / [dc, dc, dc, dh])
      e_t = [o (1 - tanh(c_t)^2), f]  (dc_t / dh_t, dc_{t-1} / dc_t)
    """
    zero = jnp.zeros((xp.shape[1], wh.shape[0]), xp.dtype)

    def step(carry, xt):
        h, c = carry
        h_new, c_new, (i, g, f, o) = _cell(xt + h @ wh, c)
        tc = jnp.tanh(c_new)
        k = jnp.concatenate([g * i * (1.0 - i), i * (1.0 - g * g), c * f * (1.0 - f),
                             tc * o * (1.0 - o)], axis=-1)
        e = jnp.concatenate([o * (1.0 - tc * tc), f], axis=-1)
        return (h_new, c_new), (h_new, k, e)

    _, (hs, ks, es) = jax.lax.scan(step, (zero, zero), xp)
    return hs, (wh, hs, ks, es)


def _lstm_bwd(res, dhs):
    wh, hs, ks, es = res
    hid = wh.shape[0]
    h_prev = jnp.concatenate([jnp.zeros_like(hs[:1]), hs[:-1]])
    wt = jax.lax.optimization_barrier(wh.T)  # materialised: [4H, H] rows for the step's product

    def step(carry, xs):
        dh_next, dc_next = carry
        dh_t, k_t, e_t = xs
        dh = dh_t + dh_next
        dc = dh * e_t[:, :hid] + dc_next
        dz = jnp.concatenate([dc, dc, dc, dh], axis=-1) * k_t
        return (dz @ wt, dc * e_t[:, hid:]), dz

    zero = jnp.zeros_like(hs[0])
    _, dzs = jax.lax.scan(step, (zero, zero), (dhs, ks, es), reverse=True)
    flat = lambda a: a.reshape(-1, a.shape[-1])  # noqa: E731 - [T*B, .]: one contraction
    return dzs, flat(h_prev).T @ flat(dzs)


lstm_recurrence.defvjp(_lstm_fwd, _lstm_bwd)


class LSTMLayer(nn.Module):
    """One LSTM layer over [B, T, D] -> [B, T, H] (`time_major`: [T, B, D] -> [T, B, H]),
    zero initial state. The input projection of every position is one [T*B, D] x [D, 4H]
    product; time-major inputs need no transpose around it."""

    hidden: int
    time_major: bool = False

    @nn.compact
    def __call__(self, x):
        h = self.hidden
        wi = self.param("wi", nn.initializers.lecun_normal(), (x.shape[-1], 4 * h))
        wh = self.param("wh", nn.initializers.orthogonal(), (h, 4 * h))
        b = self.param("b", nn.initializers.zeros, (4 * h,))
        if not self.time_major:
            x = jnp.swapaxes(x, 0, 1)
        t, bsz, d = x.shape
        xp = (x.reshape(t * bsz, d) @ wi.astype(x.dtype)).reshape(t, bsz, 4 * h) + b.astype(
            x.dtype)
        out = lstm_recurrence(xp, wh.astype(x.dtype))
        return out if self.time_major else jnp.swapaxes(out, 0, 1)


class SeqLSTM(nn.Module):
    """Embedding, stacked LSTM layers, then a classifier head at the last real token
    (`per_position=False`) or a next-token head at every position (`per_position=True`).

    `norm` is accepted for the model registry's signature and unused (token ids are not
    normalised); `vocab_size` and `per_position` are set from the data (`make_model`).
    The layers run time-major ([T, B, .]: the embedding gathers the transposed ids, the
    next-token head's logits are transposed back), so no activation is transposed between
    layers; dropout masks are drawn in the [B, T, .] order all the same.
    """

    num_classes: int
    norm: Any = None
    vocab_size: int = 0
    per_position: bool = False
    embed: int = 100
    hidden: int = 100
    layers: int = 2
    fc: int = 128  # a linear layer before the classifier's output (0 = none)
    tanh: bool = False  # tanh after every LSTM layer (FedJAX's character model)
    dropout: float = 0.0  # on the embeddings and between LSTM layers

    @nn.compact
    def __call__(self, x, train: bool = False):
        h = nn.Embed(self.vocab_size, self.embed)(x.T)  # [T, B, E]
        for i in range(self.layers):
            if self.dropout > 0:
                drop = nn.Dropout(self.dropout, deterministic=not train)
                h = jnp.swapaxes(drop(jnp.swapaxes(h, 0, 1)), 0, 1)
            h = LSTMLayer(self.hidden, time_major=True, name=f"lstm_{i}")(h)
            if self.tanh:
                h = jnp.tanh(h)
        if self.per_position:
            return jnp.swapaxes(nn.Dense(self.num_classes)(h), 0, 1)
        h = last_valid(jnp.swapaxes(h, 0, 1), x != PAD)
        if self.fc:
            h = nn.Dense(self.fc)(h)
        return nn.Dense(self.num_classes)(h)


class Block(nn.Module):
    """Pre-LayerNorm decoder block: causal self-attention and a GELU MLP, residuals."""

    width: int
    heads: int
    mlp: int
    dropout: float

    @nn.compact
    def __call__(self, h, mask, train: bool):
        drop = lambda v: nn.Dropout(self.dropout, deterministic=not train)(v)  # noqa: E731
        a = nn.MultiHeadDotProductAttention(
            self.heads, dropout_rate=self.dropout, deterministic=not train)(
            nn.LayerNorm()(h), mask=mask)
        h = h + drop(a)
        m = nn.Dense(self.width)(nn.gelu(nn.Dense(self.mlp)(nn.LayerNorm()(h))))
        return h + drop(m)


class SeqTransformer(nn.Module):
    """A small decoder-only transformer: token and learned position embeddings, `layers`
    pre-LayerNorm blocks with a causal mask that also hides padded keys, a final LayerNorm,
    then the classifier head at the last real token or the next-token head everywhere."""

    num_classes: int
    norm: Any = None
    vocab_size: int = 0
    per_position: bool = False
    width: int = 64
    layers: int = 2
    heads: int = 4
    mlp: int = 256
    dropout: float = 0.1

    @nn.compact
    def __call__(self, x, train: bool = False):
        t = x.shape[1]
        valid = x != PAD
        pos = self.param("pos", nn.initializers.normal(0.02), (t, self.width))
        h = nn.Embed(self.vocab_size, self.width)(x) + pos.astype(jnp.float32)
        h = nn.Dropout(self.dropout, deterministic=not train)(h)
        causal = jnp.tril(jnp.ones((t, t), bool))
        mask = causal[None, None] & valid[:, None, None, :]  # [B, 1, T(query), T(key)]
        for _ in range(self.layers):
            h = Block(self.width, self.heads, self.mlp, self.dropout)(h, mask, train)
        h = nn.LayerNorm()(h)
        if not self.per_position:
            h = last_valid(h, valid)
        return nn.Dense(self.num_classes)(h)


# `--model` name -> fn(num_classes, norm) -> module (registered in `core.models.MODELS`)
SEQUENCE_MODELS = {
    "lstm": lambda c, n: SeqLSTM(c, n),
    "char_lstm": lambda c, n: SeqLSTM(c, n, embed=8, hidden=256, layers=2, fc=0, tanh=True),
    "transformer": lambda c, n: SeqTransformer(c, n),
}


def is_sequence(module: nn.Module) -> bool:
    """Whether a flax module reads token ids (declares `vocab_size` and `per_position`)."""
    fields = getattr(module, "__dataclass_fields__", {})
    return "vocab_size" in fields and "per_position" in fields
