"""The built-in tokenizer (runtime/serve/builtin_tokenizer.py): a Hugging Face tokenizer.json whose
vocabulary is each model's, that round-trips text, is the same file when built twice, and loads by
name from its hub-cache layout offline, as a benchmark client loads it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from wavepp.runtime.engines.sim.profiles import MODELS
from wavepp.runtime.engines.torch.config import PROFILES
from wavepp.runtime.serve.builtin_tokenizer import END_OF_TEXT, ensure

TEXT = "def prefill(tokens):  # Ünïcode ✓, 中文, emoji 🙂, tabs\tand\nnew lines - the KV cache's blocks"


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("WAVEPP_CACHE", str(tmp_path))
    return tmp_path


def test_each_models_tokenizer_has_its_vocabulary_and_round_trips_text(cache: Path) -> None:
    vocabs = {cfg.vocab_size for cfg in PROFILES.values()} | {m.vocab_size for m in MODELS.values()}
    assert vocabs >= {32000, 128256, 154880, 200064}
    for vocab in sorted(vocabs):
        built = ensure(vocab)
        tok = Tokenizer.from_file(str(built.file))
        assert tok.get_vocab_size() == vocab, built.name
        ids = tok.encode(TEXT).ids
        assert tok.decode(ids) == TEXT and max(ids) < 8192 and len(ids) < len(TEXT.encode())  # merges learned
        assert tok.token_to_id(END_OF_TEXT) == 0
        assert tok.decode([vocab - 1]) == f"<|reserved_{vocab - 1}|>"      # every id decodes to text
        assert built.name == f"wavepp/bpe-{vocab}" and built.path.is_relative_to(cache / "hub")


def test_the_tokenizer_is_the_same_file_when_built_again(cache: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    first = ensure(32000)
    other = tmp_path_factory.mktemp("again")
    rebuilt = subprocess.run([sys.executable, "-c", "from wavepp.runtime.serve.builtin_tokenizer import ensure; "
                              "print(ensure(32000).file)"], env={**os.environ, "WAVEPP_CACHE": str(other)},
                             capture_output=True, text=True, timeout=120, check=True)
    again = Path(rebuilt.stdout.strip())
    assert again.parent.name == first.path.name                       # same digest: the same inputs
    assert again.read_bytes() == first.file.read_bytes()              # ... and the same file
    config = json.loads((first.path / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast" and "assistant:" in config["chat_template"]


def test_a_client_loads_it_by_name_offline_from_the_hub_cache(cache: Path) -> None:
    built = ensure(32000)
    code = ("from transformers import AutoTokenizer; import json, sys; t = AutoTokenizer.from_pretrained(sys.argv[1]); "
            "print(json.dumps([len(t), t.encode(sys.argv[2], add_special_tokens=False), t.apply_chat_template("
            "[{'role': 'user', 'content': 'hi'}], tokenize=False, add_generation_prompt=True)]))")
    out = subprocess.run([sys.executable, "-c", code, built.name, TEXT], capture_output=True, text=True, timeout=180,
                         env={**os.environ, "HF_HOME": str(built.hf_home), "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    size, ids, chat = json.loads(out.stdout.strip().splitlines()[-1])
    assert size == 32000 and ids == Tokenizer.from_file(str(built.file)).encode(TEXT).ids
    assert chat == "user: hi\nassistant:"           # the server's plain chat template (chat_routes.render_chat)


def test_a_vocabulary_smaller_than_the_learned_merges_is_refused(cache: Path) -> None:
    with pytest.raises(ValueError, match="--tokenizer PATH or --tokenizer none"):
        ensure(1000)


def test_a_cache_it_cannot_write_is_one_line_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("WAVEPP_CACHE", str(blocked / "cache"))
    with pytest.raises(ValueError, match="cannot write the built-in tokenizer under .*set WAVEPP_CACHE"):
        ensure(32000)
