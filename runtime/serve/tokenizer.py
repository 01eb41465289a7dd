"""The server's tokenizer: a Hugging Face fast tokenizer (``tokenizer.json``), the built-in one of the
model's vocabulary by default (:mod:`runtime.serve.builtin_tokenizer`).

A handler tokenizes with :meth:`Tokenizer.encode_off_loop`: the library's batch call releases the
GIL, so in a worker thread a long prompt (40,000 tokens: about 0.2 s) leaves the event loop free to
accept and answer other requests - tokenized on the loop, it held every other client's request
before the server even read its headers."""

from __future__ import annotations

import asyncio
from pathlib import Path


class Tokenizer:
    """A Hugging Face fast tokenizer (``tokenizer.json``, in a model directory or given directly);
    ``about``: what ``GET /v1/models`` says of it (its file, and the name and ``HF_HOME`` a client
    loads the built-in one by)."""

    def __init__(self, path: str, about: dict[str, str] | None = None) -> None:
        try:
            from tokenizers import Tokenizer as HfTokenizer
        except ImportError:
            raise ValueError("--tokenizer needs the tokenizers package (pip install tokenizers)") from None
        file = Path(path) / "tokenizer.json" if Path(path).is_dir() else Path(path)
        if not file.is_file():
            raise ValueError(f"--tokenizer: no tokenizer.json at {str(file)!r}")
        try:
            self._tok = HfTokenizer.from_file(str(file))
        except Exception as exc:          # noqa: BLE001 - the library's own errors vary; one line
            raise ValueError(f"--tokenizer: cannot read {str(file)!r}: {str(exc).splitlines()[0][:160]}") from None
        self.vocab_size = int(self._tok.get_vocab_size())
        self.about = {"path": str(file.resolve()), **(about or {})}
        # Without offsets where the library has it (tokenizers >= 0.21): the ids are the same, sooner.
        self._batch = getattr(self._tok, "encode_batch_fast", self._tok.encode_batch)

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text).ids)

    async def encode_off_loop(self, text: str) -> list[int]:
        """:meth:`encode` in a worker thread, the GIL released while it runs."""
        [encoding] = await asyncio.to_thread(self._batch, [text])
        return list(encoding.ids)

    def decode(self, ids: list[int]) -> str:
        return str(self._tok.decode(ids))


def load_tokenizer(setting: str | None, vocab_size: int) -> Tokenizer | None:
    """``--tokenizer``: unset, the built-in one for the model's vocabulary
    (:mod:`runtime.serve.builtin_tokenizer`); ``none``, none (token ids only); else a path."""
    if setting == "none":
        return None
    if setting:
        return Tokenizer(setting)
    from wavepp.runtime.serve.builtin_tokenizer import ensure
    built = ensure(vocab_size)
    return Tokenizer(str(built.file), {"name": built.name, "hf_home": str(built.hf_home)})
