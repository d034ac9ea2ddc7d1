"""Baselines of a token task, from the data alone (host side, once per run).

What a trained model must beat, counted as its own metrics are (`core.sequence`):

  * one label per sequence: the majority class of the seen clients' train rows, predicted
    for every row (`majority_acc_seen`: the mean over seen clients of each client's test
    accuracy, as `test_acc_seen`; `majority_acc_seen_pooled`: over all seen test rows).
  * one target per position: the unigram model of the seen clients' train targets. Its
    accuracy predicts the most frequent predictable token everywhere (`unigram_acc_seen`,
    `unigram_acc_seen_pooled`; PAD and EOS targets not counted, OOV counted as a miss);
    its loss is the cross-entropy of the add-one smoothed unigram distribution over the
    non-PAD test targets (`unigram_loss_seen`: mean over clients of their per-token loss;
    perplexity = exp).
"""

from __future__ import annotations

import numpy as np

from ..core.arrays import FederatedData
from ..core.sequence import BOS, EOS, PAD


def _per_client(arrays, values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """[M] sums of per-row values over each client's rows / sums of the weights."""
    owner = np.asarray(arrays.owner)
    m = arrays.num_clients
    num = np.bincount(owner, values, minlength=m)
    den = np.bincount(owner, weights, minlength=m)
    return num / np.maximum(den, 1.0)


def text_baselines(data: FederatedData) -> dict[str, float]:
    """The majority-class or unigram baseline of `data` on the seen clients' test split."""
    ytr, yte = np.asarray(data.train.y), np.asarray(data.test.y)
    if ytr.ndim == 1:
        major = int(np.bincount(ytr).argmax())
        hit = (yte == major).astype(np.float64)
        acc = _per_client(data.test, hit, np.ones_like(hit))
        return {"majority_class": major, "majority_acc_seen": float(acc.mean()),
                "majority_acc_seen_pooled": float(hit.mean())}
    v = data.vocab_size
    counts = np.bincount(ytr[ytr != PAD].ravel(), minlength=v).astype(np.float64)
    predictable = counts.copy()
    predictable[[PAD, BOS, EOS, v - 1]] = -1.0
    top = int(predictable.argmax())
    counted = (yte != PAD) & (yte != EOS)
    hit = ((yte == top) & counted).sum(1).astype(np.float64)
    acc = _per_client(data.test, hit, counted.sum(1).astype(np.float64))
    probs = (counts + 1.0) / (counts.sum() + v)
    probs[PAD] = 0.0
    probs /= probs.sum()
    nll = -np.log(np.where(yte != PAD, probs[yte], 1.0)).sum(1)
    loss = _per_client(data.test, nll, (yte != PAD).sum(1).astype(np.float64))
    return {"unigram_top_token": top, "unigram_acc_seen": float(acc.mean()),
            "unigram_acc_seen_pooled": float(hit.sum() / max(counted.sum(), 1)),
            "unigram_loss_seen": float(loss.mean()),
            "unigram_perplexity_seen": float(np.exp(loss.mean()))}
