#!/usr/bin/env python3
"""FSDP2 (fully_shard) training with zen's sparse reduce-scatter or FSDP2's
own, on CPU with Gloo:

    PYTHONPATH=build/python .venv/bin/torchrun --standalone --nproc-per-node 2 \
        examples/train_fsdp.py --sync zen --rows 1000000 --steps 20

Model (--model embedding): nn.Embedding(--rows, --width) (dense gradient:
only the rows of the batch's tokens are non-zero) -> mean over the tokens ->
--layers x [Linear(width, width), ReLU] -> Linear(width, --classes); every
layer and the embedding under its own fully_shard, then the root. --model
dense drops the embedding (inputs are random vectors): every gradient is
dense, so zen's calls go through its fallback. SGD. Each rank draws its
own batch of --batch x --tokens token ids (uniform over the rows) per step,
the same for both --sync settings, so two runs see the same data.

--sync zen: zen.fsdp.SparseReduceScatter on every FSDP module, its exchanges
on the process group's collectives (--transport process_group, the default)
or on zen's C++ communicator through a zen.torch.ZenState's context
(--transport zen; CPU). --sync fsdp:
a timing wrapper around the group's dist.reduce_scatter_tensor, which is
what FSDP2's default reduce-scatter calls. Per step it prints the loss (this
rank's), the step time (zero_grad to optimizer step), the reduce-scatter
time (the sum of the calls' wall times; FSDP calls them synchronously inside
backward) and the reduce-scatter bytes this rank sent: zen's count (payload
+ counts exchange), or for fsdp (world - 1) x chunk bytes per call (what a
ring or direct reduce-scatter sends). Rank 0 prints; --json PATH writes
rank 0's per-step figures and the medians after --warmup steps.
"""

import argparse
import datetime
import json
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter

from zen.fsdp import SparseReduceScatter


class TimedReduceScatter(ReduceScatter):
    """Times another ReduceScatter's calls; counts a dense reduce-scatter's
    bytes when it has no count of its own."""

    def __init__(self, inner=None):
        self.inner = inner
        self.seconds = 0.0
        self.bytes_sent = 0

    def allocate(self, size, *, dtype, device):
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
        start = time.perf_counter()
        if self.inner is not None:
            work = self.inner(output_tensor, input_tensor, group, op, async_op)
            self.bytes_sent += self.inner.last_bytes_sent
        else:
            work = dist.reduce_scatter_tensor(output_tensor, input_tensor, op=op, group=group,
                                              async_op=async_op)
            self.bytes_sent += (group.size() - 1) * output_tensor.numel() * output_tensor.element_size()
        self.seconds += time.perf_counter() - start
        return work


def build(args, world):
    torch.manual_seed(0)
    mesh = init_device_mesh("cpu", (world,))
    layers = []
    if args.model == "embedding":
        layers.append(nn.Embedding(args.rows, args.width))
    for _ in range(args.layers):
        layers += [nn.Linear(args.width, args.width), nn.ReLU()]
    layers.append(nn.Linear(args.width, args.classes))
    model = nn.Sequential(*layers)
    for m in model:
        if any(True for _ in m.parameters()):
            fully_shard(m, mesh=mesh, reshard_after_forward=args.reshard_after_forward)
    fully_shard(model, mesh=mesh, reshard_after_forward=args.reshard_after_forward)
    return model


def batch(args, rank, step):
    g = torch.Generator().manual_seed(1_000_003 * step + rank)
    labels = torch.randint(0, args.classes, (args.batch,), generator=g)
    if args.model == "embedding":
        return torch.randint(0, args.rows, (args.batch, args.tokens), generator=g), labels
    return torch.randn(args.batch, args.tokens, args.width, generator=g), labels


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sync", choices=("zen", "fsdp"), default="zen")
    p.add_argument("--model", choices=("embedding", "dense"), default="embedding")
    p.add_argument("--rows", type=int, default=100_000, help="embedding rows")
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--layers", type=int, default=1, help="hidden Linear+ReLU layers")
    p.add_argument("--classes", type=int, default=4)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--tokens", type=int, default=16, help="tokens per sample")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=1, help="steps left out of the medians")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--reshard-after-forward", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--max-fraction", type=float, default=0.5, help="SparseReduceScatter(max_fraction=...)")
    p.add_argument("--transport", choices=("process_group", "zen"), default="process_group",
                   help="--sync zen: how its counts and payload move (the process group's collectives, "
                        "or zen's communicator through a ZenState)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    p.add_argument("--json", help="rank 0 writes its figures here")
    args = p.parse_args()
    if args.steps <= args.warmup:
        p.error("--steps must exceed --warmup")

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))  # env:// from torchrun
    rank, world = dist.get_rank(), dist.get_world_size()
    model = build(args, world)
    inner = None
    if args.sync == "zen":
        transport = {}
        if args.transport == "zen":
            from zen.torch import ZenState  # zen's C++ extension: only for this transport
            transport = {"zen_state": ZenState(transport="zen")}
        inner = SparseReduceScatter(max_fraction=args.max_fraction, **transport)
    comm = TimedReduceScatter(inner)
    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.set_custom_reduce_scatter(comm)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)

    rows = []
    for step in range(args.steps):
        inputs, labels = batch(args, rank, step)
        comm.seconds, comm.bytes_sent = 0.0, 0
        start = time.perf_counter()
        opt.zero_grad()
        logits = model(inputs).mean(1)
        loss = nn.functional.cross_entropy(logits, labels)
        loss.backward()
        opt.step()
        step_s = time.perf_counter() - start
        rows.append({"step": step, "loss": loss.item(), "step_s": step_s, "rs_s": comm.seconds,
                     "rs_bytes": comm.bytes_sent})
        if rank == 0:
            print(f"step {step:3d}  loss {loss.item():.6f}  step {step_s * 1e3:8.1f} ms  "
                  f"rs {comm.seconds * 1e3:8.1f} ms  rs bytes/rank {comm.bytes_sent:,}", flush=True)

    measured = rows[args.warmup:]
    summary = {
        "sync": args.sync, "transport": args.transport if inner is not None else None, "model": args.model,
        "world": world, "rows": args.rows, "width": args.width,
        "reshard_after_forward": args.reshard_after_forward, "steps": args.steps, "warmup": args.warmup,
        "losses": [r["loss"] for r in rows], "per_step": rows,
        "step_s": statistics.median(r["step_s"] for r in measured),
        "rs_s_per_step": statistics.median(r["rs_s"] for r in measured),
        "rs_bytes_per_step": statistics.median(r["rs_bytes"] for r in measured),
        "samples_per_s": args.batch * world / statistics.median(r["step_s"] for r in measured),
    }
    if inner is not None:
        summary["sparse_calls"], summary["fallback_calls"] = inner.sparse_calls, inner.fallback_calls
    if rank == 0:
        print(f"{args.sync}{'/' + args.transport if inner is not None else ''}: median step {summary['step_s'] * 1e3:.1f} ms, rs {summary['rs_s_per_step'] * 1e3:.1f} ms, "
              f"rs bytes/rank/step {summary['rs_bytes_per_step']:,.0f}, {summary['samples_per_s']:.1f} samples/s "
              f"({world} ranks, reshard_after_forward={args.reshard_after_forward})", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(summary, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
