"""PyTorch peers for the FedAvg round benchmarks: the programs a PyTorch user would write.

Every variant runs the workload of `round_throughput.py` on the same client arrays: the
cohort drawn uniformly without replacement, each client starting from the global model and
running tau SGD steps on minibatches of b rows sampled uniformly with replacement from its
own rows (uint8 pixels normalised on the fly, as ours), dropout 0.2 after the first hidden
layer, and the n_k-weighted average of the clients' models as the new global model.
Tensors live on the device for the whole run and `torch.set_num_threads` is set to the
machine's core count.

Variants (`VARIANTS`):

  * ``loop``: one `nn.Module` per client slot; each client copies the global weights in by
    `load_state_dict`, trains with `torch.optim.SGD`, and its weights are accumulated into
    the weighted sum. The plain loop most PyTorch FL code uses.
  * ``func``: the same loop without modules' optimizer state: parameters in a dict,
    `torch.func.functional_call` + `torch.autograd.grad`, in-place SGD.
  * ``vmap``: the whole cohort at once, `torch.func.vmap(torch.func.grad(loss))` over a
    leading client axis of stacked parameters (dropout with `randomness="different"`); the
    closest PyTorch analogue of this project's round.
  * ``dataloader``: ``loop`` with a `DataLoader` per client (a `TensorDataset` of its rows
    and a `RandomSampler` with replacement of tau x b rows); reported as its own, labelled
    column, since the DataLoader's per-batch Python work is what it measures.
  * ``batched``: what a PyTorch user writes for speed: the cohort's weights stacked
    ([m, d_in, 64], ...), one batched matmul per layer (`torch.baddbmm`), the backward pass
    written out by hand (no autograd graph per step), and each weight updated inside the
    batched matmul that computes its gradient (`W.baddbmm_(a^T, g, alpha=-lr)`: the
    gradient of a weight is never stored); dropout masks drawn on the device.
  * ``graph``: ``batched`` with the tau local steps captured once in a CUDA graph
    (`torch.cuda.graph`) and replayed every round: one launch per round instead of one per
    kernel. CUDA only.

`check_batched_gradients()` checks the hand-written backward pass of ``batched`` against
autograd (`python benchmarks/torch_peer.py --check`).

PyTorch is a benchmark-only dependency (`pip install torch`), never one of the library.
"""

from __future__ import annotations

import os

import numpy as np

VARIANTS = ("loop", "func", "vmap", "dataloader", "batched", "graph")
LABELS = {"loop": "torch loop (load_state_dict)", "func": "torch loop (functional_call)",
          "vmap": "torch.func.vmap cohort", "dataloader": "torch loop + DataLoader",
          "batched": "torch batched weights (bmm, hand backward)",
          "graph": "torch batched weights + CUDA graph"}


def make_torch_round(data, ds, cfg, hp, device: str, variant: str = "loop",
                     threads: int | None = None):
    """One FedAvg round of a PyTorch variant, as a callable that blocks until it is done.

    Args:
      data: the `FederatedData` whose `train` split the clients train on.
      ds: its `Dataset` (normalisation constants `mean`, `std`, `scale`).
      cfg: the run's `RunConfig` (cohort, local_steps, batch_size, seed).
      hp: `HParams` (client_lr).
      repeats: timed rounds.
      device: "cpu" or "cuda".
      variant: one of `VARIANTS`.
      threads: intra-op threads (default: all cores).

    Returns:
      A no-argument function that runs one round (the global model persists between calls).
    """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F  # noqa: N812 - PyTorch's own convention

    if variant not in VARIANTS:
        raise ValueError(f"unknown torch variant {variant!r}; choose from {VARIANTS}")
    if variant == "graph" and not str(device).startswith("cuda"):
        raise ValueError("the torch variant 'graph' captures a CUDA graph: it needs a CUDA "
                         "device (use 'batched' on the CPU)")
    torch.set_num_threads(threads or os.cpu_count() or 1)
    torch.manual_seed(cfg.seed)
    tr = data.train
    x_all = torch.as_tensor(np.array(tr.x)).reshape(len(tr.y), -1).to(device)
    y_all = torch.as_tensor(np.array(tr.y, dtype=np.int64)).to(device)
    offset_np, count_np = np.array(tr.offset), np.array(tr.count)
    offset = torch.as_tensor(offset_np, dtype=torch.int64, device=device)
    count = torch.as_tensor(count_np, dtype=torch.int64, device=device)
    mean, std, scale = float(np.asarray(ds.mean)), float(np.asarray(ds.std)), float(ds.scale)
    d_in = x_all.shape[1]
    m, tau, b, lr = cfg.cohort, cfg.local_steps, cfg.batch_size, float(hp.client_lr)
    rng = np.random.default_rng(cfg.seed)

    def make():
        return nn.Sequential(nn.Linear(d_in, 64), nn.ReLU(), nn.Dropout(0.2),
                             nn.Linear(64, 30), nn.ReLU(), nn.Linear(30, 10)).to(device)

    def prep(idx):
        return (x_all[idx].float() * scale - mean) / std

    global_model = make()
    sync = torch.cuda.synchronize if device != "cpu" else (lambda: None)

    if variant in ("loop", "dataloader"):
        client = make()
        client.train()
        loaders = {}

        def batches(k):
            if variant == "loop":
                for _ in range(tau):
                    yield int(offset_np[k]) + torch.randint(int(count_np[k]), (b,), device=device)
                return
            if k not in loaders:
                rows = torch.arange(int(offset_np[k]), int(offset_np[k] + count_np[k]))
                dset = torch.utils.data.TensorDataset(rows)
                sampler = torch.utils.data.RandomSampler(dset, replacement=True,
                                                         num_samples=tau * b)
                loaders[k] = torch.utils.data.DataLoader(dset, batch_size=b, sampler=sampler)
            for (idx,) in loaders[k]:
                yield idx.to(device)

        def one_round():
            cohort = rng.choice(tr.num_clients, m, replace=False)
            gstate = {k: v.clone() for k, v in global_model.state_dict().items()}
            acc = {k: torch.zeros_like(v) for k, v in gstate.items()}
            tot = float(count_np[cohort].sum())
            for k in cohort:
                client.load_state_dict(gstate)
                opt = torch.optim.SGD(client.parameters(), lr=lr)
                for idx in batches(int(k)):
                    opt.zero_grad(set_to_none=True)
                    F.cross_entropy(client(prep(idx)), y_all[idx]).backward()
                    opt.step()
                w = float(count_np[k]) / tot
                with torch.no_grad():
                    for name, v in client.state_dict().items():
                        acc[name].add_(v, alpha=w)
            global_model.load_state_dict(acc)
            sync()

    elif variant == "func":
        from torch.func import functional_call

        global_model.train()
        names = [n for n, _ in global_model.named_parameters()]

        def one_round():
            cohort = rng.choice(tr.num_clients, m, replace=False)
            g = {n: p.detach() for n, p in global_model.named_parameters()}
            acc = {n: torch.zeros_like(v) for n, v in g.items()}
            tot = float(count_np[cohort].sum())
            for k in cohort:
                p = {n: v.clone().requires_grad_(True) for n, v in g.items()}
                for _ in range(tau):
                    idx = int(offset_np[k]) + torch.randint(int(count_np[k]), (b,), device=device)
                    loss = F.cross_entropy(functional_call(global_model, p, (prep(idx),)),
                                           y_all[idx])
                    grads = torch.autograd.grad(loss, [p[n] for n in names])
                    with torch.no_grad():
                        for n, gr in zip(names, grads, strict=True):
                            p[n].sub_(gr, alpha=lr)
                w = float(count_np[k]) / tot
                with torch.no_grad():
                    for n in names:
                        acc[n].add_(p[n], alpha=w)
            with torch.no_grad():
                for n, prm in global_model.named_parameters():
                    prm.copy_(acc[n])
            sync()

    elif variant in ("batched", "graph"):
        one_round = _batched_round(global_model, x_all, y_all, offset, count, count_np, prep,
                                   m, tau, b, lr, tr.num_clients, rng, device, sync,
                                   graph=variant == "graph")

    else:  # vmap
        from torch.func import functional_call, grad, vmap

        global_model.train()

        def loss_fn(p, x, y):
            return F.cross_entropy(functional_call(global_model, p, (x,)), y)

        cohort_grad = vmap(grad(loss_fn), randomness="different")

        def one_round():
            cohort_np = rng.choice(tr.num_clients, m, replace=False)
            cohort = torch.as_tensor(cohort_np, device=device)
            off, cnt = offset[cohort][:, None], count[cohort][:, None]
            with torch.no_grad():
                p = {n: v.detach().unsqueeze(0).repeat(m, *([1] * v.dim()))
                     for n, v in global_model.named_parameters()}
            for _ in range(tau):
                idx = off + (torch.rand(m, b, device=device) * cnt).long()
                grads = cohort_grad(p, prep(idx), y_all[idx])
                with torch.no_grad():
                    for n in p:
                        p[n].sub_(grads[n], alpha=lr)
            w = cnt[:, 0].to(torch.float32)
            w = w / w.sum()
            with torch.no_grad():
                for n, prm in global_model.named_parameters():
                    prm.copy_(torch.tensordot(w, p[n], dims=1))
            sync()

    one_round.model = global_model  # the global model the rounds train (checks)
    return one_round


def batched_sgd_steps(ws, bs, xs_fn, y_fn, tau: int, lr: float, drop: float = 0.2):
    """`tau` SGD steps of a cohort of MLPs with stacked weights, in place.

    ws, bs: the layers' weights [m, d_in, d_out] and biases [m, d_out] (updated in place);
    xs_fn(): the next minibatch's inputs [m, b, d_in] (float); y_fn(): its labels [m, b]
    (both called once per step, in that order). Each client's loss is the mean
    cross-entropy over its b rows; ReLU after every hidden layer, inverted dropout `drop`
    after the first. The backward pass is written out: g = softmax(z) - onehot(y) over b
    at the top, then per layer the bias gradient (sum over rows), the input gradient
    (g @ W^T, masked by the ReLU and the dropout) and the weight update as one batched
    matmul, W += -lr a^T g (`baddbmm_`), so no weight gradient is stored.
    """
    import torch
    import torch.nn.functional as F  # noqa: N812 - PyTorch's own convention

    n = len(ws)
    for _ in range(tau):
        x = xs_fn()
        y = y_fn()
        acts, masks = [x], []
        h = x
        for i in range(n):
            z = torch.baddbmm(bs[i].unsqueeze(1), h, ws[i])
            if i < n - 1:
                mask = z > 0
                if i == 0 and drop > 0:
                    mask = mask & (torch.rand_like(z) >= drop)
                    h = z * mask / (1.0 - drop)
                else:
                    h = z * mask
                masks.append(mask)
                acts.append(h)
            else:
                h = z
        g = torch.softmax(h, dim=-1)
        g = (g - F.one_hot(y, g.shape[-1]).to(g.dtype)) / g.shape[1]
        for i in reversed(range(n)):
            a = acts[i]
            if i > 0:
                gin = torch.bmm(g, ws[i].transpose(1, 2))
                scale = 1.0 / (1.0 - drop) if (i - 1 == 0 and drop > 0) else 1.0
                gin = gin * masks[i - 1] * scale
            bs[i].sub_(g.sum(dim=1), alpha=lr)
            ws[i].baddbmm_(a.transpose(1, 2), g, alpha=-lr)
            if i > 0:
                g = gin


def cuda_graph_of(steps):
    """`steps()` (no arguments, static tensors only) captured in a CUDA graph after two
    warm-up calls on a side stream, as PyTorch's documentation prescribes; replay it with
    `.replay()`."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            steps()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        steps()
    return graph


def _batched_round(global_model, x_all, y_all, offset, count, count_np, prep, m, tau, b, lr,
                   num_clients, rng, device, sync, graph: bool):
    """One round of the ``batched`` / ``graph`` variants (see the module docstring)."""
    import torch

    layers = [mod for mod in global_model if isinstance(mod, torch.nn.Linear)]
    # stacked [m, d_in, d_out] weights (nn.Linear keeps [d_out, d_in]) and [m, d_out] biases
    ws = [torch.empty(m, lay.in_features, lay.out_features, device=device) for lay in layers]
    bs = [torch.empty(m, lay.out_features, device=device) for lay in layers]
    off = torch.zeros(m, 1, dtype=torch.int64, device=device)
    cnt = torch.ones(m, 1, dtype=torch.int64, device=device)
    box = {}

    def xs():
        box["idx"] = off + (torch.rand(m, b, device=device) * cnt).long()
        return prep(box["idx"])

    def ys():
        return y_all[box["idx"]]

    def steps():
        with torch.no_grad():
            batched_sgd_steps(ws, bs, xs, ys, tau, lr)

    replay = cuda_graph_of(steps) if graph else None

    def one_round():
        cohort = torch.as_tensor(rng.choice(num_clients, m, replace=False), device=device)
        with torch.no_grad():
            off.copy_(offset[cohort][:, None])
            cnt.copy_(count[cohort][:, None])
            for w, bias, lay in zip(ws, bs, layers, strict=True):
                w.copy_(lay.weight.t().unsqueeze(0).expand_as(w))
                bias.copy_(lay.bias.unsqueeze(0).expand_as(bias))
        if replay is not None:
            replay.replay()
        else:
            steps()
        with torch.no_grad():
            wt = cnt[:, 0].to(torch.float32)
            wt = wt / wt.sum()
            for w, bias, lay in zip(ws, bs, layers, strict=True):
                lay.weight.copy_(torch.tensordot(wt, w, dims=1).t())
                lay.bias.copy_(torch.tensordot(wt, bias, dims=1))
        sync()

    return one_round


def check_batched_gradients(m: int = 3, b: int = 5, sizes=(12, 7, 6, 4), seed: int = 0
                            ) -> float:
    """The largest difference between one step of `batched_sgd_steps` (dropout off) and
    the same step with autograd's gradients; raises AssertionError beyond 1e-5."""
    import torch
    import torch.nn.functional as F  # noqa: N812 - PyTorch's own convention

    gen = torch.Generator().manual_seed(seed)
    ws = [torch.randn(m, a, c, generator=gen) * 0.3 for a, c in
          zip(sizes, sizes[1:], strict=False)]
    bs = [torch.randn(m, c, generator=gen) * 0.1 for c in sizes[1:]]
    x = torch.randn(m, b, sizes[0], generator=gen)
    y = torch.randint(sizes[-1], (m, b), generator=gen)
    lr = 0.1
    ref_w = [w.clone().requires_grad_(True) for w in ws]
    ref_b = [v.clone().requires_grad_(True) for v in bs]
    h = x
    for i, (w, v) in enumerate(zip(ref_w, ref_b, strict=True)):
        h = torch.baddbmm(v.unsqueeze(1), h, w)
        if i < len(ref_w) - 1:
            h = torch.relu(h)
    loss = F.cross_entropy(h.reshape(m * b, -1), y.reshape(-1), reduction="sum") / b
    grads = torch.autograd.grad(loss, [*ref_w, *ref_b])
    want = [p.detach() - lr * g for p, g in zip([*ref_w, *ref_b], grads, strict=True)]
    with torch.no_grad():
        batched_sgd_steps(ws, bs, lambda: x, lambda: y, 1, lr, drop=0.0)
    err = max(float((a - c).abs().max()) for a, c in zip([*ws, *bs], want, strict=True))
    assert err < 1e-5, f"batched backward differs from autograd by {err}"
    return err


def torch_round_times(data, ds, cfg, hp, repeats: int, device: str, variant: str = "loop",
                      threads: int | None = None):
    """Seconds of `repeats` rounds of `make_torch_round(...)` after one warm-up round.

    Returns:
      (list of seconds per round, torch version, threads used).
    """
    import time

    import torch

    one_round = make_torch_round(data, ds, cfg, hp, device, variant, threads)
    one_round()  # warm-up (allocator, lazy init)
    secs = []
    for _ in range(repeats):
        t = time.perf_counter()
        one_round()
        secs.append(time.perf_counter() - t)
    return secs, torch.__version__, torch.get_num_threads()


if __name__ == "__main__":
    import sys

    if "--check" in sys.argv:
        print(f"batched backward vs autograd: max difference {check_batched_gradients():.2e}")
