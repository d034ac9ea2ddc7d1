"""Token data: tokenizers built from the training clients' text, and the two language tasks
of the Sent140 tweets (`sent140_subset.npz`, one client per user).

Tasks (`--dataset`):

  * `sent140_words`: Sent140 as LEAF sets it up (Caldas et al. 2018): the tweet's first
    `--seq-len` (default 25) words, split by LEAF's `split_line` (`[\\w']+|[.,!?;]`, here
    on lower-cased text), one sentiment label (0/1) per tweet; LEAF's model is the
    `lstm`. LEAF's vocabulary is GloVe's; here it is the training clients' own words.
  * `sent140_chars`: next-character prediction on each user's tweets, the shape of the
    Shakespeare task as FedJAX preprocesses it (`fedjax.datasets.shakespeare.
    preprocess_client`): a client's tweets, each wrapped in BOS ... EOS, are joined into
    one stream and cut into rows of `--seq-len` (default 80) inputs with the next token as
    each position's target (the last row padded); model `char_lstm` (FedJAX's Shakespeare
    LSTM).

Every client's tweets are split into train and test rows first (`--train-fraction`, whole
tweets); the tokenizer is then built from the seen clients' train tweets only, so no test
or unseen text shapes the vocabulary, and written with the run (`tokenizer.json`). Ids
follow one layout (`core.sequence`): 0 PAD, 1 BOS, 2 EOS, the vocabulary from id 3 in
order of decreasing training count, and OOV last. The vocabulary keeps the units
(characters or words) seen at least `--vocab-min-count` times in training text, the
`--max-vocab` most frequent of them (default 86 characters, the size of FedJAX's
Shakespeare vocabulary, or 10,000 words, FedJAX's Stack Overflow vocabulary).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from ..core.arrays import ClientArrays, FederatedData, on_device
from ..core.config import ConfigError, Options
from ..core.fields import component, option
from ..core.sequence import BOS, EOS, PAD
from . import partition
from .pool import npz_file, register_dataset
from .sources import Dataset, data_dir, read_npz

TASKS = {"sent140_words": "words", "sent140_chars": "chars"}  # dataset -> tokenizer kind
SEQ_LEN = {"words": 25, "chars": 80}  # LEAF's Sent140 max_words; FedJAX's sequence_length
MAX_VOCAB = {"words": 10_000, "chars": 86}
TOKENIZER_FILE = "tokenizer.json"

TOKEN_TASK = component("dataset", *TASKS)
option("seq_len", 0, "token tasks: tokens per row (0 = the task's: 25 words as LEAF's Sent140, "
       "80 characters as FedJAX's Shakespeare)", applies=TOKEN_TASK, group="data", ge=0,
       data=True, hint="0 = 25 words or 80 characters")
option("max_vocab", 0, "token tasks: the most frequent training units kept (0 = 10000 words / "
       "86 characters); the rest map to OOV", applies=TOKEN_TASK, group="data", ge=0,
       data=True)
option("vocab_min_count", 2, "token tasks: a unit enters the vocabulary when the training "
       "clients' train text holds it this many times", applies=TOKEN_TASK, group="data", ge=1,
       data=True)

_WORD_RE = re.compile(r"[\w']+|[.,!?;]")  # LEAF's language_utils.split_line
SPECIALS = ("<pad>", "<bos>", "<eos>")


def split_words(text: str) -> list[str]:
    """LEAF's Sent140 word split of the lower-cased text (words and . , ! ? ;)."""
    return _WORD_RE.findall(text.lower())


@dataclasses.dataclass(frozen=True)
class Tokenizer:
    """Characters or words to ids: 0 PAD, 1 BOS, 2 EOS, `vocab` from id 3, OOV last."""

    kind: str  # "chars" or "words"
    vocab: tuple[str, ...]

    @property
    def size(self) -> int:
        """Number of ids (specials, vocabulary and OOV)."""
        return len(self.vocab) + len(SPECIALS) + 1

    @property
    def oov(self) -> int:
        return self.size - 1

    def units(self, text: str) -> list[str]:
        return list(text) if self.kind == "chars" else split_words(text)

    def encode(self, text: str) -> list[int]:
        """The ids of `text`'s units (no BOS / EOS)."""
        index = self._index()
        return [index.get(u, self.oov) for u in self.units(text)]

    def decode(self, ids: Iterable[int]) -> str:
        """The text of `ids`: units joined (words by spaces), PAD, BOS and EOS left out,
        OOV as `?`."""
        first = len(SPECIALS)
        units = ["?" if i == self.oov else self.vocab[i - first]
                 for i in map(int, ids) if i >= first]
        return ("" if self.kind == "chars" else " ").join(units)

    def _index(self) -> dict[str, int]:
        cached = self.__dict__.get("_idx")
        if cached is None:
            cached = {u: i + len(SPECIALS) for i, u in enumerate(self.vocab)}
            object.__setattr__(self, "_idx", cached)
        return cached

    @classmethod
    def build(cls, texts: Iterable[str], kind: str, max_vocab: int = 0,
              min_count: int = 1) -> Tokenizer:
        """The `max_vocab` most frequent units of `texts` seen at least `min_count` times
        (ties in first-seen order; 0 = no cap)."""
        if kind not in SEQ_LEN:
            raise ConfigError(f"unknown tokenizer kind {kind!r}; choose chars or words")
        counts: Counter[str] = Counter()
        for t in texts:
            counts.update(list(t) if kind == "chars" else split_words(t))
        kept = [u for u, c in counts.most_common() if c >= min_count]
        return cls(kind, tuple(kept[:max_vocab] if max_vocab else kept))

    def to_json(self) -> dict:
        return {"format": "fedjax_appeal.tokenizer/1", "kind": self.kind,
                "ids": {"pad": PAD, "bos": BOS, "eos": EOS, "first_unit": len(SPECIALS),
                        "oov": self.oov},
                "size": self.size, "vocab": list(self.vocab)}

    @classmethod
    def from_json(cls, d: dict) -> Tokenizer:
        return cls(d["kind"], tuple(d["vocab"]))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), ensure_ascii=False, indent=0))

    @classmethod
    def load(cls, path: str | Path) -> Tokenizer:
        """The tokenizer a run wrote (`tokenizer.json` in its `--out`)."""
        return cls.from_json(json.loads(Path(path).read_text()))


def encode_rows(tok: Tokenizer, texts: Sequence[str], seq_len: int) -> np.ndarray:
    """[N, seq_len] int32: each text's first `seq_len` ids, PAD after (one row a text)."""
    out = np.full((len(texts), seq_len), PAD, np.int32)
    for i, t in enumerate(texts):
        ids = tok.encode(str(t))[:seq_len]
        out[i, :len(ids)] = ids
    return out


def stream_rows(tok: Tokenizer, texts: Sequence[str], seq_len: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) [R, seq_len] int32 of one client: its texts as BOS ids EOS, joined, cut into
    rows of inputs and next-token targets, the last row padded (FedJAX's Shakespeare
    `preprocess_client`)."""
    joined = np.concatenate([np.asarray([BOS, *tok.encode(str(t)), EOS], np.int32)
                             for t in texts])
    n = len(joined) - 1
    rows = -(-n // seq_len)
    x = np.full(rows * seq_len, PAD, np.int32)
    y = np.full(rows * seq_len, PAD, np.int32)
    x[:n], y[:n] = joined[:-1], joined[1:]
    return x.reshape(rows, seq_len), y.reshape(rows, seq_len)


@dataclasses.dataclass
class TextDataset(Dataset):
    """The pooled tweets of a token task (`x`: the texts), and after `build_text_federated`
    the run's tokenizer."""

    kind: str = "words"
    tokenizer: Tokenizer | None = None


def _load_tweets(name: str, opts: Options) -> TextDataset:
    if opts.label_flip_fraction > 0 and TASKS[name] == "chars":
        raise ConfigError(f"--label-flip-fraction flips class labels; {name} predicts the next "
                          "character: drop it")
    z = read_npz(data_dir(opts.data_dir or None) / "sent140_subset.npz",
                 "copy the data file again")
    return TextDataset(name, np.asarray(z["text"]), z["label"].astype(np.int64), 2,
                       groups=z["user"].astype(np.int64), scale=1.0, kind=TASKS[name])


SENT140_ROWS = npz_file("sent140_subset.npz", ("label",))


@register_dataset("sent140_words", classes=2, model="lstm", rows=SENT140_ROWS)
def load_sent140_words(opts: Options, rng: np.random.Generator) -> TextDataset:
    """Sent140 tweets for sentiment from word tokens (`sent140_subset.npz`)."""
    return _load_tweets("sent140_words", opts)


@register_dataset("sent140_chars", classes=2, model="char_lstm", rows=SENT140_ROWS)
def load_sent140_chars(opts: Options, rng: np.random.Generator) -> TextDataset:
    """Sent140 tweets for next-character prediction per user (`sent140_subset.npz`)."""
    return _load_tweets("sent140_chars", opts)


def is_text(ds: Dataset) -> bool:
    return isinstance(ds, TextDataset)


def _arrays(tok: Tokenizer, texts: np.ndarray, labels: np.ndarray, parts: list[np.ndarray],
            seq_len: int) -> ClientArrays:
    """The `ClientArrays` of clients whose rows are `parts` (indices into the texts)."""
    if tok.kind == "words":
        idx = np.concatenate(parts)
        x = encode_rows(tok, texts[idx], seq_len)
        starts = np.cumsum([0] + [len(p) for p in parts])
        return ClientArrays.from_indices(x, labels[idx], [np.arange(a, b) for a, b in
                                                          zip(starts[:-1], starts[1:],
                                                              strict=True)])
    xs, ys = zip(*(stream_rows(tok, texts[p], seq_len) for p in parts), strict=True)
    starts = np.cumsum([0] + [len(a) for a in xs])
    return ClientArrays.from_indices(np.concatenate(xs), np.concatenate(ys),
                                     [np.arange(a, b) for a, b in
                                      zip(starts[:-1], starts[1:], strict=True)])


def build_text_federated(ds: TextDataset, seen: list[np.ndarray], unseen: list[np.ndarray],
                         opts: Options, rng: np.random.Generator,
                         labels: np.ndarray | None = None, info: dict | None = None,
                         unseen_info: dict | None = None
                         ) -> tuple[FederatedData, TextDataset]:
    """Per-client train/test split of whole tweets (as `pool.build_federated`, same draws),
    the tokenizer from the seen clients' train tweets, then token `ClientArrays`.

    Returns the federation and `ds` with its tokenizer (written with the run).
    """
    y = ds.y if labels is None else labels
    seq_len = opts.seq_len or SEQ_LEN[ds.kind]
    tr, te = partition.train_test_split(seen, opts.train_fraction, rng)
    utr, ute = (partition.train_test_split(unseen, opts.train_fraction, rng) if unseen
                else ([], []))
    texts = ds.x
    tok = Tokenizer.build((str(texts[i]) for p in tr for i in p), ds.kind,
                          opts.max_vocab or MAX_VOCAB[ds.kind], opts.vocab_min_count)
    per_position = ds.kind == "chars"
    fd = dict(train=_arrays(tok, texts, y, tr, seq_len), test=_arrays(tok, texts, y, te, seq_len))
    if unseen:
        fd.update(unseen_train=_arrays(tok, texts, y, utr, seq_len),
                  unseen_test=_arrays(tok, texts, y, ute, seq_len))
    classes = tok.size if per_position else ds.num_classes
    out = FederatedData(**fd, info=on_device(info or {}), unseen_info=on_device(unseen_info or {}),
                        num_classes=classes, name=ds.name, vocab_size=tok.size)
    return out, dataclasses.replace(ds, tokenizer=tok, num_classes=classes)


def tokenizer_writers(dataset: Dataset | None) -> dict:
    """`run.report.write_outputs` writers of a token task's tokenizer (none otherwise)."""
    tok = getattr(dataset, "tokenizer", None)
    if tok is None:
        return {}
    return {TOKENIZER_FILE: lambda p: tok.save(p)}
