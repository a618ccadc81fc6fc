#!/usr/bin/env python3
"""A small Llama in plain PyTorch, run with its dense KV cache and with aqpim's PQKVCache.

The model reads a Hugging Face checkpoint directory (config.json + model.safetensors, single or
sharded; F32/F16/BF16) with its own safetensors reader: RMSNorm, RoPE with HF's rotate_half
(pairs (i, i + head_dim/2), as these checkpoints store Q/K rows), GQA, SwiGLU. Its arithmetic
follows the aqpim runtime's (RMS in double, RoPE tables in double rounded to float32, SiLU as
g / (1 + exp(-g))), so its logits match ``aqpim.Model`` on the same directory to float32 rounding.

PQ in the model: every block's ``self_attn`` is replaced by ``aqpim.torch.PQAttention`` (same
weights), which keeps keys and values in a ``PQKVCache`` and attends on the codes.

    python3 examples/torch_llama.py -m ../shared/models/austen-13m -f ../shared/text/northanger-abbey.txt

prints, per cache: perplexity (llama.cpp's protocol: chunks of --ctx tokens, the second half of
each scored), the KV bytes a full chunk holds, and greedy decode tokens/s.
"""

import argparse
import json
import math
import os
import struct
import sys
import time

import torch
from torch import nn

import aqpim
from aqpim.torch import DenseKVCache, PQAttention, PQKVCache, RotaryEmbedding, apply_rotary, gqa_attention

# ---- safetensors ---------------------------------------------------------------------------------

_ST_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def read_safetensors(path):
    """{name: tensor} of one .safetensors file (F32, F16, BF16)."""
    with open(path, "rb") as f:
        data = bytearray(f.read())
    if len(data) < 8:
        raise ValueError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
    (n_header,) = struct.unpack_from("<Q", data, 0)
    if 8 + n_header > len(data):
        raise ValueError(f"{path}: header of {n_header} bytes runs past the end of the file")
    header = json.loads(data[8:8 + n_header])
    base, tensors = 8 + n_header, {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in _ST_DTYPES:
            raise ValueError(f"{path}: tensor {name} has dtype {info['dtype']} (this reader: F32, F16, BF16)")
        begin, end = info["data_offsets"]
        dtype = _ST_DTYPES[info["dtype"]]
        count = math.prod(info["shape"])
        if end - begin != count * torch.empty(0, dtype=dtype).element_size() or base + end > len(data):
            raise ValueError(f"{path}: tensor {name}: offsets {begin}..{end} do not hold shape {info['shape']}")
        t = torch.frombuffer(data, dtype=dtype, count=count, offset=base + begin) if count else torch.empty(0, dtype=dtype)
        tensors[name] = t.reshape(info["shape"])
    return tensors


def write_safetensors(path, tensors):
    """Write {name: tensor} (F32/F16/BF16) as one .safetensors file."""
    names = {dt: name for name, dt in _ST_DTYPES.items()}
    header, offset, blobs = {}, 0, []
    for name, t in tensors.items():
        raw = t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for raw in blobs:
            f.write(raw)


def read_checkpoint(directory):
    """config.json and every tensor of model.safetensors (or the shards model.safetensors.index.json names)."""
    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
    else:
        shards = ["model.safetensors"]
    tensors = {}
    for shard in shards:
        tensors.update(read_safetensors(os.path.join(directory, shard)))
    return config, tensors


# ---- the model -----------------------------------------------------------------------------------

def as_float32(x):
    """A Python float rounded to float32, as the runtime stores config values (rms_eps, rope_theta)."""
    return struct.unpack("f", struct.pack("f", x))[0]


class LlamaConfig:
    def __init__(self, c):
        if c.get("rope_scaling"):
            raise ValueError(f"rope_scaling {c['rope_scaling']} is not supported by this example")
        self.hidden_size = c["hidden_size"]
        self.intermediate_size = c["intermediate_size"]
        self.num_hidden_layers = c["num_hidden_layers"]
        self.num_attention_heads = c["num_attention_heads"]
        self.num_key_value_heads = c.get("num_key_value_heads", self.num_attention_heads)
        self.head_dim = c.get("head_dim") or self.hidden_size // self.num_attention_heads
        self.vocab_size = c["vocab_size"]
        self.rms_norm_eps = as_float32(c.get("rms_norm_eps", 1e-5))
        self.rope_theta = as_float32(c.get("rope_theta", 10000.0))
        self.tie_word_embeddings = c.get("tie_word_embeddings", False)
        self.attention_bias = c.get("attention_bias", False)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        # 1 / rms in double, then float32 (the runtime's and llama.cpp's rule)
        ms = x.double().pow(2).sum(-1, keepdim=True) / x.shape[-1]
        return x * (1.0 / torch.sqrt(ms + self.eps)).to(torch.float32) * self.weight


class LlamaAttention(nn.Module):
    """The dense attention: keys and values through cache.update(), softmax attention with GQA."""

    def __init__(self, config, layer_idx):
        super().__init__()
        self.config, self.layer_idx = config, layer_idx
        self.num_heads, self.num_key_value_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = config.head_dim
        hd, bias = config.head_dim, config.attention_bias
        self.q_proj = nn.Linear(config.hidden_size, self.num_heads * hd, bias=bias)
        self.k_proj = nn.Linear(config.hidden_size, self.num_key_value_heads * hd, bias=bias)
        self.v_proj = nn.Linear(config.hidden_size, self.num_key_value_heads * hd, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * hd, config.hidden_size, bias=False)

    def forward(self, hidden_states, position_embeddings, attention_mask=None, past_key_value=None, **kwargs):
        b, n, _ = hidden_states.shape
        q = self.q_proj(hidden_states).view(b, n, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(hidden_states).view(b, n, self.num_key_value_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(hidden_states).view(b, n, self.num_key_value_heads, self.head_dim).transpose(1, 2)
        cos, sin = position_embeddings
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        k, v = past_key_value.update(k, v, self.layer_idx)
        out = gqa_attention(q, k, v, self.head_dim ** -0.5)
        return self.o_proj(out.transpose(1, 2).reshape(b, n, -1)), None


class LlamaMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x):
        g = self.gate_proj(x)
        return self.down_proj(g / (1.0 + torch.exp(-g)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = LlamaAttention(config, layer_idx)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = LlamaMLP(config)

    def forward(self, h, position_embeddings, cache):
        h = h + self.self_attn(self.input_layernorm(h), position_embeddings=position_embeddings, past_key_value=cache)[0]
        return h + self.mlp(self.post_attention_layernorm(h))


class LlamaForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(LlamaDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.rope = RotaryEmbedding(config.head_dim, config.rope_theta)

    @torch.no_grad()
    def forward(self, input_ids, cache, last_only=False):
        """Logits [batch, n, vocab] (or [batch, vocab] of the last token) of input_ids [batch, n] after what the cache holds."""
        n = input_ids.shape[1]
        position_embeddings = self.rope(cache.get_seq_length(0) + torch.arange(n))
        h = self.embed_tokens(input_ids)
        for layer in self.layers:
            h = layer(h, position_embeddings, cache)
        if last_only:
            h = h[:, -1]
        return self.lm_head(self.norm(h))

    def use_pq_attention(self):
        """Replace every block's attention by PQAttention (same projection modules and weights)."""
        for layer in self.layers:
            layer.self_attn = PQAttention.from_attention(layer.self_attn, rope_theta=self.config.rope_theta)
        return self

    def dense_cache(self):
        return DenseKVCache(self.config.num_hidden_layers)

    def pq_cache(self, scheme="pq", context=0):
        c = self.config
        return PQKVCache(scheme, n_layers=c.num_hidden_layers, n_kv_heads=c.num_key_value_heads, head_dim=c.head_dim,
                         rope_pairs="neox", rope_theta=c.rope_theta, context=context)


_HF_NAMES = {"embed_tokens": "model.embed_tokens.weight", "norm": "model.norm.weight", "lm_head": "lm_head.weight"}


def load_llama(directory):
    """The model of a HF Llama directory, weights in float32."""
    config_json, tensors = read_checkpoint(directory)
    config = LlamaConfig(config_json)
    model = LlamaForCausalLM(config)
    state = {}
    for name, param in model.state_dict().items():
        hf = _HF_NAMES.get(name.split(".")[0], "model." + name)
        if name.startswith("lm_head") and config.tie_word_embeddings:
            hf = "model.embed_tokens.weight"
        if hf not in tensors:
            raise ValueError(f"{directory}: tensor {hf} missing")
        if tuple(tensors[hf].shape) != tuple(param.shape):
            raise ValueError(f"{directory}: tensor {hf} has shape {list(tensors[hf].shape)}, expected {list(param.shape)}")
        state[name] = tensors[hf].to(torch.float32)
    model.load_state_dict(state)
    return model.eval()


# ---- evaluation ----------------------------------------------------------------------------------

def perplexity(model, tokens, bos, n_ctx, make_cache, max_chunks=0):
    """llama.cpp's protocol (as aqpim's Model.perplexity): chunks of n_ctx tokens, BOS first, each from
    an empty cache, NLL of the second half. Returns (ppl, KV bytes of the last full chunk)."""
    n_chunks = len(tokens) // n_ctx
    if max_chunks:
        n_chunks = min(n_chunks, max_chunks)
    if n_chunks < 1:
        raise ValueError(f"the text has {len(tokens)} tokens, fewer than one chunk of {n_ctx}")
    nll, count, kv_bytes = 0.0, 0, 0
    for ic in range(n_chunks):
        chunk = list(tokens[ic * n_ctx:(ic + 1) * n_ctx])
        chunk[0] = bos
        cache = make_cache()
        logits = model(torch.tensor([chunk]), cache)[0].double()
        logp = torch.log_softmax(logits[n_ctx // 2:n_ctx - 1], dim=-1)
        targets = torch.tensor(chunk[n_ctx // 2 + 1:])
        nll -= float(logp.gather(1, targets[:, None]).sum())
        count += len(targets)
        kv_bytes = cache.memory()["bytes"]
    return math.exp(nll / count), kv_bytes


def decode_speed(model, make_cache, prompt, n_decode):
    """Greedy decode of n_decode tokens after prompt: tokens/s of the decode steps."""
    cache = make_cache()
    logits = model(torch.tensor([prompt]), cache, last_only=True)
    t0 = time.perf_counter()
    for _ in range(n_decode):
        logits = model(logits.argmax(-1)[:, None], cache, last_only=True)
    return n_decode / (time.perf_counter() - t0)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-m", "--model", required=True, help="HF Llama directory (config.json + safetensors)")
    p.add_argument("-f", "--file", required=True, help="text for perplexity")
    p.add_argument("-c", "--ctx", type=int, default=1024, help="tokens per perplexity chunk")
    p.add_argument("--chunks", type=int, default=2, help="chunks to evaluate (0 = all)")
    p.add_argument("--kv", default="pq", help="aqpim scheme of the PQ cache (e.g. pq:bits=2,cb=f16)")
    p.add_argument("-n", "--decode", type=int, default=64, help="tokens to decode for the speed figure")
    p.add_argument("-t", "--threads", type=int, default=1, help="torch threads")
    p.add_argument("--compare", action="store_true",
                   help="also print how far the logits of the first chunk are from aqpim.Model's (f32, f16, --kv)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)

    runtime = aqpim.Model(args.model, n_threads=1)
    tokenizer = runtime.tokenizer  # the runtime's SentencePiece tokenizer
    with open(args.file, encoding="utf-8") as f:
        tokens = tokenizer.encode(f.read())
    dense = load_llama(args.model)
    pq = load_llama(args.model).use_pq_attention()
    print(f"{args.model}: {len(tokens)} tokens of {args.file}; chunks of {args.ctx}; {args.decode} decode steps")
    for name, model, make in (("dense f32", dense, dense.dense_cache),
                              (args.kv, pq, lambda: pq.pq_cache(args.kv, context=args.ctx))):
        ppl, kv_bytes = perplexity(model, tokens, tokenizer.bos, args.ctx, make, args.chunks)
        tps = decode_speed(model, make, tokens[:args.ctx - args.decode], args.decode)
        print(f"  {name:<12} perplexity {ppl:.4f}   KV bytes at {args.ctx} tokens {kv_bytes:>10,}   "
              f"decode {tps:.1f} tokens/s")
    if args.compare:
        chunk = [tokenizer.bos] + list(tokens[1:args.ctx])
        for kv in ("f32", "f16", args.kv):
            ref = runtime.logits(chunk, kv=kv)
            ours = pq(torch.tensor([chunk]), pq.pq_cache(kv, context=len(chunk)))[0].numpy()
            diff = abs(ours - ref).max(axis=1)
            print(f"  logits vs aqpim.Model, kv {kv:<10} max abs difference {diff.max():.2e}, "
                  f"rows beyond 1e-4: {(diff > 1e-4).sum()} of {len(chunk)}")


if __name__ == "__main__":
    sys.exit(main())
