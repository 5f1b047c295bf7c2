"""The text pipeline of ``imdb_reviews``: tokens, a deterministic vocabulary, front padding."""

from __future__ import annotations

import numpy as np
import pytest

from bnn_ppl.data.text import OOV, PAD, build_vocabulary, encode, tokenise


def test_tokenise_lowercases_drops_markup_and_keeps_contractions():
    assert tokenise(b"It's GREAT.<br/>Really<BR />great!") == ["it's", "great", "really", "great"]
    assert tokenise("") == []


def test_vocabulary_is_by_frequency_then_alphabetical_and_reserves_two_ids():
    texts = ["b a c", "a b", "a d"]
    assert build_vocabulary(texts, size=4) == {"a": 2, "b": 3}
    assert build_vocabulary(texts, size=100) == {"a": 2, "b": 3, "c": 4, "d": 5}
    with pytest.raises(ValueError, match="vocab_size must be an integer >= 3"):
        build_vocabulary(texts, size=2)


def test_encode_pads_and_truncates_at_the_front():
    vocab = {"a": 2, "b": 3}
    ids = encode(["a", "a b z b a", ""], vocab, max_len=3)
    assert ids.dtype == np.int32 and ids.shape == (3, 3)
    np.testing.assert_array_equal(ids, [[PAD, PAD, 2], [OOV, 3, 2], [PAD, PAD, PAD]])
    assert encode([], vocab, max_len=4).shape == (0, 4)
    with pytest.raises(ValueError, match="max_len must be an integer >= 1"):
        encode(["a"], vocab, max_len=0)
