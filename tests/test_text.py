"""Token data (data/text.py): the tokenizer, FedJAX's stream preprocessing, a vocabulary
from the seen clients' train text only, baselines, and the Sent140 tasks end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedjax_appeal.core.config import RunConfig
from fedjax_appeal.core.sequence import BOS, EOS, PAD
from fedjax_appeal.data import data_options, load_federated
from fedjax_appeal.data.text import (
    TextDataset,
    Tokenizer,
    build_text_federated,
    encode_rows,
    split_words,
    stream_rows,
)
from fedjax_appeal.evaluate.text_baselines import text_baselines


def test_tokenizer_layout_counts_and_json(tmp_path):
    tok = Tokenizer.build(["abca", "bad", "zz"], "chars", min_count=2)
    assert tok.vocab == ("a", "b", "z")  # a x3, b x2, z x2 (first seen first); c, d once
    assert tok.size == 7 and tok.oov == 6  # pad, bos, eos, a, b, z, oov
    assert tok.encode("abcz") == [3, 4, 6, 5]
    assert tok.decode([1, 3, 4, 6, 5, 2, 0]) == "ab?z"  # specials left out, OOV as ?
    assert Tokenizer.build(["abca", "bad", "zz"], "chars", max_vocab=1).vocab == ("a",)
    tok.save(tmp_path / "t.json")
    assert Tokenizer.load(tmp_path / "t.json") == tok
    meta = json.loads((tmp_path / "t.json").read_text())
    assert meta["ids"] == {"pad": 0, "bos": 1, "eos": 2, "first_unit": 3, "oov": 6}


def test_words_as_leaf_splits_them():
    assert split_words("Hi, it's GREAT!! ok?") == ["hi", ",", "it's", "great", "!", "!",
                                                   "ok", "?"]
    tok = Tokenizer.build(["a b", "a c b"], "words", min_count=2)
    assert tok.vocab == ("a", "b")
    np.testing.assert_array_equal(encode_rows(tok, ["a c b a", "b"], 3),
                                  [[3, 5, 4], [4, PAD, PAD]])  # c is OOV (id 5), cut at 3


def test_stream_rows_as_fedjax_shakespeare():
    # fedjax.datasets.shakespeare.preprocess_client's example: [b'ABCD', b'E'], length 3
    tok = Tokenizer("chars", tuple("ABCDE"))
    a, b, c, d, e = (tok.encode(ch)[0] for ch in "ABCDE")
    x, y = stream_rows(tok, ["ABCD", "E"], 3)
    np.testing.assert_array_equal(x, [[BOS, a, b], [c, d, EOS], [BOS, e, PAD]])
    np.testing.assert_array_equal(y, [[a, b, c], [d, EOS, BOS], [e, EOS, PAD]])


def _pool(kind):
    texts = np.array(["aaa bbb", "aaa ccc", "aaa bbb", "ddd", "eee aaa", "aaa fff", "aaa",
                      "ggg"])
    return TextDataset("toy", texts, np.array([0, 1, 0, 1, 1, 0, 1, 0]), 2,
                       groups=np.array([0, 0, 0, 0, 1, 1, 1, 1]), scale=1.0, kind=kind)


def test_vocabulary_comes_from_the_seen_clients_train_rows_only():
    ds = _pool("words")
    seen, unseen = [np.arange(4)], [np.arange(4, 8)]
    opts = data_options(RunConfig(dataset="sent140_words", train_fraction=0.5, clients=1,
                                  unseen_clients=1, vocab_min_count=1))
    rng = np.random.default_rng(0)
    fd, out = build_text_federated(ds, seen, unseen, opts, rng)
    tr = np.random.default_rng(0).permutation(np.arange(4))[:2]  # the same draw
    train_words = {w for i in tr for w in ds.x[i].split()}
    assert set(out.tokenizer.vocab) == train_words
    assert fd.vocab_size == out.tokenizer.size and fd.num_classes == 2
    assert fd.train.x.shape[1] == 25 and fd.train.y.ndim == 1
    # rows of the test split and of the unseen clients hold OOV ids for unseen words
    assert (np.asarray(fd.unseen_train.x) == out.tokenizer.oov).any()


def test_char_task_targets_and_counts():
    ds = _pool("chars")
    opts = data_options(RunConfig(dataset="sent140_chars", train_fraction=0.5, clients=2,
                                  unseen_clients=0, seq_len=5, vocab_min_count=1))
    fd, out = build_text_federated(ds, [np.arange(4), np.arange(4, 8)], [], opts,
                                   np.random.default_rng(1))
    x, y = np.asarray(fd.train.x), np.asarray(fd.train.y)
    assert x.shape[1] == y.shape[1] == 5 and fd.num_classes == out.tokenizer.size
    assert (x[:, 0] != PAD).all() and x[0, 0] == BOS
    inner = x[:, 1:] != PAD  # inside a row, each target is the next input
    np.testing.assert_array_equal(x[:, 1:][inner], y[:, :-1][inner])
    assert (y[x == PAD] == PAD).all()  # a padded input has no target
    tokens = np.asarray(fd.train.tokens)
    for k in range(2):
        o, c = int(fd.train.offset[k]), int(fd.train.count[k])
        yk = y[o:o + c]
        assert tokens[0, k] == (yk != PAD).sum() and tokens[1, k] == ((yk != PAD) &
                                                                      (yk != EOS)).sum()


def test_baselines_by_hand():
    ds = _pool("words")
    opts = data_options(RunConfig(dataset="sent140_words", train_fraction=0.5, clients=2,
                                  unseen_clients=0, vocab_min_count=1))
    fd, _ = build_text_federated(ds, [np.arange(4), np.arange(4, 8)], [], opts,
                                 np.random.default_rng(2))
    ytr, yte = np.asarray(fd.train.y), np.asarray(fd.test.y)
    major = np.bincount(ytr).argmax()
    b = text_baselines(fd)
    assert b["majority_class"] == major
    per = [np.mean(yte[int(fd.test.offset[k]):int(fd.test.offset[k] + fd.test.count[k])]
                   == major) for k in range(2)]
    assert b["majority_acc_seen"] == pytest.approx(np.mean(per))


@pytest.mark.data
def test_sent140_tasks_load_by_user():
    from conftest import shared_data_dir

    for name, t in (("sent140_words", 25), ("sent140_chars", 80)):
        cfg = RunConfig(dataset=name, data_dir=shared_data_dir(), partition="natural",
                        min_samples=10, clients=20, unseen_clients=5)
        fd, ds = load_federated(cfg)
        assert fd.num_clients == 20 and fd.num_unseen == 5 and fd.train.x.shape[1] == t
        assert ds.tokenizer.size == fd.vocab_size
        assert (fd.train.y.ndim == 2) == (name == "sent140_chars")
