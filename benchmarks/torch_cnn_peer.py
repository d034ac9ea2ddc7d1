"""The strongest PyTorch program for the CIFAR-10 `cnn` round: the cohort as one network.

The model is ours (`fedjax_appeal.core.models.CNN`, the MaxFL CIFAR-10 CNN): conv 5x5 with 6
channels, ReLU, 2x2 max-pool, conv 5x5 with 16 channels, ReLU, max-pool, then FC
[120, 100, 84, 50] with ReLU and the 10 logits. The workload is `gpu_round_throughput.py`'s:
each of the m clients of a uniform cohort starts from the global model and takes tau SGD
steps on b rows drawn with replacement from its own rows; the new global model is the
n_k-weighted average.

A PyTorch user who wants speed does not loop over clients. The cohort's weights are stacked,
and the cohort runs as one network:

  * the convolutions are grouped convolutions (`groups=m`): client k's input channels meet
    only client k's filters;
  * the dense layers are one `baddbmm` each;
  * the gradient comes from one `torch.autograd.grad` of the sum of the clients' mean
    losses (each client's weights get their own gradient);
  * the update is in place.

With `graph=True` the tau local steps are captured once in a CUDA graph and replayed every
round (CUDA only).

`check_cnn_gradients()` checks the stacked program against each client's own network
(`python benchmarks/torch_cnn_peer.py --check`). PyTorch is a benchmark-only dependency.
"""

from __future__ import annotations

import numpy as np

CONV = ((3, 6), (6, 16))  # (in, out) channels of the two 5x5 convolutions
FC = (400, 120, 100, 84, 50)  # 16 x 5 x 5 features, then the hidden widths


def stacked_params(m: int, classes: int, device, gen=None):
    """Freshly initialised stacked parameters: conv weights [m, out, in, 5, 5] and biases
    [m, out], dense weights [m, d_in, d_out] and biases [m, d_out] (PyTorch's default
    uniform init, the same for every client)."""
    import torch

    def uniform(shape, fan_in):
        bound = 1.0 / np.sqrt(fan_in)
        return (torch.rand(*shape, generator=gen) * 2 - 1) * bound

    convs = [(uniform((1, o, i, 5, 5), i * 25), uniform((1, o), i * 25)) for i, o in CONV]
    dims = (*FC, classes)
    dense = [(uniform((1, a, c), a), uniform((1, c), a)) for a, c in zip(dims, dims[1:],
                                                                        strict=False)]
    return [t.repeat(m, *([1] * (t.dim() - 1))).to(device) for pair in [*convs, *dense]
            for t in pair]


def forward(params, x):
    """Logits [m, b, classes] of the m clients' networks on their rows x [m, b, 3, 32, 32]."""
    import torch.nn.functional as F  # noqa: N812 - PyTorch's own convention

    m, b = x.shape[:2]
    h = x.transpose(0, 1).reshape(b, m * 3, 32, 32)  # client k owns channels 3k..3k+2
    for (w, bias) in (params[0:2], params[2:4]):
        out, cin = w.shape[1], w.shape[2]
        h = F.conv2d(h, w.reshape(m * out, cin, 5, 5), bias.reshape(-1), groups=m)
        h = F.max_pool2d(F.relu(h), 2)
    h = h.reshape(b, m, -1).transpose(0, 1)  # [m, b, 400]
    dense = params[4:]
    for i in range(0, len(dense), 2):
        h = dense[i + 1].unsqueeze(1).baddbmm(h, dense[i])
        if i + 2 < len(dense):
            h = h.relu()
    return h


def local_steps(params, xs_fn, y_fn, tau: int, lr: float):
    """`tau` SGD steps of every client at once, in place (see the module docstring)."""
    import torch
    import torch.nn.functional as F  # noqa: N812 - PyTorch's own convention

    for _ in range(tau):
        x, y = xs_fn(), y_fn()
        logits = forward(params, x)
        m, b = y.shape
        loss = F.cross_entropy(logits.reshape(m * b, -1), y.reshape(-1), reduction="sum") / b
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g in zip(params, grads, strict=True):
                p.sub_(g, alpha=lr)


def make_cnn_round(data, ds, cfg, hp, device: str, graph: bool = False):
    """One FedAvg round of the stacked CNN as a no-argument callable (blocks until done)."""
    import torch
    from torch_peer import cuda_graph_of

    if graph and not str(device).startswith("cuda"):
        raise ValueError("graph=True captures a CUDA graph: it needs a CUDA device")
    torch.manual_seed(cfg.seed)
    tr = data.train
    x_all = torch.as_tensor(np.array(tr.x)).to(device)  # [N, 32, 32, 3] uint8
    y_all = torch.as_tensor(np.array(tr.y, dtype=np.int64)).to(device)
    offset = torch.as_tensor(np.array(tr.offset), dtype=torch.int64, device=device)
    count = torch.as_tensor(np.array(tr.count), dtype=torch.int64, device=device)
    mean = torch.as_tensor(np.asarray(ds.mean, np.float32), device=device).reshape(1, 1, -1)
    std = torch.as_tensor(np.asarray(ds.std, np.float32), device=device).reshape(1, 1, -1)
    scale = float(ds.scale)
    m, tau, b, lr = cfg.cohort, cfg.local_steps, cfg.batch_size, float(hp.client_lr)
    rng = np.random.default_rng(cfg.seed)
    glob = stacked_params(1, data.num_classes, device)
    params = [p.repeat(m, *([1] * (p.dim() - 1))).contiguous().requires_grad_(True)
              for p in glob]
    off = torch.zeros(m, 1, dtype=torch.int64, device=device)
    cnt = torch.ones(m, 1, dtype=torch.int64, device=device)
    box = {}

    def xs():
        box["idx"] = off + (torch.rand(m, b, device=device) * cnt).long()
        x = (x_all[box["idx"]].float() * scale - mean) / std  # [m, b, 32, 32, 3]
        return x.permute(0, 1, 4, 2, 3)

    def ys():
        return y_all[box["idx"]]

    def steps():
        local_steps(params, xs, ys, tau, lr)

    replay = cuda_graph_of(steps) if graph else None

    def one_round():
        cohort = torch.as_tensor(rng.choice(tr.num_clients, m, replace=False), device=device)
        with torch.no_grad():
            off.copy_(offset[cohort][:, None])
            cnt.copy_(count[cohort][:, None])
            for p, g in zip(params, glob, strict=True):
                p.copy_(g.expand_as(p))
        if replay is not None:
            replay.replay()
        else:
            steps()
        with torch.no_grad():
            w = cnt[:, 0].to(torch.float32)
            w = w / w.sum()
            for p, g in zip(params, glob, strict=True):
                g.copy_(torch.tensordot(w, p, dims=1).unsqueeze(0))
        if str(device).startswith("cuda"):
            torch.cuda.synchronize()

    one_round.params = glob  # the global model (checks)
    return one_round


def check_cnn_gradients(m: int = 3, b: int = 4, seed: int = 0) -> float:
    """The largest difference between one stacked step and each client's own network
    (its slice of the stacked weights) stepped alone; raises AssertionError beyond 1e-5."""
    import torch
    import torch.nn.functional as F  # noqa: N812 - PyTorch's own convention

    gen = torch.Generator().manual_seed(seed)
    params = [p.requires_grad_(True) for p in stacked_params(m, 10, "cpu", gen)]
    with torch.no_grad():  # make the clients differ
        for p in params:
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    x = torch.randn(m, b, 3, 32, 32, generator=gen)
    y = torch.randint(10, (m, b), generator=gen)
    lr = 0.1
    want = []
    for k in range(m):
        own = [p[k:k + 1].detach().clone().requires_grad_(True) for p in params]
        loss = F.cross_entropy(forward(own, x[k:k + 1])[0], y[k])
        grads = torch.autograd.grad(loss, own)
        want.append([(p - lr * g).detach() for p, g in zip(own, grads, strict=True)])
    local_steps(params, lambda: x, lambda: y, 1, lr)
    err = max(float((params[i][k:k + 1].detach() - want[k][i]).abs().max())
              for k in range(m) for i in range(len(params)))
    assert err < 1e-5, f"the stacked CNN step differs from the per-client one by {err}"
    return err


if __name__ == "__main__":
    import sys

    if "--check" in sys.argv:
        print(f"stacked CNN step vs each client alone: max difference "
              f"{check_cnn_gradients():.2e}")
