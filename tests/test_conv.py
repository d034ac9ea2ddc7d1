"""core/conv.py: the im2col convolution equals lax.conv_general_dilated (values, gradients,
Hessian-vector products), `Conv` is parameter-compatible with flax.linen.Conv and picks by
training mode, and every built-in convolutional model computes the same function with each
implementation."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_appeal.core.config import ConfigError
from fedjax_appeal.core.conv import (
    CONVS,
    TRAIN_FORMS,
    Conv,
    conv_for,
    max_pool_2x2,
    patches_cf_conv,
    patches_conv,
    resolve_conv_impl,
    winograd_cf_conv,
)
from fedjax_appeal.core.models import MODELS, make_model
from fedjax_appeal.core.winograd import (
    MATRICES,
    TILES,
    _transform_functions,
    transforms,
    winograd_conv,
)

CASES = [  # (input [N, H, W, C], kernel (kh, kw, O), strides, padding)
    ((2, 8, 8, 3), (3, 3, 4), (1, 1), "VALID"),
    ((2, 8, 8, 3), (3, 3, 4), (1, 1), "SAME"),
    ((1, 9, 7, 2), (5, 5, 3), (1, 1), "SAME"),
    ((2, 8, 8, 3), (3, 3, 4), (2, 2), "SAME"),
    ((2, 9, 9, 3), (3, 3, 2), (2, 2), "VALID"),
    ((2, 8, 8, 3), (1, 1, 5), (2, 2), "SAME"),
    ((1, 6, 10, 2), (2, 3, 3), (1, 2), ((1, 0), (2, 1))),
    # enough input channels for Winograd: even and odd output sizes, explicit pads, and
    # stride 2 (which falls back to im2col)
    ((2, 8, 8, 8), (3, 3, 4), (1, 1), "VALID"),
    ((2, 9, 7, 8), (3, 3, 5), (1, 1), "SAME"),
    ((1, 6, 5, 9), (3, 3, 3), (1, 1), ((1, 0), (2, 1))),
    ((2, 8, 8, 8), (3, 3, 4), (2, 2), "SAME"),
]


def _ref(x, w, s, p):
    return jax.lax.conv_general_dilated(x, w, s, p, dimension_numbers=("NHWC", "HWIO", "NHWC"))


@pytest.mark.parametrize("conv", [patches_conv, patches_cf_conv, winograd_cf_conv],
                         ids=["rows", "cf", "winograd"])
@pytest.mark.parametrize("xs,ks,s,p", CASES)
def test_patches_conv_equals_lax_conv_values_gradients_and_hvp(xs, ks, s, p, conv):
    kx, kw, kc, kv = jax.random.split(jax.random.key(0), 4)
    x = jax.random.normal(kx, xs)
    w = jax.random.normal(kw, (ks[0], ks[1], xs[-1], ks[2]))
    out, ref = conv(x, w, s, p), _ref(x, w, s, p)
    assert out.shape == ref.shape
    # Winograd F(4x4, 3x3) rounds more (its transforms weigh by up to 8 and 1/24): within
    # 1e-5 of the layer's largest output
    atol = 1e-5 * (float(jnp.abs(ref).max()) if conv is winograd_cf_conv else 1.0)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=atol)
    c = jax.random.normal(kc, ref.shape)  # a random cotangent: <c, conv(x, w)>

    def loss(f):
        return lambda a, b: jnp.sum(c * jnp.tanh(f(a, b, s, p)))

    g = jax.grad(loss(conv), (0, 1))(x, w)
    gr = jax.grad(loss(_ref), (0, 1))(x, w)
    for a, b in zip(g, gr, strict=True):
        # Winograd's gradients round more, as its values do: within 2e-5 of the largest
        # entry (measured on an AVX-512 EPYC: 1.4e-4 off where the largest entry is 10.2)
        g_atol = (max(1e-4, 2e-5 * float(jnp.abs(b).max())) if conv is winograd_cf_conv
                  else 1e-4)
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=g_atol)
    # Hessian-vector product in w, forward-over-reverse (as Per-FedAvg's exact HVP)
    v = jax.random.normal(kv, w.shape)
    h = jax.jvp(lambda b: jax.grad(loss(conv), 1)(x, b), (w,), (v,))[1]
    hr = jax.jvp(lambda b: jax.grad(loss(_ref), 1)(x, b), (w,), (v,))[1]
    np.testing.assert_allclose(h, hr, rtol=1e-3, atol=1e-3 * float(jnp.abs(hr).max()))


@pytest.mark.parametrize("form", sorted(TRAIN_FORMS))
def test_patches_program_has_no_convolution_and_train_mode_picks(form):
    x, w = jnp.ones((2, 8, 8, 3)), jnp.ones((3, 3, 3, 4))
    for conv in (patches_conv, patches_cf_conv):
        jaxpr = str(jax.make_jaxpr(jax.grad(lambda b, c=conv: jnp.sum(c(
            x, b, (1, 1), "SAME") ** 2)))(w))
        assert "conv_general_dilated" not in jaxpr
    jaxpr = str(jax.make_jaxpr(jax.grad(lambda b: jnp.sum(_ref(x, b, (1, 1), "SAME") ** 2)))(w))
    assert jaxpr.count("conv_general_dilated") == 2  # XLA's: forward + weight gradient
    assert [conv_for(form, t) for t in (True, False)] == [TRAIN_FORMS[form], "xla"]
    assert TRAIN_FORMS == {"patches_train": "patches", "patches_cf_train": "patches_cf",
                           "winograd_train": "winograd", "pooled_cf_train": "pooled_cf",
                           "pooled_winograd_train": "pooled_winograd"}
    assert [conv_for(i, t) for i in CONVS for t in (True, False)] == [
        "xla", "xla", "patches", "patches", "patches_cf", "patches_cf", "winograd", "winograd",
        "pooled_cf", "pooled_cf", "pooled_winograd", "pooled_winograd"]
    layer = Conv(4, (3, 3), impl=form)
    v = layer.init(jax.random.key(0), x)
    for train, n in ((True, 0), (False, 1)):
        assert str(jax.make_jaxpr(lambda a, t=train: layer.apply(v, a, t))(x)).count(
            "conv_general_dilated") == n


def test_channels_first_products_contract_the_pixel_axis_without_transposing_it():
    """The kernel gradient is the one product that contracts the N*H_out*W_out pixel axis:
    in `patches_cf_conv` both of its operands hold that axis last (contiguous), in the row
    form `patches_conv` first."""
    x, w = jnp.ones((2, 8, 8, 3)), jnp.ones((3, 3, 3, 4))
    pixels = 2 * 6 * 6  # N * H_out * W_out

    def dots(conv):
        jaxpr = jax.make_jaxpr(jax.grad(lambda b: jnp.sum(conv(x, b, (1, 1), "VALID") ** 2)))(w)
        out = []
        for e in jaxpr.jaxpr.eqns:
            if e.primitive.name == "dot_general":
                (ca, cb), _ = e.params["dimension_numbers"]
                a, b = e.invars[0].aval.shape, e.invars[1].aval.shape
                if a[ca[0]] == pixels and b[cb[0]] == pixels:
                    out.append((ca, cb, len(a) - 1, len(b) - 1))
        return out

    assert dots(patches_cf_conv) == [((1,), (1,), 1, 1)]  # [O, P] x [K, P]
    assert dots(patches_conv) == [((0,), (0,), 1, 1)]  # [P, O] x [P, K]


@pytest.mark.parametrize("impl", [*sorted(CONVS), *sorted(TRAIN_FORMS)])
@pytest.mark.parametrize("train", [True, False])
def test_conv_module_matches_flax_conv(impl, train):
    x = jax.random.normal(jax.random.key(1), (2, 7, 7, 3))
    ours = Conv(4, (3, 3), (2, 2), padding="SAME", impl=impl)
    theirs = nn.Conv(4, (3, 3), (2, 2), padding="SAME")
    po, pt = ours.init(jax.random.key(2), x), theirs.init(jax.random.key(2), x)
    assert jax.tree.map(jnp.shape, po) == jax.tree.map(jnp.shape, pt)
    jax.tree.map(np.testing.assert_array_equal, po, pt)  # same initialisers, same names
    np.testing.assert_allclose(ours.apply(po, x, train), theirs.apply(pt, x), rtol=1e-5,
                               atol=1e-5)


def _eqns(jaxpr):
    """Every equation of a jaxpr and of the jaxprs nested in its equations' parameters."""
    for e in jaxpr.eqns:
        yield e
        for v in e.params.values():
            for sub in v if isinstance(v, (tuple, list)) else (v,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from _eqns(inner)


def _winograd_products(x_shape, kernel_shape, strides=(1, 1)):
    """The dot_generals of a convolution's gradient batched over 36 (the tile positions of
    Winograd F(4x4, 3x3))."""
    x, w = jnp.ones(x_shape), jnp.ones(kernel_shape)
    jaxpr = jax.make_jaxpr(jax.grad(lambda b: jnp.sum(winograd_cf_conv(
        x, b, strides, "VALID") ** 2)))(w)
    return [e for e in _eqns(jaxpr.jaxpr) if e.primitive.name == "dot_general"
            and e.params["dimension_numbers"][1][0] == (0,)
            and e.invars[0].aval.shape[0] == 36]


def test_winograd_takes_3x3_stride_1_layers_with_enough_channels_only():
    # the forward product and the kernel's gradient (the input needs no gradient here)
    assert len(_winograd_products((2, 8, 8, 8), (3, 3, 8, 4))) == 2
    for xs, ks, s in [((2, 8, 8, 7), (3, 3, 7, 4), (1, 1)),  # too few input channels
                      ((2, 8, 8, 8), (3, 3, 8, 4), (2, 2)),  # stride 2
                      ((2, 8, 8, 8), (5, 5, 8, 4), (1, 1))]:  # 5x5
        assert _winograd_products(xs, ks, s) == []


@pytest.mark.parametrize("m", TILES)
@pytest.mark.parametrize("blocks", [(3, 4), (2, 2)])
def test_winograd_transform_gradients_equal_the_derived_ones(m, blocks):
    """The written-out gradients of the input and output transforms against JAX's own
    transpose of the same (linear) functions, on random cotangents; and one tile by hand."""
    r = m + 2
    n, c = 2, 3
    th, tw = blocks[0] - 1, blocks[1] - 1
    fin, fout = transforms(m)
    plain_in, _, plain_out, _ = _transform_functions(m)
    x = jax.random.normal(jax.random.key(0), (n, m * blocks[0], m * blocks[1], c))
    ct = jax.random.normal(jax.random.key(1), (r, r, n, th, tw, c))
    np.testing.assert_allclose(jax.vjp(fin, x)[1](ct)[0], jax.vjp(plain_in, x)[1](ct)[0],
                               rtol=1e-5, atol=1e-4)
    mm = jax.random.normal(jax.random.key(2), (r, r, n, th, tw, c))
    ct = jax.random.normal(jax.random.key(3), (n, m * th, m * tw, c))
    np.testing.assert_allclose(fout(mm), plain_out(mm))
    np.testing.assert_allclose(jax.vjp(fout, mm)[1](ct)[0], jax.vjp(plain_out, mm)[1](ct)[0],
                               rtol=1e-5, atol=1e-4)
    # the last tile row's first tile by matrix products: B^T d B, d = the input's rows
    # m t .. m t + r - 1; A^T M A in the output's rows m t .. m t + m - 1
    bt, _, at = MATRICES[m]
    t = th - 1
    d = np.asarray(x[1, m * t:m * t + r, 0:r, 2], np.float64)
    np.testing.assert_allclose(fin(x)[:, :, 1, t, 0, 2], bt @ d @ bt.T, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(fout(mm)[0, m * t:m * t + m, 0:m, 1],
                               at @ np.asarray(mm[:, :, 0, t, 0, 1], np.float64) @ at.T,
                               rtol=1e-5, atol=1e-4)


def test_winograd_f2_matrices_by_hand():
    """F(2x2, 3x3)'s matrices as the paper prints them."""
    bt, g, at = MATRICES[2]
    np.testing.assert_array_equal(bt, [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0],
                                       [0, 1, 0, -1]])
    np.testing.assert_array_equal(g, [[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]])
    np.testing.assert_array_equal(at, [[1, 1, 1, 0], [0, 1, -1, -1]])


@pytest.mark.parametrize("m", TILES)
@pytest.mark.parametrize("xs,pads", [((2, 9, 7, 4), ((1, 1), (1, 1))),
                                     ((1, 6, 13, 3), ((0, 0), (2, 0)))])
def test_winograd_tiles_equal_lax_conv_values_and_gradients(m, xs, pads):
    """Each tile size m on its own (the layer takes m = 4): values and both gradients
    against XLA's convolution, with odd output sizes (partial last tiles)."""
    x = jax.random.normal(jax.random.key(5), xs)
    w = jax.random.normal(jax.random.key(6), (3, 3, xs[-1], 5))
    ref = _ref(x, w, (1, 1), pads)
    out = winograd_conv(x, w, pads, m)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-4)
    c = jax.random.normal(jax.random.key(7), ref.shape)
    g = jax.vjp(lambda a, b: winograd_conv(a, b, pads, m), x, w)[1](c)
    gr = jax.vjp(lambda a, b: _ref(a, b, (1, 1), pads), x, w)[1](c)
    for a, b in zip(g, gr, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="tile m must be one of"):
        winograd_conv(x, w, pads, 3)


def test_winograd_is_reverse_mode_only():
    x, w = jnp.ones((1, 6, 6, 8)), jnp.ones((3, 3, 8, 2))
    with pytest.raises(TypeError, match="forward-mode"):
        jax.jvp(lambda b: winograd_cf_conv(x, b, (1, 1), "VALID"), (w,), (w,))


def test_resolve_conv_impl():
    assert resolve_conv_impl("auto", "cpu") == "pooled_winograd_train"
    assert resolve_conv_impl("auto", "cpu", clients_vmapped=True) == "pooled_cf_train"
    assert resolve_conv_impl("auto", "gpu") == "patches_train"
    assert resolve_conv_impl("auto", "tpu") == "xla"
    assert resolve_conv_impl("xla", "cpu") == "xla"
    assert resolve_conv_impl("patches", "gpu") == "patches"
    with pytest.raises(ValueError, match="choose one of"):
        resolve_conv_impl("im2col")
    with pytest.raises(ConfigError, match="unknown conv implementation 'fft'"):
        make_model("lenet5", "x", 10, (28, 28), jnp.uint8, conv_impl="fft")


CONV_MODELS = {"cnn": (32, 32, 3), "lenet5": (28, 28), "cnn_bn": (28, 28),
               "resnet20": (32, 32, 3), "simple_cnn": (28, 28)}


def test_conv_models_are_the_registered_ones_with_a_conv_impl():
    have = {n for n in MODELS
            if "conv_impl" in MODELS[n](10, None).__dataclass_fields__}
    assert have == set(CONV_MODELS)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CONV_MODELS))
def test_conv_model_same_function_with_either_impl(name):
    shape = CONV_MODELS[name]
    x = jax.random.randint(jax.random.key(3), (4, *shape), 0, 256).astype(jnp.uint8)
    y = jnp.arange(4) % 10
    impls = ("xla", *sorted(CONVS.keys() - {"xla"}), *sorted(TRAIN_FORMS))
    models = {i: make_model(name, "x", 10, shape, jnp.uint8, conv_impl=i) for i in impls}
    assert {i: m.module.conv_impl for i, m in models.items()} == {i: i for i in impls}
    params, state = models["xla"].init(jax.random.key(4))
    p2, _ = models["patches"].init(jax.random.key(4))
    jax.tree.map(np.testing.assert_array_equal, params, p2)  # one parameter tree
    res = {}
    for i, m in models.items():
        def f(p, m=m):
            return m.loss(p, state, x, y, train=True, key=jax.random.key(5))
        (loss, new_state), g = jax.value_and_grad(f, has_aux=True)(params)
        res[i] = (loss, new_state, g)
    for i in impls[1:]:
        np.testing.assert_allclose(res["xla"][0], res[i][0], rtol=1e-5)
        # Winograd op by op at the tests' LLVM optimisation level 0 rounds more in deep
        # models: measured on an AVX-512 EPYC, resnet20's gradient 4e-3 off (largest entry
        # 0.47; 3e-6 at the default level): within 1% of the largest entry there
        top = max(float(np.abs(a).max()) for a in jax.tree.leaves(res["xla"][1:]))
        # (the pooled forms run a layer they do not fold, all of resnet20's, by Winograd)
        atol = max(2e-5, 1e-2 * top) if i.startswith(("winograd", "pooled")) else 2e-5
        jax.tree.map(lambda a, b, atol=atol: np.testing.assert_allclose(
            a, b, rtol=2e-3, atol=atol), (res["xla"][1], res["xla"][2]),
                     (res[i][1], res[i][2]))


@pytest.mark.parametrize("form", sorted(TRAIN_FORMS))
def test_for_grad_uses_patches_for_training_form_models_only(form):
    m = make_model("lenet5", "x", 10, (28, 28), jnp.uint8, conv_impl=form)
    assert m.for_grad().module.conv_impl == TRAIN_FORMS[form] and m.module.conv_impl == form
    x = jnp.zeros((2, 28, 28), jnp.uint8)
    p, s = m.init(jax.random.key(0))
    grad_jaxpr = str(jax.make_jaxpr(jax.grad(
        lambda q: m.for_grad().per_sample(q, s, x, jnp.zeros(2, jnp.int32))[0].sum()))(p))
    assert "conv_general_dilated" not in grad_jaxpr
    for other in ("xla", "patches", "patches_cf", "winograd", "pooled_cf", "pooled_winograd"):
        m2 = make_model("lenet5", "x", 10, (28, 28), jnp.uint8, conv_impl=other)
        assert m2.for_grad() is m2
    mlp = make_model("mlp", "x", 10, (28, 28), jnp.uint8)
    assert mlp.for_grad() is mlp


@pytest.mark.parametrize("shape", [(3, 24, 24, 5), (2, 7, 9, 4)])
def test_max_pool_2x2_matches_flax_values_and_gradient(shape):
    """The reshape form of the 2x2 pool against flax's reduce_window: the same values, and
    (inputs without ties) the same gradient; odd sizes drop the last row / column."""
    x = jax.random.normal(jax.random.key(3), shape)
    w = jax.random.normal(jax.random.key(4), max_pool_2x2(x).shape)
    ref = nn.max_pool(x, (2, 2), (2, 2))
    np.testing.assert_array_equal(np.asarray(max_pool_2x2(x)), np.asarray(ref))
    g = jax.grad(lambda a: jnp.sum(max_pool_2x2(a) * w))(x)
    g_ref = jax.grad(lambda a: jnp.sum(nn.max_pool(a, (2, 2), (2, 2)) * w))(x)
    np.testing.assert_allclose(np.asarray(g), np.asarray(g_ref), rtol=0, atol=0)
    # every window sends its gradient to exactly one element (no ties in normal draws)
    assert int(jnp.sum(g != 0)) == w.size
