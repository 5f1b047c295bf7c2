"""Tokenise, build a vocabulary and pad: the text pipeline of ``imdb_reviews``."""

# Notes:
#
# Pure Python and NumPy, so the pipeline is the same with or without tensorflow-datasets:
#
# * :func:`tokenise`: lower-case, HTML line breaks removed, words of letters and digits (with
#   an apostrophe suffix: ``"don't"`` is one token).
# * :func:`build_vocabulary`: the ``size - 2`` most frequent training tokens get ids ``2, 3,
#   ...`` (ties broken alphabetically, so it is deterministic); id 0 is padding, id 1 any
#   out-of-vocabulary token.
# * :func:`encode`: token ids, truncated and padded at the front to ``max_len`` (the layout of
#   Keras' ``pad_sequences`` defaults, used by Izmailov et al.'s CNN-LSTM on IMDB: the end of a
#   review, which usually carries the verdict, is kept).

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping

import numpy as np

from bnn_ppl.validation import InputValueError

__all__ = ["OOV", "PAD", "build_vocabulary", "encode", "tokenise"]

PAD = 0
"""Token id of padding."""
OOV = 1
"""Token id of any word outside the vocabulary."""

_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def _text(t: str | bytes) -> str:
    return t.decode("utf-8", errors="replace") if isinstance(t, bytes) else str(t)


def tokenise(text: str | bytes) -> list[str]:
    """Split a text into lower-case word tokens (see the module docstring).

    Example:
        >>> from bnn_ppl.data.text import build_vocabulary, encode, tokenise
        >>> tokenise("A fine film.<br /><br />I didn't like it")
        ['a', 'fine', 'film', 'i', "didn't", 'like', 'it']
        >>> vocab = build_vocabulary(["good film", "bad film"], size=4)
        >>> vocab
        {'film': 2, 'bad': 3}
        >>> encode(["good film", "film film film bad"], vocab, max_len=3).tolist()
        [[0, 1, 2], [2, 2, 3]]
    """
    return _TOKEN.findall(_BREAK.sub(" ", _text(text)).lower())


def build_vocabulary(texts: Iterable[str | bytes], size: int) -> dict[str, int]:
    """Map the ``size - 2`` most frequent tokens of ``texts`` to ids ``2 .. size - 1``.

    Ids 0 (:data:`PAD`) and 1 (:data:`OOV`) are reserved, so ids are in ``[0, size)``.
    """
    if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 3:
        raise InputValueError(
            f"vocab_size must be an integer >= 3 (ids 0 and 1 are padding and unknown "
            f"words), got {size!r}."
        )
    counts = Counter(token for text in texts for token in tokenise(text))
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[: int(size) - 2]
    return {token: i + 2 for i, (token, _) in enumerate(ranked)}


def encode(texts: Iterable[str | bytes], vocabulary: Mapping[str, int], max_len: int) -> np.ndarray:
    """Token ids of each text, ``(n, max_len)`` int32, truncated and padded at the front."""
    if isinstance(max_len, bool) or not isinstance(max_len, int | np.integer) or max_len < 1:
        raise InputValueError(f"max_len must be an integer >= 1, got {max_len!r}.")
    rows = []
    for text in texts:
        ids = [vocabulary.get(token, OOV) for token in tokenise(text)][-int(max_len) :]
        rows.append([PAD] * (int(max_len) - len(ids)) + ids)
    return np.asarray(rows, dtype=np.int32).reshape(len(rows), int(max_len))
