"""Chained block hashes (DESIGN §2): stable, chained, keyed by extra, full blocks only."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from array import array

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wavepp.runtime.kvcache.hashing import ROOT_HASH, block_hashes, random_tokens

B = 16


def _tokens(n: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(200_000) for _ in range(n)]


def test_stable_across_processes() -> None:
    """A fresh interpreter (own hash() salt) computes the very same hashes."""
    tokens = _tokens(5 * B + 3)
    code = (
        "import json, sys; from runtime.kvcache.hashing import block_hashes; "
        "t = json.loads(sys.argv[1]); "
        "print(json.dumps([block_hashes(t, 16), block_hashes(t, 16, extra=b'rev1')]))"
    )
    out = subprocess.run([sys.executable, "-c", code, json.dumps(tokens)], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONHASHSEED": "12345"})
    theirs = json.loads(out.stdout)
    assert theirs == [block_hashes(tokens, B), block_hashes(tokens, B, extra=b"rev1")]


def test_one_hash_per_full_block_and_partial_block_has_none() -> None:
    """len(result) == len(tokens) // B; the tokens of a trailing partial block do not matter."""
    tokens = _tokens(3 * B + B - 1)
    hashes = block_hashes(tokens, B)
    assert len(hashes) == 3
    assert block_hashes(tokens[: 3 * B], B) == hashes
    changed_tail = tokens[: 3 * B] + [t + 1 for t in tokens[3 * B :]]
    assert block_hashes(changed_tail, B) == hashes
    assert block_hashes(tokens[: B - 1], B) == []
    assert block_hashes([], B) == []


@given(st.integers(min_value=1, max_value=6), st.data())
def test_chained_change_propagates_forward_only(num_blocks: int, data: st.DataObject) -> None:
    """Changing one token of block i changes hashes i.. and leaves hashes < i untouched."""
    tokens = _tokens(num_blocks * B, seed=num_blocks)
    pos = data.draw(st.integers(min_value=0, max_value=len(tokens) - 1))
    changed = list(tokens)
    changed[pos] = (changed[pos] + 1) % 200_000
    before, after = block_hashes(tokens, B), block_hashes(changed, B)
    i = pos // B
    assert after[:i] == before[:i]
    assert all(a != b for a, b in zip(after[i:], before[i:], strict=True))


def test_same_block_at_different_position_hashes_differently() -> None:
    """A block's hash depends on its prefix: identical blocks after different prefixes differ."""
    block = _tokens(B, seed=1)
    a = block_hashes(_tokens(B, seed=2) + block, B)
    b = block_hashes(_tokens(B, seed=3) + block, B)
    assert a[1] != b[1]
    assert len({*block_hashes(block * 4, B)}) == 4      # repeated block, four distinct chained hashes


def test_extra_keys_separate_prompts() -> None:
    """Two prompts with the same tokens but different extra keys share no block hash."""
    tokens = _tokens(4 * B)
    plain = block_hashes(tokens, B)
    rev1 = block_hashes(tokens, B, extra=b"model-rev-1")
    rev2 = block_hashes(tokens, B, extra=b"model-rev-2")
    assert not set(plain) & set(rev1)
    assert not set(rev1) & set(rev2)
    assert block_hashes(tokens, B, extra=b"") == plain
    assert block_hashes(tokens, B, extra=b"model-rev-1") == rev1


def test_parent_continues_the_chain() -> None:
    """Hashing a suffix with parent = last prefix hash equals hashing the whole prompt."""
    prefix, suffix = _tokens(3 * B, seed=4), _tokens(2 * B + 5, seed=5)
    whole = block_hashes(prefix + suffix, B)
    head = block_hashes(prefix, B)
    assert head + block_hashes(suffix, B, parent=head[-1]) == whole
    assert block_hashes(prefix, B, parent=ROOT_HASH) == head
    assert block_hashes(prefix, B, parent=ROOT_HASH + 1) != head


def test_hashes_are_64_bit_and_accept_arrays() -> None:
    """Hashes are unsigned 64-bit ints; an array('I') gives the same result as a list."""
    tokens = _tokens(64 * B, seed=6)
    hashes = block_hashes(tokens, B)
    assert all(0 <= h < 1 << 64 for h in hashes)
    assert any(h >= 1 << 32 for h in hashes)         # the upper 32 bits are used
    assert len(set(hashes)) == len(hashes)
    assert block_hashes(array("I", tokens), B) == hashes


def test_block_size_changes_hashes() -> None:
    """The same tokens cut into different block sizes give unrelated hashes."""
    tokens = _tokens(4 * B)
    assert not set(block_hashes(tokens, B)) & set(block_hashes(tokens, 2 * B))


@pytest.mark.parametrize("block_size", [0, -1, -64])
def test_block_size_must_be_positive(block_size: int) -> None:
    """A non-positive block size is rejected with ValueError."""
    with pytest.raises(ValueError, match="block_size"):
        block_hashes(_tokens(8), block_size)


@given(st.integers(0, 2**32 - 1), st.integers(0, 3000), st.integers(1, 2**31))
def test_random_tokens_are_the_seeded_bytes_modulo_the_vocabulary(seed: int, n: int, vocab: int) -> None:
    """The workloads' tokens: 4 random bytes a token below the vocabulary, and the generator left where a
    Python loop over those bytes leaves it (a workload draws its next lengths from the same one)."""
    ours, loop = random.Random(seed), random.Random(seed)
    tokens = random_tokens(ours, n, vocab)
    assert tokens.typecode == "I"
    assert tokens == array("I", [t % vocab for t in array("I", loop.randbytes(4 * n))])
    assert ours.random() == loop.random()
