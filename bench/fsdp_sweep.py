#!/usr/bin/env python3
"""Where zen's sparse reduce-scatter stops winning: a density sweep of
zen.fsdp.SparseReduceScatter (fallback off: max_fraction=1e9) against Gloo's
dist.reduce_scatter_tensor on the same input, on loopback.

    PYTHONPATH=build/python .venv/bin/python bench/fsdp_sweep.py --world 4 --numel 4000000

Starts --world processes (FileStore rendezvous in a temporary directory).
The input is what FSDP gives an embedding's reduce-scatter: --numel fp32
elements, rows of --width, a fraction --densities of the rows non-zero
(each rank draws its own rows), or with --layout elements single elements.
Per density, --reps interleaved pairs (sparse, dense), after one warm-up;
rank 0 prints the medians: the time of each, their ratio, zen's bytes sent
per rank over the dense reduce-scatter's ((world - 1) x chunk x 4), and the
encodings used. --json PATH writes the rows.
"""

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
import warnings

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, args, init):
    warnings.filterwarnings("ignore", message=".*reduce_scatter_tensor.*")
    from zen.fsdp import SparseReduceScatter
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=args.world,
                            timeout=datetime.timedelta(seconds=300))
    world = args.world
    numel = args.numel - args.numel % (world * args.width)
    chunk = numel // world
    comm = SparseReduceScatter(max_fraction=1e9)
    out = torch.empty(chunk)
    rows = []
    for density in args.densities:
        g = torch.Generator().manual_seed(rank * 7919 + int(density * 1e6))
        x = torch.zeros(numel)
        if args.layout == "rows":
            n_rows = numel // args.width
            pick = torch.randperm(n_rows, generator=g)[:max(1, round(density * n_rows))]
            x.view(n_rows, args.width)[pick] = torch.randn(pick.numel(), args.width, generator=g)
        else:
            pick = torch.randperm(numel, generator=g)[:max(1, round(density * numel))]
            x[pick] = torch.randn(pick.numel(), generator=g)
        times = {"zen": [], "gloo": []}

        def run(name):
            dist.barrier()
            start = time.perf_counter()
            if name == "zen":
                comm(out, x, dist.group.WORLD, dist.ReduceOp.AVG)
            else:
                dist.reduce_scatter_tensor(out, x, op=dist.ReduceOp.AVG)
            return time.perf_counter() - start

        run("zen"), run("gloo")  # warm-up
        for _ in range(args.reps):
            for name in ("zen", "gloo"):
                times[name].append(run(name))
        # The slowest rank's time is the collective's: max over ranks per rep.
        t = torch.tensor([times["zen"], times["gloo"]], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        sent = torch.tensor([float(comm.last_bytes_sent)], dtype=torch.float64)
        dist.all_reduce(sent, op=dist.ReduceOp.MAX)
        zen_s, gloo_s = statistics.median(t[0].tolist()), statistics.median(t[1].tolist())
        rows.append({"density": density, "zen_ms": zen_s * 1e3, "gloo_ms": gloo_s * 1e3,
                     "speedup": gloo_s / zen_s, "bytes_fraction": sent.item() / ((world - 1) * chunk * 4),
                     "formats": comm.last_formats})
        if rank == 0:
            r = rows[-1]
            print(f"{density:8.4f}  zen {r['zen_ms']:8.2f} ms  gloo {r['gloo_ms']:8.2f} ms  "
                  f"gloo/zen {r['speedup']:5.2f}  bytes {r['bytes_fraction']:6.3f} of dense  {r['formats']}",
                  flush=True)
    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump({"world": world, "numel": numel, "width": args.width, "layout": args.layout,
                       "rows": rows}, f, indent=1)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--numel", type=int, default=4_000_000)
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--layout", choices=("rows", "elements"), default="rows")
    p.add_argument("--densities", type=float, nargs="+",
                   default=[0.001, 0.01, 0.03, 0.1, 0.2, 0.3, 0.5, 0.7])
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        init = f"file://{os.path.join(tmp, 'store')}"
        mp.start_processes(worker, args=(args, init), nprocs=args.world, start_method="spawn")
    return 0


if __name__ == "__main__":
    sys.exit(main())
