#!/usr/bin/env python3
"""Write a llama-architecture GGUF of any size with f16 weights, for the GPU check (scripts/gpu-check.sh).

Pure standard library (the GPU machine may have no numpy and no Node): the tokenizer is copied as raw bytes
from one of llama.cpp's vocab-only GGUFs (models/ggml-vocab-llama-spm.gguf), the weights are a block of small
random f16 values repeated, which loads and generates (noise, but deterministic noise). Prints one JSON line
with what relay's fit formula needs: file size, block count, kv_bytes_per_token.
"""
import argparse
import json
import os
import random
import struct

ALIGN = 32
T_U32, T_F32, T_STR, T_ARR, T_U64 = 4, 6, 8, 9, 10
SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def skip_value(buf, off, vtype):
    """Offset just past a metadata value of type vtype at off."""
    if vtype in SCALAR:
        return off + SCALAR[vtype]
    if vtype == T_STR:
        (n,) = struct.unpack_from('<Q', buf, off)
        return off + 8 + n
    if vtype == T_ARR:
        (itype, count) = struct.unpack_from('<IQ', buf, off)
        off += 12
        if itype in SCALAR:
            return off + SCALAR[itype] * count
        for _ in range(count):
            off = skip_value(buf, off, itype)
        return off
    raise ValueError(f'unknown GGUF value type {vtype}')


def tokenizer_entries(vocab_path):
    """The tokenizer.* metadata of a vocab-only GGUF, as (key, raw type+value bytes)."""
    with open(vocab_path, 'rb') as f:
        buf = f.read()
    if buf[:4] != b'GGUF':
        raise SystemExit(f'{vocab_path} is not a GGUF')
    _version, _tensors, kvs = struct.unpack_from('<IQQ', buf, 4)
    off = 24
    out = []
    for _ in range(kvs):
        (klen,) = struct.unpack_from('<Q', buf, off)
        key = buf[off + 8:off + 8 + klen].decode()
        off += 8 + klen
        (vtype,) = struct.unpack_from('<I', buf, off)
        end = skip_value(buf, off + 4, vtype)
        if key.startswith('tokenizer.'):
            out.append((key, buf[off:end]))
        off = end
    return out


def kv_str(key, value):
    k = key.encode()
    v = value.encode()
    return struct.pack('<Q', len(k)) + k + struct.pack('<IQ', T_STR, len(v)) + v


def kv_u32(key, value):
    k = key.encode()
    return struct.pack('<Q', len(k)) + k + struct.pack('<II', T_U32, value)


def kv_f32(key, value):
    k = key.encode()
    return struct.pack('<Q', len(k)) + k + struct.pack('<If', T_F32, value)


def kv_raw(key, raw):
    k = key.encode()
    return struct.pack('<Q', len(k)) + k + raw


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--vocab', required=True)
    ap.add_argument('--out', required=True)
    ap.add_argument('--layers', type=int, default=16)
    ap.add_argument('--embd', type=int, default=4096)
    ap.add_argument('--ff', type=int, default=11008)
    ap.add_argument('--heads', type=int, default=32)
    ap.add_argument('--kv-heads', type=int, default=8)
    ap.add_argument('--ctx', type=int, default=32768)
    a = ap.parse_args()

    tok = tokenizer_entries(a.vocab)
    n_vocab = None
    for key, raw in tok:
        if key == 'tokenizer.ggml.tokens':
            (_itype, n_vocab) = struct.unpack_from('<IQ', raw, 4)
    if not n_vocab:
        raise SystemExit('the vocab GGUF has no tokenizer.ggml.tokens')
    head_dim = a.embd // a.heads
    kv_dim = head_dim * a.kv_heads

    F32, F16 = 0, 1
    tensors = [('token_embd.weight', [a.embd, n_vocab], F16), ('output_norm.weight', [a.embd], F32), ('output.weight', [a.embd, n_vocab], F16)]
    for i in range(a.layers):
        p = f'blk.{i}.'
        tensors += [
            (p + 'attn_norm.weight', [a.embd], F32),
            (p + 'attn_q.weight', [a.embd, a.embd], F16),
            (p + 'attn_k.weight', [a.embd, kv_dim], F16),
            (p + 'attn_v.weight', [a.embd, kv_dim], F16),
            (p + 'attn_output.weight', [a.embd, a.embd], F16),
            (p + 'ffn_norm.weight', [a.embd], F32),
            (p + 'ffn_gate.weight', [a.embd, a.ff], F16),
            (p + 'ffn_up.weight', [a.embd, a.ff], F16),
            (p + 'ffn_down.weight', [a.ff, a.embd], F16),
        ]

    meta = [
        kv_str('general.architecture', 'llama'),
        kv_str('general.name', f'relay gpu-check {a.layers}x{a.embd}'),
        kv_u32('llama.block_count', a.layers),
        kv_u32('llama.context_length', a.ctx),
        kv_u32('llama.embedding_length', a.embd),
        kv_u32('llama.feed_forward_length', a.ff),
        kv_u32('llama.attention.head_count', a.heads),
        kv_u32('llama.attention.head_count_kv', a.kv_heads),
        kv_u32('llama.rope.dimension_count', head_dim),
        kv_f32('llama.attention.layer_norm_rms_epsilon', 1e-5),
    ] + [kv_raw(k, raw) for k, raw in tok]

    infos = []
    offset = 0
    sizes = []
    for name, dims, ttype in tensors:
        n = 1
        for d in dims:
            n *= d
        size = n * (2 if ttype == F16 else 4)
        nb = name.encode()
        infos.append(struct.pack('<Q', len(nb)) + nb + struct.pack('<I', len(dims)) + b''.join(struct.pack('<Q', d) for d in dims) + struct.pack('<IQ', ttype, offset))
        sizes.append((size, ttype))
        offset += (size + ALIGN - 1) // ALIGN * ALIGN

    rng = random.Random(1)
    block16 = b''.join(struct.pack('<e', rng.gauss(0.0, 0.02)) for _ in range(1 << 19))  # 1 MiB of f16
    ones32 = struct.pack('<f', 1.0) * (1 << 18)  # 1 MiB of f32 1.0 (norm weights)

    with open(a.out, 'wb') as f:
        f.write(b'GGUF' + struct.pack('<IQQ', 3, len(tensors), len(meta)))
        for m in meta:
            f.write(m)
        for info in infos:
            f.write(info)
        f.write(b'\0' * ((-f.tell()) % ALIGN))
        for size, ttype in sizes:
            block = block16 if ttype == F16 else ones32
            left = size
            shift = 0
            while left > 0:
                chunk = block[shift:] + block[:shift]
                f.write(chunk[:left])
                left -= min(left, len(chunk))
                shift = (shift + 2 * 7919) % len(block)
            f.write(b'\0' * ((-size) % ALIGN))
    print(json.dumps({
        'path': a.out,
        'size': os.path.getsize(a.out),
        'block_count': a.layers,
        # f16 K and V for every layer: kv_heads × (key + value length) × 2 bytes, as relay's GGUF reader derives it.
        'kv_bytes_per_token': a.layers * a.kv_heads * (head_dim + head_dim) * 2,
        # What relay's fit adds beside (fit.ts): the logits of a batch, one layer's f16 K/V copy under flash attention.
        'vocab': n_vocab,
        'heads': a.heads,
        'kv_per_layer': a.kv_heads * (head_dim + head_dim),
    }))


if __name__ == '__main__':
    main()
