"""bench/process_group_loopback.py: the CPU cost of zen.process_group's
ProcessGroupEngine.allreduce_sparse (ZEN over a Gloo group's collectives),
per call, on N processes over loopback, optionally paired with another
version of python/zen/process_group.py in the same run.

Each rank holds one rank's rows of the workload:
  trace  the shipped trace's step0.embedding (data/traces/gcide-lm-n8.safetensors,
         32000 x 64, rank r % 8's rows), what `zen bench --peers zen-process-group`
         feeds the engine
  topk   the shipped trace's step0.lstm_weight_hh_l0_topk (16384 x 1)
  zipf   250000 x 64, 2500 distinct rows per rank drawn with P(row i) ~ 1 / (i + 1)^1.1
         (numpy's Gumbel top-k; the shape of `zen bench --synthetic
         zipf:rows=250000,width=64,density=0.01,skew=1.1`, not its exact rows)
Per iteration, after a barrier: the call's wall time (the slowest rank's)
and each rank's process CPU time (time.process_time: its Gloo threads
included). Prints the medians: wall, CPU per rank.

With --baseline FILE (another process_group.py, e.g. `git show
HEAD~3:python/zen/process_group.py > /tmp/old.py`), every iteration runs
both engines, alternating which goes first, checks that they return the
same ids, the same value bits and count the same bytes, and prints the
medians of the per-iteration ratios (new / baseline) as well: load from
other jobs affects both alike.

The ranks run with OMP_NUM_THREADS=1 unless it is set (as `zen bench
--testbed` runs its peers): N ranks with torch's default intra-op threads
each oversubscribe the cores, and then waits in torch's thread pool, not
this engine, dominate.

    .venv/bin/python bench/process_group_loopback.py --world 8 --workload zipf
    .venv/bin/python bench/process_group_loopback.py --world 2 --baseline /tmp/old.py

Needs torch and numpy; imports zen.process_group from this source tree.
"""

import argparse
import importlib.util
import json
import os
import pathlib
import statistics
import struct
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
TRACE = REPO / "data" / "traces" / "gcide-lm-n8.safetensors"
TRACE_TENSORS = {"trace": "step0.embedding", "topk": "step0.lstm_weight_hh_l0_topk"}


def load(workload, rank):
    """(rows, ids int64 [k], values float32 [k, width]) of this rank."""
    import numpy as np
    if workload in TRACE_TENSORS:
        tensor = TRACE_TENSORS[workload]
        with open(TRACE, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
            rows, width = json.loads(header["__metadata__"][f"{tensor}.shape"])
            arrays = []
            for kind in ("indices", "values"):
                e = header[f"{tensor}/{rank % 8}/{kind}"]
                b, end = e["data_offsets"]
                f.seek(8 + n + b)
                dtype = {"I64": "<i8", "I32": "<i4", "F32": "<f4"}[e["dtype"]]
                arrays.append(np.frombuffer(f.read(end - b), dtype=dtype))
        ids = arrays[0].astype(np.int64)
        return rows, ids, arrays[1].reshape(ids.shape[0], width).copy()
    rows, width, density, skew = 250000, 64, 0.01, 1.1
    rng = np.random.default_rng(1000 + rank)
    m = round(density * rows)
    keys = -skew * np.log(np.arange(1, rows + 1, dtype=np.float64)) + rng.gumbel(size=rows)
    ids = np.sort(np.argpartition(-keys, m)[:m]).astype(np.int64)
    return rows, ids, rng.uniform(-1, 1, size=(m, width)).astype(np.float32)


def engine_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def worker(a):
    import torch
    import torch.distributed as dist
    sys.path.insert(0, str(REPO / "python"))
    from zen import process_group
    dist.init_process_group("gloo", init_method=a.init, rank=a.rank, world_size=a.world)
    rows, ids, values = load(a.workload, a.rank)
    ids, values = torch.from_numpy(ids), torch.from_numpy(values)
    engines = {"new": process_group.ProcessGroupEngine()}
    if a.baseline:
        engines["baseline"] = engine_module(a.baseline, "baseline_pg").ProcessGroupEngine()
    res = {k: {"wall": [], "cpu": []} for k in engines}
    for it in range(a.warmup + a.iters):
        order = sorted(engines) if it % 2 else sorted(engines, reverse=True)
        outs = {}
        for which in order:
            e = engines[which]
            dist.barrier()
            c0, t0 = time.process_time(), time.perf_counter()
            outs[which] = e.allreduce_sparse("bench", rows, ids, values)
            t1, c1 = time.perf_counter(), time.process_time()
            outs[which] += (dict(e.last_stats),)
            if it >= a.warmup:
                res[which]["wall"].append(t1 - t0)
                res[which]["cpu"].append(c1 - c0)
        if a.baseline:
            (ni, nv, ns), (bi, bv, bs) = outs["new"], outs["baseline"]
            assert torch.equal(ni, bi), f"rank {a.rank}: the ids differ from the baseline's"
            assert torch.equal(nv.view(torch.int32), bv.view(torch.int32)), \
                f"rank {a.rank}: the value bits differ from the baseline's"
            for k in ("meta_bytes_sent", "push_bytes_sent", "pull_bytes_sent", "bytes_recv"):
                assert ns[k] == bs[k], f"rank {a.rank}: {k} {ns[k]} != baseline {bs[k]}"
    dist.barrier()
    with open(a.out, "w") as f:
        json.dump(res, f)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--workload", default="trace", choices=["trace", "topk", "zipf"])
    ap.add_argument("--iters", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--baseline", default="", help="another process_group.py to pair against")
    ap.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    ap.add_argument("--init", default="", help=argparse.SUPPRESS)
    ap.add_argument("--out", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.rank >= 0:
        return worker(a)
    d = tempfile.mkdtemp(prefix="pg_loopback")
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo")
    env.setdefault("OMP_NUM_THREADS", "1")
    procs = []
    for r in range(a.world):
        cmd = [sys.executable, __file__, "--rank", str(r), "--world", str(a.world),
               "--workload", a.workload, "--iters", str(a.iters), "--warmup", str(a.warmup),
               "--init", f"file://{d}/store", "--out", f"{d}/r{r}.json"]
        if a.baseline:
            cmd += ["--baseline", os.path.abspath(a.baseline)]
        procs.append(subprocess.Popen(cmd, env=env))
    codes = [p.wait(timeout=900) for p in procs]
    if any(codes):
        sys.exit(f"process_group_loopback: ranks exited {codes}")
    res = [json.load(open(f"{d}/r{r}.json")) for r in range(a.world)]

    def per_iter(which, key, agg):
        return [agg(rr[which][key][i] for rr in res) for i in range(a.iters)]

    line = [f"world {a.world} {a.workload} ({a.iters} iterations, medians):"]
    for which in res[0]:
        wall = statistics.median(per_iter(which, "wall", max))
        cpu = statistics.median(per_iter(which, "cpu", statistics.mean))
        line.append(f"{which}: wall {1e3 * wall:.2f} ms, CPU/rank {1e3 * cpu:.2f} ms;")
    if a.baseline:
        walls = [x / y for x, y in zip(per_iter("new", "wall", max),
                                       per_iter("baseline", "wall", max))]
        cpus = [x / y for x, y in zip(per_iter("new", "cpu", sum),
                                      per_iter("baseline", "cpu", sum))]
        line.append(f"new / baseline: wall {statistics.median(walls):.3f}x, "
                    f"CPU {statistics.median(cpus):.3f}x (same ids, bits and bytes)")
    print(" ".join(line))


if __name__ == "__main__":
    main()
