"""Sequence models over token ids (core/sequence.py): token loss and accuracy against
hand-computed values, the LSTM against a numpy cell loop, its hand-written backward pass
against autodiff, padding and causality, dropout, and the one-line refusals."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_appeal.core import sequence as seq
from fedjax_appeal.core.arrays import ClientArrays, FederatedData, client_norms
from fedjax_appeal.core.config import ConfigError
from fedjax_appeal.core.models import make_model, model_for
from fedjax_appeal.data.sources import Dataset
from fedjax_appeal.evaluate.evaluation import evaluate_split
from fedjax_appeal.local.client import client_loss

V = 6  # 0 pad, 1 bos, 2 eos, 3 and 4 vocabulary, 5 oov


def _logsoftmax(z):
    z = np.asarray(z, np.float64)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def test_token_loss_and_accuracy_by_hand():
    # one row, 5 positions: targets 3, 5 (oov), 2 (eos), 4, 0 (pad)
    y = np.array([[3, 5, 2, 4, 0]])
    logits = np.zeros((1, 5, V), np.float32)
    logits[0, 0, 3] = 2.0  # argmax 3: right
    logits[0, 1, 5] = 9.0  # the oov id scores highest, but is never predicted
    logits[0, 1, 4] = 1.0  # -> predicts 4 for an oov target: a miss
    logits[0, 2, 2] = 5.0  # eos target: not counted by the accuracy
    logits[0, 3, 1] = 7.0  # bos scores highest but is banned; 3 and 4 tie at 0 -> 3: miss
    logits[0, 4, 0] = 3.0  # pad target: counted by neither
    ls = _logsoftmax(logits[0])
    want_loss = -(ls[0, 3] + ls[1, 5] + ls[2, 2] + ls[3, 4])  # pad left out
    loss_sum, correct = seq.token_sums(jnp.asarray(logits), jnp.asarray(y))
    assert float(loss_sum[0]) == pytest.approx(want_loss, rel=1e-5)
    assert float(correct[0]) == 1.0  # position 0 only
    assert float(seq.token_loss(jnp.asarray(logits), jnp.asarray(y))) == pytest.approx(
        want_loss / 4, rel=1e-5)
    np.testing.assert_array_equal(seq.target_counts(y), [4, 3])  # (loss, accuracy) targets


def _np_lstm(x, wi, wh, b):
    """A numpy LSTM, one position at a time: gates i, g, f, o; forget bias +1."""
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    bsz, t, _ = x.shape
    h = np.zeros((bsz, wh.shape[0]))
    c = np.zeros_like(h)
    out = []
    for s in range(t):
        z = x[:, s] @ wi + h @ wh + b
        i, g, f, o = np.split(z, 4, axis=-1)
        c = sig(f + 1.0) * c + sig(i) * np.tanh(g)
        h = sig(o) * np.tanh(c)
        out.append(h)
    return np.stack(out, 1)


def test_lstm_layer_equals_a_numpy_cell_loop():
    layer = seq.LSTMLayer(5)
    x = jax.random.normal(jax.random.key(0), (3, 7, 4))
    v = layer.init(jax.random.key(1), x)
    v = jax.tree.map(lambda a: a + 0.1 * jax.random.normal(jax.random.key(2), a.shape), v)
    p = {k: np.asarray(a, np.float64) for k, a in v["params"].items()}
    want = _np_lstm(np.asarray(x, np.float64), p["wi"], p["wh"], p["b"])
    np.testing.assert_allclose(np.asarray(layer.apply(v, x)), want, atol=1e-5)


def test_lstm_backward_pass_equals_autodiff_of_the_scan():
    k = jax.random.split(jax.random.key(3), 3)
    xp = jax.random.normal(k[0], (9, 4, 12))
    wh = 0.3 * jax.random.normal(k[1], (3, 12))
    w = jax.random.normal(k[2], (9, 4, 3))

    def grads(fn):
        return jax.grad(lambda a, b: jnp.sum(fn(a, b) * w), argnums=(0, 1))(xp, wh)

    for got, want in zip(grads(seq.lstm_recurrence), grads(seq.lstm_scan), strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5, rtol=1e-5)
    # ... and under vmap, as the cohort runs it
    vg = jax.vmap(lambda a, b: jax.grad(lambda q: jnp.sum(seq.lstm_recurrence(a, q)))(b))(
        jnp.stack([xp, -xp]), jnp.stack([wh, 2 * wh]))
    ref = jax.grad(lambda q: jnp.sum(seq.lstm_scan(-xp, q)))(2 * wh)
    np.testing.assert_allclose(np.asarray(vg[1]), np.asarray(ref), atol=1e-5, rtol=1e-5)


class _BatchMajorLSTM(seq.SeqLSTM):
    """`SeqLSTM` as a plain batch-major stack of the same submodules (same names): every
    layer over [B, T, D], dropout masks drawn over [B, T, .]."""

    @nn.compact
    def __call__(self, x, train: bool = False):
        h = nn.Embed(self.vocab_size, self.embed)(x)
        for i in range(self.layers):
            if self.dropout > 0:
                h = nn.Dropout(self.dropout, deterministic=not train)(h)
            h = seq.LSTMLayer(self.hidden, name=f"lstm_{i}")(h)
            if self.tanh:
                h = jnp.tanh(h)
        if self.per_position:
            return nn.Dense(self.num_classes)(h)
        h = seq.last_valid(h, x != seq.PAD)
        if self.fc:
            h = nn.Dense(self.fc)(h)
        return nn.Dense(self.num_classes)(h)


@pytest.mark.parametrize("per_position", [True, False])
def test_time_major_stack_equals_the_batch_major_stack_and_its_autodiff(per_position, monkeypatch):
    # SeqLSTM runs its layers time-major with the hand-written backward pass; the reference
    # runs them batch-major with autodiff of the plain scan. Same logits (dropout on, in
    # training: the same masks), same gradient of every parameter.
    kw = dict(vocab_size=V, per_position=per_position, embed=4, hidden=5, layers=2, fc=3,
              tanh=per_position, dropout=0.3)
    model, ref = seq.SeqLSTM(V if per_position else 3, **kw), _BatchMajorLSTM(
        V if per_position else 3, **kw)
    x = jnp.array([[1, 3, 4, 3, 4, 2, 0], [1, 4, 4, 0, 0, 0, 0], [3, 3, 3, 4, 4, 2, 1]],
                  jnp.int32)
    params = model.init(jax.random.key(0), x)
    w = jax.random.normal(jax.random.key(1), model.apply(params, x).shape)

    def loss(module, p):
        out = module.apply(p, x, train=True, rngs={"dropout": jax.random.key(2)})
        return jnp.sum(out * w), out

    (_, out), grads = jax.value_and_grad(lambda p: loss(model, p), has_aux=True)(params)
    monkeypatch.setattr(seq, "lstm_recurrence", seq.lstm_scan)  # autodiff of the scan
    (_, want), want_grads = jax.value_and_grad(lambda p: loss(ref, p), has_aux=True)(params)
    assert not np.allclose(np.asarray(out), np.asarray(model.apply(params, x)))  # dropout on
    np.testing.assert_allclose(np.asarray(out), np.asarray(want), atol=1e-5)
    for got, ref_g in zip(jax.tree.leaves(grads), jax.tree.leaves(want_grads), strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(ref_g), atol=1e-5, rtol=1e-5)


def _model(name, per_position, classes=3, t=6):
    return make_model(name, "toy", V if per_position else classes, (t,), jnp.int32,
                      vocab_size=V, per_position=per_position)


@pytest.mark.parametrize("name", ["lstm", "transformer"])
def test_a_classifier_reads_the_last_real_token_and_ignores_padding(name):
    m = _model(name, False)
    params, state = m.init(jax.random.key(0))
    x = jnp.array([[3, 4, 3, 0, 0, 0], [4, 4, 0, 0, 0, 0]], jnp.int32)
    out, _ = m.apply(params, state, x, train=False)
    assert out.shape == (2, 3)
    # the same tokens in a shorter row: padding is not read
    short = make_model(name, "toy", 3, (3,), jnp.int32, vocab_size=V)
    if name == "lstm":  # (the transformer's position table depends on the row length)
        out3, _ = short.apply(params, state, x[:, :3], train=False)
        np.testing.assert_allclose(np.asarray(out), np.asarray(out3), atol=1e-5)
    x2 = x.at[0, 4].set(0).at[1, 5].set(0)  # other padding: same output
    np.testing.assert_allclose(np.asarray(m.apply(params, state, x2, train=False)[0]),
                               np.asarray(out), atol=1e-6)
    x3 = x.at[0, 2].set(4)  # a real token changed: another output
    assert not np.allclose(np.asarray(m.apply(params, state, x3, train=False)[0][0]),
                           np.asarray(out[0]))


@pytest.mark.parametrize("name", ["char_lstm", "transformer"])
def test_a_language_model_is_causal(name):
    m = _model(name, True)
    params, state = m.init(jax.random.key(0))
    x = jnp.array([[1, 3, 4, 3, 4, 2]], jnp.int32)
    out, _ = m.apply(params, state, x, train=False)
    assert out.shape == (1, 6, V)
    later = x.at[0, 4].set(3).at[0, 5].set(0)  # changes from position 4 on
    out2, _ = m.apply(params, state, later, train=False)
    np.testing.assert_allclose(np.asarray(out[0, :4]), np.asarray(out2[0, :4]), atol=1e-5)
    assert not np.allclose(np.asarray(out[0, 4:]), np.asarray(out2[0, 4:]))


def test_transformer_dropout_only_in_training():
    m = _model("transformer", True)
    params, state = m.init(jax.random.key(0))
    x = jnp.array([[1, 3, 4, 3, 4, 2]], jnp.int32)
    e1 = m.apply(params, state, x, train=False, key=jax.random.key(1))[0]
    e2 = m.apply(params, state, x, train=False, key=jax.random.key(2))[0]
    np.testing.assert_array_equal(np.asarray(e1), np.asarray(e2))
    t1 = m.apply(params, state, x, train=True, key=jax.random.key(1))[0]
    t2 = m.apply(params, state, x, train=True, key=jax.random.key(2))[0]
    assert not np.allclose(np.asarray(t1), np.asarray(t2))


def _lm_data():
    """Two clients of per-position targets: rows of 4 positions, padded."""
    x = np.array([[1, 3, 4, 3], [2, 1, 4, 0], [1, 4, 4, 3], [3, 3, 2, 1], [4, 2, 0, 0]],
                 np.int32)
    y = np.array([[3, 4, 3, 2], [1, 4, 2, 0], [4, 4, 3, 5], [3, 2, 1, 3], [2, 0, 0, 0]],
                 np.int32)
    return ClientArrays.from_indices(x, y, [np.array([0, 1]), np.array([2, 3, 4])]), x, y


def test_per_client_metrics_are_per_token_means():
    arrays, x, y = _lm_data()
    np.testing.assert_array_equal(np.asarray(arrays.tokens), [[7, 9], [5, 7]])
    m = make_model("char_lstm", "toy", V, (4,), jnp.int32, vocab_size=V, per_position=True)
    params, state = m.init(jax.random.key(0))
    logits = np.asarray(m.apply(params, state, jnp.asarray(x), train=False)[0], np.float64)
    nll = -np.take_along_axis(_logsoftmax(logits), y[..., None], -1)[..., 0]
    banned = np.zeros(V)
    banned[[0, 1, 2, 5]] = -np.inf
    hit = (np.argmax(logits + banned, -1) == y) & (y != 0) & (y != 2)
    for k, rows in enumerate(([0, 1], [2, 3, 4])):
        yk = y[rows]
        want_loss = nll[rows][yk != 0].sum() / (yk != 0).sum()
        want_acc = hit[rows].sum() / ((yk != 0) & (yk != 2)).sum()
        ev = evaluate_split(m, params, state, arrays, chunk=2)
        assert float(ev.loss[k]) == pytest.approx(want_loss, rel=1e-5)
        assert float(ev.acc[k]) == pytest.approx(want_acc, abs=1e-6)
        assert int(ev.count[k]) == ((yk != 0) & (yk != 2)).sum()
        loss_k, acc_k = client_loss(m, params, state, arrays, jnp.int32(k), chunk=2)
        assert float(loss_k) == pytest.approx(want_loss, rel=1e-5)
        assert float(acc_k) == pytest.approx(want_acc, abs=1e-6)


def test_row_targets_keep_row_counts():
    arrays = ClientArrays.from_indices(np.zeros((5, 3), np.int32), np.arange(5) % 2,
                                       [np.array([0, 1]), np.array([2, 3, 4])])
    assert arrays.tokens is None
    n_loss, n_acc = client_norms(arrays)
    np.testing.assert_array_equal(np.asarray(n_loss), [2.0, 3.0])
    np.testing.assert_array_equal(np.asarray(n_acc), [2.0, 3.0])


def _fed(x, y, vocab=0, classes=2):
    arrays = ClientArrays.from_indices(x, y, [np.array([0, 1]), np.array([2, 3])])
    return FederatedData(arrays, arrays, num_classes=classes, name="toy", vocab_size=vocab)


def test_refusals_are_one_line():
    pool = Dataset("toy", np.zeros((4, 5), np.float32), np.array([0, 1, 0, 1]), 2, scale=1.0)
    images = _fed(np.zeros((4, 28, 28), np.uint8), np.array([0, 1, 0, 1]))
    tokens = _fed(np.ones((4, 6), np.int32), np.array([0, 1, 0, 1]), vocab=V)
    for name in ("lstm", "char_lstm", "transformer"):
        with pytest.raises(ConfigError) as e:
            model_for(name, images, pool)
        assert "\n" not in str(e.value)
        assert str(e.value).startswith(f"--model {name} reads token ids")
    for name in ("mlp", "cnn", "logistic"):
        with pytest.raises(ConfigError) as e:
            model_for(name, tokens, pool)
        assert "\n" not in str(e.value)
        assert str(e.value).startswith(f"--model {name} takes images or features; toy holds "
                                       "token ids")
    m = model_for("transformer", tokens, pool)
    assert m.module.vocab_size == V and not m.module.per_position and m.objective == "xent"
