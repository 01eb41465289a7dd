"""Chained block hashes (DESIGN §2).

``H_i = blake2b(H_{i-1} || extra || tokens of block i)`` with ``H_{-1}`` a fixed seed. The
digest is 64 bits, computed with :mod:`hashlib` so it is identical in every process and on
every host (Python's ``hash()`` is salted per process and must never be used here).

Only *full* blocks get a hash: a partial last block is never shared, because its KV would
change as soon as a token is appended.
"""

from __future__ import annotations

import hashlib
import random
from array import array
from collections.abc import Sequence

import numpy as np

# H_{-1}: any fixed value works; it only has to be the same everywhere.
ROOT_HASH = 0x5741_5645_5050_0001  # "WAVEPP" + version 1

_DIGEST_BYTES = 8


def token_array(tokens: Sequence[int]) -> array[int]:
    """Tokens as a compact ``array('I')`` (4 bytes a token, little-endian on every host we run)."""
    if isinstance(tokens, array) and tokens.typecode == "I":
        return tokens
    return array("I", tokens)


def random_tokens(rng: random.Random, n: int, vocab_size: int) -> array[int]:
    """``n`` seeded token ids below ``vocab_size``: 4 random bytes a token (native order) taken modulo the
    vocabulary - the synthetic workloads' and traces' tokens. numpy does the modulo (a Python loop over a
    trace's 12M tokens took seconds of a replay); the values are the loop's to the last token."""
    raw = np.frombuffer(rng.randbytes(4 * n), dtype=np.uint32)
    out = array("I")
    out.frombytes((raw % np.uint32(vocab_size)).tobytes())     # uint32 % uint32: uint32
    return out


def block_hashes(
    tokens: Sequence[int],
    block_size: int,
    extra: bytes = b"",
    parent: int = ROOT_HASH,
) -> list[int]:
    """Hashes of every full block of ``tokens``; ``len(result) == len(tokens) // block_size``.

    ``extra`` carries what makes KV non-interchangeable (model revision, adapter, dtype);
    two prompts with different ``extra`` never share a block.
    """
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    data = token_array(tokens).tobytes()
    step = block_size * 4
    out: list[int] = []
    prev = parent
    blake2b = hashlib.blake2b
    for off in range(0, (len(data) // step) * step, step):
        h = blake2b(prev.to_bytes(_DIGEST_BYTES, "little"), digest_size=_DIGEST_BYTES)
        if extra:
            h.update(extra)
        h.update(data[off : off + step])
        prev = int.from_bytes(h.digest(), "little")
        out.append(prev)
    return out
