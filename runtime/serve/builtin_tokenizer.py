"""The tokenizer ``wavepp serve`` loads by default: a byte-level BPE in Hugging Face's ``tokenizer.json``
format, built here from text that ships with the package, its vocabulary exactly the model's.

Benchmark clients (aiperf, genai-bench, ``vllm bench serve``) make prompts of a set length with a
tokenizer and count the tokens of what comes back; the server must count the same. The models this
project runs have random weights (torch) or none (sim), so no published tokenizer is theirs: this one
is built on the machine, offline, by :func:`ensure` (``scripts/build_tokenizer.py`` builds every
model's):

* **merges**: a byte-level BPE (GPT-2's pre-tokenizer and decoder: any text encodes, nothing is
  unknown) of ``BASE_VOCAB`` tokens trained on the package's own source files (sorted by path: the
  same package gives the same tokenizer; ``<|endoftext|>`` is token 0);
* **vocabulary**: padded to the model's ``vocab_size`` with ``<|reserved_N|>`` entries no text
  encodes to (as Llama 3 reserves tokens), so every token id the model can produce decodes to text.

It is written in the Hugging Face hub's cache layout -
``<cache>/hub/models--wavepp--bpe-<vocab>/snapshots/<digest>/`` with ``tokenizer.json`` and
``tokenizer_config.json`` (``PreTrainedTokenizerFast``, the chat template of
:mod:`runtime.serve.chat_routes` in Jinja) and a ``config.json`` naming the vocabulary - so a
client loads it by name offline: ``HF_HOME=<cache> HF_HUB_OFFLINE=1 ... --tokenizer wavepp/bpe-<vocab>``. ``<cache>`` is
``$WAVEPP_CACHE`` or ``~/.cache/wavepp``; ``GET /v1/models`` names both."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

BASE_VOCAB = 8192                  # learned tokens (the smallest model's vocabulary is 32,000)
END_OF_TEXT = "<|endoftext|>"
REPO = "wavepp"                    # the hub name's owner: wavepp/bpe-<vocab>
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant:{% endif %}")


@dataclass(frozen=True, slots=True)
class BuiltinTokenizer:
    name: str          # the hub name a client gives (wavepp/bpe-<vocab>)
    path: Path         # the snapshot folder: tokenizer.json, tokenizer_config.json
    hf_home: Path      # what HF_HOME must be for a client to find it by name

    @property
    def file(self) -> Path:
        return self.path / "tokenizer.json"


def cache_root() -> Path:
    return Path(os.environ.get("WAVEPP_CACHE") or Path.home() / ".cache" / "wavepp")


def corpus() -> list[tuple[str, str]]:
    """The training text: every ``.py`` file of the installed package, as (path as the package lays it out,
    text), by path - ``runtime/loop.py`` wherever the build put ``wavepp.runtime``."""
    import importlib.util

    import wavepp
    roots = [("", Path(wavepp.__file__).parent)]
    for sub in wavepp.SUBPACKAGES:
        spec = importlib.util.find_spec(f"wavepp.{sub}")
        assert spec is not None and spec.submodule_search_locations, f"wavepp.{sub} is not installed"
        roots.append((f"{sub}/", Path(list(spec.submodule_search_locations)[0])))
    files = []
    for prefix, root in roots:
        for d, dirs, names in os.walk(root):
            if not prefix and Path(d) == root:        # an installed wheel nests the subpackages: walked apart
                dirs[:] = [x for x in dirs if x not in wavepp.SUBPACKAGES]
            files += [(prefix + Path(d, f).relative_to(root).as_posix(), Path(d, f))
                      for f in names if f.endswith(".py")]
    return [(rel, path.read_text(encoding="utf-8", errors="replace")) for rel, path in sorted(files)]


def ensure(vocab_size: int) -> BuiltinTokenizer:
    """The built-in tokenizer of a ``vocab_size`` model: built (a few seconds) unless the cache has it."""
    if vocab_size < BASE_VOCAB:
        raise ValueError(f"the built-in tokenizer needs a vocabulary of at least {BASE_VOCAB} tokens, the model "
                         f"has {vocab_size}: give --tokenizer PATH or --tokenizer none")
    import tokenizers
    texts = corpus()
    digest = hashlib.sha256(json.dumps([BASE_VOCAB, vocab_size, tokenizers.__version__, texts]).encode())
    name = f"bpe-{vocab_size}"
    repo = cache_root() / "hub" / f"models--{REPO}--{name}"
    snapshot = digest.hexdigest()[:40]
    path = repo / "snapshots" / snapshot
    try:
        if not (path / "tokenizer.json").is_file():
            _write(path, build([t for _, t in texts], vocab_size), vocab_size)
        _write_text(repo / "refs" / "main", snapshot)
    except OSError as exc:
        raise ValueError(f"cannot write the built-in tokenizer under {str(cache_root())!r}: "
                         f"{exc.strerror or exc} (set WAVEPP_CACHE, or give --tokenizer PATH or none)") from None
    return BuiltinTokenizer(f"{REPO}/{name}", path, cache_root())


def build(texts: list[str], vocab_size: int) -> str:
    """``tokenizer.json`` (text): BPE merges learned from ``texts``, the vocabulary padded to ``vocab_size``."""
    spec = json.loads(_trained(tuple(texts)))
    vocab: dict[str, int] = spec["model"]["vocab"]
    for i in range(len(vocab), vocab_size):
        vocab[f"<|reserved_{i}|>"] = i
    return json.dumps(spec, ensure_ascii=False)


@functools.lru_cache(maxsize=1)
def _trained(texts: tuple[str, ...]) -> str:
    """The BPE of ``BASE_VOCAB`` tokens learned from ``texts`` (once a process: every vocabulary pads it)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=BASE_VOCAB, special_tokens=[END_OF_TEXT], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return str(tok.to_str())


def _write(folder: Path, tokenizer_json: str, vocab_size: int) -> None:
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": END_OF_TEXT, "bos_token": None,
              "model_max_length": 1 << 30, "clean_up_tokenization_spaces": False, "chat_template": CHAT_TEMPLATE,
              "added_tokens_decoder": {"0": {"content": END_OF_TEXT, "special": True, "lstrip": False,
                                             "rstrip": False, "normalized": False, "single_word": False}}}
    _write_text(folder / "tokenizer_config.json", json.dumps(config, indent=1))
    # transformers' AutoTokenizer also reads the model's config: one that names the vocabulary, no weights.
    _write_text(folder / "config.json", json.dumps({"model_type": "llama", "vocab_size": vocab_size,
                                                    "eos_token_id": 0}, indent=1))
    _write_text(folder / "tokenizer.json", tokenizer_json)   # last: its presence says the folder is whole


def _write_text(path: Path, text: str) -> None:
    """Atomically (servers started side by side may build the same file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(tmp, 0o644)                # mkstemp's 0600 would hide it from a client run as another user
    os.replace(tmp, path)
