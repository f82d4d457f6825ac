#!/usr/bin/env python3
"""One rank of `zen bench --peers`: PyTorch's dist.all_reduce over Gloo on the
workload zen's schemes ran, with zen's timing rules and correctness check.

Peers:
  torch-gloo-sparse  dist.all_reduce on a sparse COO tensor (Gloo's sparse
                     allreduce: an allgather of every rank's indices and
                     values, then a local sum; what DDP with sparse
                     embedding gradients does today)
  torch-gloo-dense   dist.all_reduce on the dense [rows, width] tensor
  zen-process-group  zen's process-group transport (python/zen/process_group.py:
                     ZEN with torch tensor ops and this Gloo group's all_gather
                     and all_to_all_single, what zen runs on NCCL), timed
                     over its whole call; its payload bytes are the engine's
                     counters (zen.process_group imported from the
                     environment, else from this source tree's python/)

For each peer: warm-up + measured iterations; before each, a barrier; the
time of dist.all_reduce only (tensor construction is outside). Each result
is compared with the dense sum computed here in numpy (float64):
max_rel_error = max|got - ref| / max|ref|, rows_mismatch = rows present in
exactly one of result and reference (sparse peer; the dense peer has no row
set, so it counts rows outside the union that came back non-zero). On the
testbed (--iface), bytes on the wire are the interface counters read around
the measured iterations (per iteration, barriers included), as zen's
workers do. torch's peers have no payload counters (the launcher prints
"n/a"); zen-process-group counts its own.

Writes a JSON list (one object per peer, the per-rank format of zen's
workers) to --out. Usage (the launcher does this, one per host):
  GLOO_SOCKET_IFNAME=lo .venv/bin/python tools/peers/torch_peer.py --rank 0 --world 2 \\
      --init file:///tmp/dir/store --trace w.safetensors --tensor workload \\
      --peers torch-gloo-sparse,torch-gloo-dense --iters 5 --warmup 1 --out r0.json
"""
import argparse
import datetime
import json
import struct
import sys
import time

import numpy as np

PEERS = ("torch-gloo-sparse", "torch-gloo-dense", "zen-process-group")


def process_group_engine():
    """zen.process_group.ProcessGroupEngine on the default group: from the
    environment's zen, else from the source tree this file lives in."""
    try:
        from zen.process_group import ProcessGroupEngine
    except ImportError:
        import pathlib
        tree = pathlib.Path(__file__).resolve().parents[2] / "python"
        sys.path.insert(0, str(tree))
        from zen.process_group import ProcessGroupEngine
    return ProcessGroupEngine()


def read_trace_tensor(path, tensor, world):
    """[(ids int64, values float32 [nnz, width])] for ranks 0..world-1, and (rows, width)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
        meta = header["__metadata__"]
        if meta.get("format") != "zen-trace/1":
            raise ValueError(f"{path}: not a zen-trace/1 file")
        rows, width = json.loads(meta[f"{tensor}.shape"])
        out = []
        for r in range(world):
            arrays = []
            for kind in ("indices", "values"):
                e = header[f"{tensor}/{r}/{kind}"]
                b, end = e["data_offsets"]
                f.seek(base + b)
                dtype = {"I64": "<i8", "I32": "<i4", "F32": "<f4"}[e["dtype"]]
                arrays.append(np.frombuffer(f.read(end - b), dtype=dtype))
            ids = arrays[0].astype(np.int64)
            out.append((ids, arrays[1].reshape(ids.shape[0], width)))
    return out, (rows, width)


def reference_sum(per_rank, width):
    """Union ids (sorted) and their float64 sums."""
    ids = np.concatenate([i for i, _ in per_rank])
    vals = np.concatenate([v for _, v in per_rank]).astype(np.float64)
    if ids.size == 0:
        return ids, np.zeros((0, width))
    order = np.argsort(ids, kind="stable")
    ids, vals = ids[order], vals[order]
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    return ids[starts], np.add.reduceat(vals, starts, axis=0)


class Checker:
    def __init__(self, ref_ids, ref_vals):
        self.ids, self.vals = ref_ids, ref_vals
        self.scale = float(np.abs(ref_vals).max()) if ref_vals.size else 0.0

    def _err(self, diff):
        m = float(np.abs(diff).max()) if diff.size else 0.0
        return m / self.scale if self.scale > 0 else m

    def sparse(self, ids, vals):
        common, ri, gi = np.intersect1d(self.ids, ids, assume_unique=True, return_indices=True)
        mismatch = self.ids.size + ids.size - 2 * common.size
        err = self._err(vals[gi].astype(np.float64) - self.vals[ri])
        # Rows only in one side count as errors of their full magnitude too.
        only_got = np.setdiff1d(np.arange(ids.size), gi, assume_unique=True)
        only_ref = np.setdiff1d(np.arange(self.ids.size), ri, assume_unique=True)
        err = max(err, self._err(vals[only_got]), self._err(self.vals[only_ref]))
        return err, int(mismatch)

    def dense(self, dense):
        got = dense[self.ids].astype(np.float64)
        err = self._err(got - self.vals)
        outside = np.ones(dense.shape[0], dtype=bool)
        outside[self.ids] = False
        bad = int(np.count_nonzero(np.any(dense[outside] != 0, axis=1)))
        if bad:
            err = max(err, self._err(dense[outside]))
        return err, bad


def read_wire(iface):
    base = f"/sys/class/net/{iface}/statistics/"
    with open(base + "tx_bytes") as tx, open(base + "rx_bytes") as rx:
        return int(tx.read()), int(rx.read())


def measure(torch, dist, peer, local, shape, checker, args):
    ids, vals = local
    rows, width = shape
    index = torch.from_numpy(np.array(ids, dtype=np.int64)).reshape(1, -1)
    values = torch.from_numpy(np.array(vals, dtype=np.float32))  # writable copy

    # The trace's ids are sorted and unique: coalesced, no invariant check
    # (torch 2.x warns when the check is left implicit; 1.13 has no such flag).
    unchecked = ({"check_invariants": False}
                 if hasattr(torch.sparse, "check_sparse_tensor_invariants") else {})

    def make():
        if peer == "torch-gloo-sparse":
            return torch.sparse_coo_tensor(index, values.clone(), (rows, width),
                                           **unchecked)._coalesced_(True)
        t = torch.zeros(rows, width, dtype=torch.float32)
        t[index[0]] = values
        return t

    if peer == "zen-process-group":
        return measure_engine(torch, dist, local, shape, checker, args)
    times, cpu, err, mismatch, wire0 = [], 0.0, 0.0, 0, None
    for it in range(args.warmup + args.iters):
        t = make()
        dist.barrier()
        if it == args.warmup and args.iface:
            wire0 = read_wire(args.iface)
            dist.barrier()
        c0, t0 = time.process_time(), time.perf_counter()
        dist.all_reduce(t)
        t1, c1 = time.perf_counter(), time.process_time()
        if peer == "torch-gloo-sparse":
            t = t.coalesce()
            e, m = checker.sparse(t.indices()[0].numpy(), t.values().numpy())
        else:
            e, m = checker.dense(t.numpy())
        err, mismatch = max(err, e), max(mismatch, m)
        if it >= args.warmup:
            times.append(t1 - t0)
            cpu += c1 - c0
    out = {"scheme": peer, "times": times, "max_rel_error": err, "rows_mismatch": mismatch,
           "cpu_s": cpu / len(times)}
    if wire0 is not None:
        dist.barrier()
        tx, rx = read_wire(args.iface)
        out["wire_sent"] = (tx - wire0[0]) // args.iters
        out["wire_recv"] = (rx - wire0[1]) // args.iters
    return out


def measure_engine(torch, dist, local, shape, checker, args):
    """zen-process-group: the engine's allreduce_sparse of this rank's rows,
    each call timed whole (its count records, push, aggregation, pull and
    decode), with its payload byte counters per iteration."""
    engine = process_group_engine()
    ids = torch.from_numpy(np.array(local[0], dtype=np.int64))
    values = torch.from_numpy(np.array(local[1], dtype=np.float32))
    rows = shape[0]
    times, cpu, err, mismatch, wire0 = [], 0.0, 0.0, 0, None
    sent = recv = 0
    for it in range(args.warmup + args.iters):
        dist.barrier()
        if it == args.warmup and args.iface:
            wire0 = read_wire(args.iface)
            dist.barrier()
        s0, r0 = engine.bytes_sent, engine.bytes_received
        c0, t0 = time.process_time(), time.perf_counter()
        out_ids, out_values = engine.allreduce_sparse("peer", rows, ids, values)
        t1, c1 = time.perf_counter(), time.process_time()
        e, m = checker.sparse(out_ids.numpy(), out_values.numpy())
        err, mismatch = max(err, e), max(mismatch, m)
        if it >= args.warmup:
            times.append(t1 - t0)
            cpu += c1 - c0
            sent += engine.bytes_sent - s0
            recv += engine.bytes_received - r0
    out = {"scheme": "zen-process-group", "times": times, "max_rel_error": err,
           "rows_mismatch": mismatch, "cpu_s": cpu / len(times),
           "bytes_sent": sent // args.iters, "bytes_recv": recv // args.iters}
    if wire0 is not None:
        dist.barrier()
        tx, rx = read_wire(args.iface)
        out["wire_sent"] = (tx - wire0[0]) // args.iters
        out["wire_recv"] = (rx - wire0[1]) // args.iters
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--init", required=True, help="torch init_method, e.g. file:///tmp/x/store")
    ap.add_argument("--trace", required=True)
    ap.add_argument("--tensor", required=True)
    ap.add_argument("--peers", default=",".join(PEERS))
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--timeout-s", type=float, default=60)
    ap.add_argument("--iface", default="", help="interface whose counters give wire bytes")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    peers = [p for p in args.peers.split(",") if p]
    for p in peers:
        if p not in PEERS:
            sys.exit(f"torch_peer: unknown peer {p!r} (known: {', '.join(PEERS)})")

    import torch
    import torch.distributed as dist

    per_rank, shape = read_trace_tensor(args.trace, args.tensor, args.world)
    checker = Checker(*reference_sum(per_rank, shape[1]))
    # The timeout also bounds the connection setup of every collective.
    dist.init_process_group("gloo", init_method=args.init, rank=args.rank,
                            world_size=args.world,
                            timeout=datetime.timedelta(seconds=max(args.timeout_s, 30)))
    results = []
    for p in peers:
        try:
            results.append(measure(torch, dist, p, per_rank[args.rank], shape, checker, args))
        except (RuntimeError, ValueError) as e:  # a torch-side refusal: report and go on
            results.append({"scheme": p, "error": f"rank {args.rank}: {e}"})
            dist.barrier()
    dist.barrier()
    dist.destroy_process_group()
    with open(args.out, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
