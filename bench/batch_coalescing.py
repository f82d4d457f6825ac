"""bench/batch_coalescing.py: what zen.Context's coalescing of a batch's
sparse (or dense) tensors buys (zen/engine/context.h), measured with real
processes.

N processes on this host (Gloo over loopback) each build T sparse tables
[rows x width] with `nnz` distinct Zipf rows per rank (--kind dense: T dense
buffers [rows x width] of random values, refilled before every step since
they are summed in place), then time, per round, the median of `iters`
steps of two ways to synchronize them:

  batched   one zen.Context batch of the T tables (coalesced into one
            exchange where each table has at most 2^22 elements)
  separate  T batches of one table each, started together, then awaited

Rounds alternate the two ways. Rank 0 prints each way's per-round medians
in milliseconds.

    .venv/bin/python bench/batch_coalescing.py --tables 16 --rows 32000 --width 16 --nnz 40
    .venv/bin/python bench/batch_coalescing.py --tables 2 --rows 250000 --width 64 --nnz 20000
    .venv/bin/python bench/batch_coalescing.py --kind dense --tables 16 --rows 512 --width 1

Needs the zen module on PYTHONPATH (build/python) and numpy.
"""

import argparse
import multiprocessing as mp
import os
import tempfile
import time

import numpy as np


def _tables(rank, tables, rows, width, nnz, kind):
    rng = np.random.default_rng(1000 + rank)
    if kind == "dense":
        return [rng.standard_normal((rows, width)).astype(np.float32) for _ in range(tables)]
    out = []
    for _ in range(tables):
        ids = np.unique((rng.zipf(1.1, size=nnz * 2) - 1) % rows)[:nnz].astype(np.int64)
        out.append((ids, rng.standard_normal((ids.size, width)).astype(np.float32)))
    return out


def _worker(rank, args, url, results):
    import zen

    comm = zen.connect_url(url, rank, args.world)
    ctx = zen.Context(comm, scheme=args.scheme)
    tables = _tables(rank, args.tables, args.rows, args.width, args.nnz, args.kind)
    buffers = [np.empty_like(t) for t in tables] if args.kind == "dense" else None

    def item(t):
        if args.kind == "dense":
            return ("dense", f"table{t}", buffers[t].reshape(-1), args.rows, args.width)
        ids, values = tables[t]
        return ("sparse", f"table{t}", args.rows, args.width, ids, values)

    medians = {"batched": [], "separate": []}
    for _ in range(args.rounds):
        for way in ("batched", "separate"):
            times = []
            for step in range(args.warmup + args.iters):
                if buffers is not None:  # summed in place: the same values every step
                    for b, t in zip(buffers, tables):
                        np.copyto(b, t)
                t0 = time.perf_counter()
                if way == "batched":
                    ctx.start("step", [item(t) for t in range(args.tables)]).wait()
                else:
                    handles = [ctx.start(f"t{t}", [item(t)]) for t in range(args.tables)]
                    for h in handles:
                        h.wait()
                if step >= args.warmup:
                    times.append(time.perf_counter() - t0)
            medians[way].append(float(np.median(times)) * 1e3)
    ctx.close()
    if rank == 0:
        results.put(medians)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--world", type=int, default=8)
    p.add_argument("--tables", type=int, default=16)
    p.add_argument("--rows", type=int, default=32000)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--nnz", type=int, default=40, help="rows per rank and table")
    p.add_argument("--kind", choices=("sparse", "dense"), default="sparse")
    p.add_argument("--scheme", default="zen")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = "file:" + os.path.join(tmp, "rendezvous")
        results = mp.Queue()
        procs = [mp.Process(target=_worker, args=(r, args, url, results)) for r in range(args.world)]
        for proc in procs:
            proc.start()
        medians = results.get()
        for proc in procs:
            proc.join()
    what = "dense" if args.kind == "dense" else f"{args.nnz} rows per rank each"
    print(f"{args.world} processes, {args.tables} tables of {args.rows} x {args.width}, "
          f"{what}, scheme {args.scheme}, load {os.getloadavg()[0]:.2f}")
    for way, ms in medians.items():
        print(f"  {way:9s} per-round medians: " + ", ".join(f"{m:.2f}" for m in ms) + " ms")


if __name__ == "__main__":
    main()
