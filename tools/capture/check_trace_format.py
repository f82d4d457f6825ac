"""Checks the numpy reader in docs/trace-format.md against zen's trace files.

  check_trace_format.py read PATH    run the docs' reader on PATH and print, as
                                     JSON, per tensor [rows, width] and per rank
                                     [nnz, sum of ids, sum of values]
  check_trace_format.py write PATH   write a fixed trace with zen_trace.py
                                     (the C++ test reads it back)
  check_trace_format.py selftest DIR write with zen_trace.py, read with the
                                     docs' reader, compare

Run by zen/workload/trace_test.cc (NumpySnippetInDocsReadsOurFiles).
"""
import json
import os
import re
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from zen_trace import write_zen_trace  # noqa: E402

DOC = os.path.join(HERE, "..", "..", "docs", "trace-format.md")


def load_reader():
    text = open(DOC, encoding="utf-8").read()
    block = re.search(r"<!-- numpy-reader-begin -->\s*```python\n(.*?)```", text, re.S)
    if not block:
        sys.exit(f"no numpy reader block in {DOC}")
    scope = {}
    exec(block.group(1), scope)  # the snippet exactly as documented
    return scope["read_zen_trace"]


def fixed_trace():
    """Deterministic 3-rank trace: tensor 'step0.a' [50, 3] and 'step0.b' [20, 1]."""
    ranks_a = []
    for r in range(3):
        ids = np.arange(r, 50, 7 + r, dtype=np.int64)
        values = (np.arange(ids.size * 3, dtype=np.float32).reshape(-1, 3) + r) / 4
        ranks_a.append((ids, values))
    ranks_b = [(np.array([], np.int64), np.zeros((0, 1), np.float32)),
               (np.array([0, 19], np.int64), np.array([[1.5], [-2.0]], np.float32)),
               (np.array([5], np.int64), np.array([[3.25]], np.float32))]
    return {"step0.a": (50, 3, ranks_a), "step0.b": (20, 1, ranks_b)}


def summary(world, tensors):
    out = {"world_size": world, "tensors": {}}
    for name, (rows, width, ranks) in tensors.items():
        out["tensors"][name] = {"shape": [rows, width],
                                "ranks": [[int(ids.size), int(ids.sum()), float(v.astype(np.float64).sum())]
                                          for ids, v in ranks]}
    return out


def main():
    mode, path = sys.argv[1], sys.argv[2]
    read = load_reader()
    if mode == "read":
        print(json.dumps(summary(*read(path))))
    elif mode == "write":
        write_zen_trace(path, 3, fixed_trace(), {"generator": "check_trace_format.py"})
    elif mode == "selftest":
        want = fixed_trace()
        for index_dtype in ("I64", "I32"):
            file = os.path.join(path, f"selftest-{index_dtype}.safetensors")
            write_zen_trace(file, 3, want, index_dtype=index_dtype)
            world, got = read(file)
            assert world == 3 and list(got) == list(want), (world, list(got))
            for name, (rows, width, ranks) in want.items():
                assert got[name][:2] == (rows, width)
                for (gi, gv), (wi, wv) in zip(got[name][2], ranks):
                    assert np.array_equal(gi, wi) and np.array_equal(gv, wv), name
        print("selftest ok")
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
