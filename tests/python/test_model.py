"""aqpim.Model: the runtime through Python, checked against the reference files of ../shared and
against the aqpim command itself (same numbers, same error messages)."""

import json
import re

import numpy as np
import pytest

import aqpim
from conftest import run_cli, shared_path

TEXT = " ".join(["the cat sat on the mat and the dog ran to the park"] * 40)


def test_tokenizer_and_greedy_generation_match_the_reference():
    model_dir = shared_path("models/austen-13m")
    ref = json.loads(shared_path("reference/austen-13m-prompt0-greedy.json").read_text())
    model = aqpim.Model(str(model_dir), n_threads=1)
    assert model.tokenize(ref["prompt"]) == ref["input_ids"]
    ids = json.loads(shared_path("reference/tokens/austen-13m.northanger-first64KB.ids").read_text())
    text = shared_path("reference/tokens/northanger-first64KB.txt").read_text(encoding="utf-8")
    assert model.tokenizer.encode(text, add_bos=False) == ids
    pieces = []
    r = model.generate(ref["prompt"], n_predict=32, temperature=0, on_piece=pieces.append)
    assert r.tokens == ref["greedy_ids"] and r.text == ref["greedy_text"] == "".join(pieces)
    assert r.n_prompt == len(ref["input_ids"]) and r.n_decode_steps == 31
    logits = model.logits(ref["input_ids"][:8])
    assert list(logits.argmax(-1)) == ref["top1_first8"]


@pytest.mark.parametrize("kv", ["f16", "q8_0", "pq:calib=64,window=16"])
def test_perplexity_is_exactly_the_commands(kv, synth_gguf, tmp_path):
    text_file = tmp_path / "text.txt"
    text_file.write_text(TEXT)
    model = aqpim.Model(str(synth_gguf), n_threads=1)
    r = model.perplexity(TEXT, n_ctx=128, kv=kv, max_chunks=3)
    status, out, err = run_cli("ppl", "-m", synth_gguf, "-f", text_file, "-c", 128, "--chunks", 3, "--kv", kv, "--json")
    assert status == 0, err
    cli = json.loads(out)
    assert (r.ppl, r.ppl_error, r.n_scored, r.n_chunks) == (cli["ppl"], cli["ppl_error"], cli["n_scored"], cli["n_chunks"])
    assert len(r.chunk_ppl) == 3 and r.chunk_ppl[-1] == r.ppl


@pytest.mark.parametrize("kv,tol", [("f32", 1e-5), ("pq:calib=64,window=16,page=32,refresh=64", 5e-4)])
def test_decoding_from_python_gives_the_prefills_logits(kv, tol, synth_gguf):
    model = aqpim.Model(str(synth_gguf), n_threads=1)
    ids = model.tokenize(TEXT)[:150]
    prefill = model.logits(ids, kv=kv)
    cache = model.new_cache(kv, context=150)
    model.logits(ids[:100], cache=cache)
    steps = [model.logits([t], cache=cache, last_only=True) for t in ids[100:]]
    # the cache answers every row as token-by-token decoding would (time consistency); the decode
    # matvec and the prefill GEMM round differently (PQ then codes a few rows differently)
    diff = np.abs(np.stack(steps) - prefill[100:]).max()
    print(f"{kv}: decode vs prefill logits, max abs difference {diff:.2e}")
    assert diff < tol
    wrong = model.logits(ids[:99] + ids[100:], kv=kv)[99:]  # the same tokens one position earlier
    assert np.abs(np.stack(steps) - wrong).max() > 10 * tol
    assert cache.n_tokens(0, 1) == 150


def test_generate_continues_a_cache_and_samples_by_seed(synth_gguf):
    model = aqpim.Model(str(synth_gguf), n_threads=1)
    a = model.generate("the cat", n_predict=12, temperature=0.9, seed=3, stop_at_eos=False)
    b = model.generate("the cat", n_predict=12, temperature=0.9, seed=3, stop_at_eos=False)
    assert a.tokens == b.tokens and len(a.tokens) == 12
    cache = model.new_cache("f16")
    model.generate("the cat", n_predict=4, temperature=0, cache=cache, stop_at_eos=False)
    assert cache.n_tokens() == len(model.tokenize("the cat")) + 3


def cli_error(*args):
    status, _, err = run_cli(*args)
    assert status == 1
    return re.search(r"aqpim: error: (.*)", err).group(1)


def test_errors_are_the_commands(synth_gguf, tmp_path):
    missing = tmp_path / "nothing.gguf"
    with pytest.raises(aqpim.Error) as e:
        aqpim.Model(str(missing))
    assert str(e.value) == cli_error("info", "-m", missing)
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF" + b"\xff" * 60)
    with pytest.raises(aqpim.Error) as e:
        aqpim.Model(str(junk))
    assert str(e.value) == cli_error("info", "-m", junk)
    model = aqpim.Model(str(synth_gguf), n_threads=1)
    with pytest.raises(ValueError, match="token 1 is id 512: expected 0 <= id < n_vocab = 512"):
        model.logits([1, 512])
    with pytest.raises(TypeError, match="expected text .str. or a sequence of token ids"):
        model.logits([0.5, 1.5])
    with pytest.raises(ValueError, match="cache of 2 layers x 2 KV heads x 32 dims for a model of 2 x 2 x 64"):
        model.logits([1, 2], cache=aqpim.KvCache("f16", 2, 2, 32))
    with pytest.raises(aqpim.Error, match="the text has .* tokens, fewer than one chunk of 4096"):
        model.perplexity("a short text", n_ctx=4096)
    with pytest.raises(ValueError, match="n_threads=-1"):
        aqpim.Model(str(synth_gguf), n_threads=-1)
