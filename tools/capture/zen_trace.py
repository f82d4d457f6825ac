"""Writes `zen-trace/1` gradient traces (docs/trace-format.md) with numpy only.

A zen-trace/1 file is a safetensors file holding, per tensor T and rank r,
`T/r/indices` (I64, sorted unique) and `T/r/values` (F32, [nnz, width]),
plus `__metadata__` with format, world_size and `T.shape`.

Usage:
    from zen_trace import write_zen_trace
    write_zen_trace("out.safetensors", world_size=2,
                    tensors={"step0.embedding": (rows, width, [(ids0, vals0), (ids1, vals1)])},
                    metadata={"generator": "me"})
"""
import json
import re
import struct

import numpy as np

FORMAT = "zen-trace/1"
_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,200}$")
_RESERVED = ("format", "world_size")


def _check_rank(name, rank, rows, width, ids, values):
    where = f"tensor '{name}' rank {rank}"
    if ids.ndim != 1:
        raise ValueError(f"{where}: indices must be 1-D, got shape {ids.shape}")
    if values.shape != (ids.shape[0], width):
        raise ValueError(f"{where}: values shape {values.shape} != ({ids.shape[0]}, {width})")
    if ids.size and (ids[0] < 0 or ids[-1] >= rows or np.any(np.diff(ids) <= 0)):
        raise ValueError(f"{where}: ids must be sorted, unique and in [0, {rows})")


def write_zen_trace(path, world_size, tensors, metadata=None, index_dtype="I64"):
    """tensors: {name: (rows, width, [(ids, values) for each rank])}, written in dict order."""
    if index_dtype not in ("I64", "I32"):
        raise ValueError(f"index_dtype {index_dtype!r} is not I64 or I32")
    meta = {"format": FORMAT, "world_size": str(int(world_size))}
    for key, value in (metadata or {}).items():
        if key in _RESERVED or key.endswith(".shape"):
            raise ValueError(f"metadata key {key!r} is reserved")
        meta[key] = str(value)
    header, blobs, at = {}, [], 0
    np_index = np.dtype("<i8" if index_dtype == "I64" else "<i4")
    for name, (rows, width, ranks) in tensors.items():
        if not _NAME.match(name):
            raise ValueError(f"tensor name {name!r} is not 1-200 chars of [A-Za-z0-9_.:-]")
        if len(ranks) != world_size:
            raise ValueError(f"tensor '{name}' has {len(ranks)} ranks, world_size is {world_size}")
        meta[f"{name}.shape"] = f"[{int(rows)}, {int(width)}]"
        for rank, (ids, values) in enumerate(ranks):
            ids = np.ascontiguousarray(ids, dtype=np.int64)
            values = np.ascontiguousarray(values, dtype="<f4").reshape(ids.shape[0], width)
            _check_rank(name, rank, rows, width, ids, values)
            for kind, arr, dtype in (("indices", ids.astype(np_index), index_dtype),
                                     ("values", values, "F32")):
                raw = arr.tobytes()
                header[f"{name}/{rank}/{kind}"] = {
                    "dtype": dtype, "shape": list(arr.shape), "data_offsets": [at, at + len(raw)]}
                blobs.append(raw)
                at += len(raw)
    text = json.dumps({"__metadata__": meta, **header}, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)
