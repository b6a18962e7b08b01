"""Dump a GGUF header as JSON with llama.cpp's own gguf-py reader: the independent oracle for relay's reader.

Usage: PYTHONPATH=<gguf-py dir> python3 gguf_dump.py FILE...
"""
import json
import sys

from gguf import GGUFReader, GGUFValueType


def dump(path):
    r = GGUFReader(path)
    fields = {}
    for name, f in r.fields.items():
        if name.startswith("GGUF."):
            continue  # the reader's pseudo-fields for the header itself
        t = int(f.types[0]) if f.types else None
        entry = {"type": t}
        if f.types and f.types[0] == GGUFValueType.ARRAY:
            entry["item_type"] = int(f.types[-1])
            entry["count"] = len(f.data)
        elif f.types and f.types[0] == GGUFValueType.STRING:
            entry["value"] = bytes(f.parts[f.data[0]]).decode("utf-8")
        fields[name] = entry
    arch = fields.get("general.architecture", {}).get("value")
    tokens = fields.get("tokenizer.ggml.tokens", {}).get("count")
    tensors = [[t.name, [int(x) for x in t.shape], int(t.tensor_type), int(t.data_offset)] for t in r.tensors]
    return {"architecture": arch, "token_count": tokens, "fields": fields, "tensors": tensors}


print(json.dumps({p: dump(p) for p in sys.argv[1:]}))
