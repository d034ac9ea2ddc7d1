"""PyTorch peers of a FedAvg round of an LSTM over token ids (`text_round_peer.py`).

The workload is ours to the operation: the cohort drawn uniformly without replacement;
each client starts from the global model and runs tau SGD steps on minibatches of b rows
drawn uniformly with replacement from its own rows; the model is the run's `lstm` or
`char_lstm` (`fedjax_appeal/core/sequence.py`: embedding, stacked LSTM layers with
forget-gate bias +1, tanh after each layer for `char_lstm`, then the classifier head at the
last real token or the next-token head at every position); the loss is the mean
cross-entropy over the sequences, or over the non-PAD targets of the batch; the new global
model is the n_k-weighted average of the clients' models. Tensors stay in memory for the
whole run; intra-op threads are set per variant (`threads`).

Variants (`VARIANTS`):

  * ``loop``: the program most PyTorch FL code is: one `nn.Module` (`nn.Embedding`,
    `nn.LSTM`, `nn.Linear`) per client slot, the global weights copied in with
    `load_state_dict`, `torch.optim.SGD`; `nn.LSTM` runs PyTorch's fused CPU LSTM kernel.
  * ``batched``: the cohort at once, as a PyTorch user writes it for speed: the clients'
    weights stacked on a leading axis ([m, d_in, 4H], ...), the input projection of every
    position as one `torch.bmm`, the recurrence as one `torch.baddbmm` per position for all
    clients, autograd for the backward pass, the SGD step in place on the stacked weights.

`check()` runs both variants' forward passes on the same weights and compares them
(`python benchmarks/torch_text_peer.py --check`).

PyTorch is a benchmark-only dependency (`pip install torch`), never one of the library.
"""

from __future__ import annotations

import os

import numpy as np

VARIANTS = ("loop", "batched")
LABELS = {"loop": "torch loop (nn.LSTM per client)",
          "batched": "torch batched cohort (bmm LSTM, autograd)"}


def arch_of(module) -> dict:
    """The architecture of one of our `SeqLSTM` modules, as plain numbers."""
    return {"vocab": int(module.vocab_size), "embed": int(module.embed),
            "hidden": int(module.hidden), "layers": int(module.layers), "fc": int(module.fc),
            "tanh": bool(module.tanh), "per_position": bool(module.per_position),
            "classes": int(module.num_classes)}


def _net(a: dict):
    import torch
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(a["vocab"], a["embed"])
            if a["tanh"]:  # tanh between layers: one nn.LSTM per layer
                self.lstm = nn.ModuleList(
                    [nn.LSTM(a["embed"] if i == 0 else a["hidden"], a["hidden"],
                             batch_first=True) for i in range(a["layers"])])
            else:
                self.lstm = nn.ModuleList([nn.LSTM(a["embed"], a["hidden"], a["layers"],
                                                   batch_first=True)])
            head_in = a["hidden"]
            self.fc = None
            if a["fc"] and not a["per_position"]:
                self.fc = nn.Linear(a["hidden"], a["fc"])
                head_in = a["fc"]
            self.out = nn.Linear(head_in, a["classes"])

        def forward(self, x):
            h = self.emb(x)
            for layer in self.lstm:
                h, _ = layer(h)
                if a["tanh"]:
                    h = torch.tanh(h)
            if a["per_position"]:
                return self.out(h)
            last = ((x != 0).sum(1) - 1).clamp(min=0)
            h = h[torch.arange(x.shape[0]), last]
            if self.fc is not None:
                h = self.fc(h)
            return self.out(h)

    return Net()


def _loss(a: dict, logits, y):
    import torch.nn.functional as F  # noqa: N812 - PyTorch's own convention

    if a["per_position"]:
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                               ignore_index=0)
    return F.cross_entropy(logits, y)


def _stacked_from(net, a: dict, m: int) -> dict:
    """The weights of `net` as the batched variant's stacked tensors, repeated m times
    (forget-gate bias folded as +1 in the cell, as nn.LSTM's is learned: here b_f - 1)."""
    import torch

    def rep(t):
        return t.detach().unsqueeze(0).repeat(m, *([1] * t.dim())).contiguous()

    p = {"emb": rep(net.emb.weight)}
    for i in range(a["layers"]):
        mod, j = (net.lstm[i], 0) if a["tanh"] else (net.lstm[0], i)
        wi, wh = getattr(mod, f"weight_ih_l{j}"), getattr(mod, f"weight_hh_l{j}")
        b = getattr(mod, f"bias_ih_l{j}") + getattr(mod, f"bias_hh_l{j}")
        # torch gate order i, f, g, o -> ours i, g, f, o; our cell adds +1 to f
        order = torch.cat([torch.arange(0, 1), torch.arange(2, 3), torch.arange(1, 2),
                           torch.arange(3, 4)])
        h = a["hidden"]
        idx = (order[:, None] * h + torch.arange(h)[None]).reshape(-1)
        bb = b[idx].clone()
        bb[2 * h:3 * h] -= 1.0
        p[f"wi{i}"], p[f"wh{i}"] = rep(wi[idx].t()), rep(wh[idx].t())
        p[f"b{i}"] = rep(bb[None])
    if net.fc is not None:
        p["fc_w"], p["fc_b"] = rep(net.fc.weight.t()), rep(net.fc.bias[None])
    p["out_w"], p["out_b"] = rep(net.out.weight.t()), rep(net.out.bias[None])
    return p


def _batched_forward(a: dict, p: dict, x):
    """Logits of m clients at once: x [m, B, T] -> [m, B, C] or [m, B, T, C]."""
    import torch

    m, bsz, t = x.shape
    h = a["hidden"]
    e = p["emb"][torch.arange(m)[:, None, None], x]  # [m, B, T, E]
    for i in range(a["layers"]):
        xp = torch.baddbmm(p[f"b{i}"], e.reshape(m, bsz * t, -1), p[f"wi{i}"])
        xp = xp.reshape(m, bsz, t, 4 * h)
        hh = x.new_zeros((m, bsz, h), dtype=torch.float32)
        c = torch.zeros_like(hh)
        outs = []
        for s in range(t):
            z = torch.baddbmm(xp[:, :, s], hh, p[f"wh{i}"])
            gi, gg, gf, go = z.chunk(4, dim=-1)
            c = torch.sigmoid(gf + 1.0) * c + torch.sigmoid(gi) * torch.tanh(gg)
            hh = torch.sigmoid(go) * torch.tanh(c)
            outs.append(hh)
        e = torch.stack(outs, 2)
        if a["tanh"]:
            e = torch.tanh(e)
    if a["per_position"]:
        return torch.baddbmm(p["out_b"], e.reshape(m, bsz * t, h),
                             p["out_w"]).reshape(m, bsz, t, -1)
    last = ((x != 0).sum(-1) - 1).clamp(min=0)  # [m, B]
    e = e[torch.arange(m)[:, None], torch.arange(bsz)[None], last]  # [m, B, H]
    if "fc_w" in p:
        e = torch.baddbmm(p["fc_b"], e, p["fc_w"])
    return torch.baddbmm(p["out_b"], e, p["out_w"])


def make_torch_text_round(data, cfg, hp, arch: dict, variant: str = "batched",
                          threads: int | None = None):
    """One FedAvg round of a PyTorch variant, as a callable that blocks until it is done.

    Args:
      data: the `FederatedData` whose `train` split the clients train on.
      cfg: the run's `RunConfig` (cohort, local_steps, batch_size, seed).
      hp: `HParams` (client_lr).
      arch: `arch_of(model.module)`.
      variant: one of `VARIANTS`.
      threads: intra-op threads (default: all cores).
    """
    import torch

    if variant not in VARIANTS:
        raise ValueError(f"unknown torch variant {variant!r}; choose from {VARIANTS}")
    torch.set_num_threads(threads or os.cpu_count() or 1)
    torch.manual_seed(cfg.seed)
    tr = data.train
    x_all = torch.as_tensor(np.array(tr.x, dtype=np.int64))
    y_all = torch.as_tensor(np.array(tr.y, dtype=np.int64))
    offset_np, count_np = np.array(tr.offset), np.array(tr.count)
    m, tau, b, lr = cfg.cohort, cfg.local_steps, cfg.batch_size, float(hp.client_lr)
    rng = np.random.default_rng(cfg.seed)
    global_net = _net(arch)

    if variant == "loop":
        client = _net(arch)
        client.train()

        def one_round():
            cohort = rng.choice(tr.num_clients, m, replace=False)
            gstate = {k: v.clone() for k, v in global_net.state_dict().items()}
            acc = {k: torch.zeros_like(v) for k, v in gstate.items()}
            tot = float(count_np[cohort].sum())
            for k in cohort:
                client.load_state_dict(gstate)
                opt = torch.optim.SGD(client.parameters(), lr=lr)
                for _ in range(tau):
                    idx = int(offset_np[k]) + torch.randint(int(count_np[k]), (b,))
                    opt.zero_grad(set_to_none=True)
                    _loss(arch, client(x_all[idx]), y_all[idx]).backward()
                    opt.step()
                w = float(count_np[k]) / tot
                with torch.no_grad():
                    for name, v in client.state_dict().items():
                        acc[name].add_(v, alpha=w)
            global_net.load_state_dict(acc)

        return one_round

    offset = torch.as_tensor(offset_np, dtype=torch.int64)
    count = torch.as_tensor(count_np, dtype=torch.int64)
    g = _stacked_from(global_net, arch, 1)
    g = {k: v[0] for k, v in g.items()}

    def client_losses(p, x, y):
        logits = _batched_forward(arch, p, x)  # [m, B, (T,) C]
        if arch["per_position"]:
            xent = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                reduction="none").reshape(y.shape)
            mask = (y != 0).float()
            per = (xent * mask).sum((1, 2)) / mask.sum((1, 2)).clamp(min=1.0)
        else:
            per = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                reduction="none").reshape(y.shape).mean(1)
        return per.sum()  # the clients' losses are independent: one backward for all

    def one_round():
        cohort = torch.as_tensor(rng.choice(tr.num_clients, m, replace=False))
        off, cnt = offset[cohort][:, None], count[cohort][:, None]
        p = {k: v.unsqueeze(0).repeat(m, *([1] * v.dim())).requires_grad_(True)
             for k, v in g.items()}
        for _ in range(tau):
            idx = off + (torch.rand(m, b) * cnt).long()
            grads = torch.autograd.grad(client_losses(p, x_all[idx], y_all[idx]),
                                        list(p.values()))
            with torch.no_grad():
                for v, gr in zip(p.values(), grads, strict=True):
                    v.sub_(gr, alpha=lr)
        w = cnt[:, 0].to(torch.float32)
        w = w / w.sum()
        with torch.no_grad():
            for k in g:
                g[k] = torch.tensordot(w, p[k], dims=1)

    return one_round


def check(arch: dict | None = None, seed: int = 0) -> float:
    """Largest |difference| of the two variants' logits on the same weights and tokens."""
    import torch

    torch.manual_seed(seed)
    arch = arch or {"vocab": 30, "embed": 8, "hidden": 16, "layers": 2, "fc": 12,
                    "tanh": False, "per_position": False, "classes": 3}
    worst = 0.0
    for a in (arch, {**arch, "tanh": True, "per_position": True, "fc": 0,
                     "classes": arch["vocab"]}):
        net = _net(a)
        x = torch.randint(1, a["vocab"], (4, 7))
        x[1, 4:] = 0  # padded rows
        x[2, 1:] = 0
        ref = net(x)
        got = _batched_forward(a, _stacked_from(net, a, 2), torch.stack([x, x]))[1]
        worst = max(worst, float((ref - got).abs().max().detach()))
    return worst


if __name__ == "__main__":
    import sys

    if "--check" in sys.argv:
        err = check()
        print(f"batched forward vs nn.LSTM forward: max |difference| {err:.2e}")
        sys.exit(0 if err < 1e-4 else 1)
