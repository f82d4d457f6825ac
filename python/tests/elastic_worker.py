"""One worker of test_elastic_restart.py, launched by torchrun --max-restarts 1.

A small DDP model (sparse EmbeddingBag + Linear) trained with zen's hook for
--steps steps. Generation 0 (TORCHELASTIC_RESTART_COUNT=0): rank 1 SIGKILLs
itself at the start of --kill-step, so torchrun stops the group and starts
generation 1, which reconnects zen through the new rendezvous and resumes
from the last checkpoint (rank 0 writes one after every step). At the end,
every rank compares its parameters with a reference trained here, in one
process, on the union of all ranks' batches (the same SGD steps DDP takes)
and writes --out/result.<gen>.<rank>.json.
"""

import argparse
import json
import os
import signal
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import zen.torch

ROWS, WIDTH, BATCH = 64, 8, 4


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.EmbeddingBag(ROWS, WIDTH, mode="sum", sparse=True)
        self.output = nn.Linear(WIDTH, 1)

    def forward(self, x):
        return self.output(self.embedding(x))


def batch(step, rank):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randint(0, ROWS, (BATCH, 3), generator=g), torch.randn(BATCH, 1, generator=g)


def make_model():
    torch.manual_seed(0)
    return Model()


def reference(steps, world, lr):
    """Plain SGD on the mean of the ranks' losses: what DDP computes."""
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for step in range(steps):
        opt.zero_grad()
        loss = sum(F.mse_loss(model(x), y) for x, y in (batch(step, r) for r in range(world)))
        (loss / world).backward()
        opt.step()
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--kill-step", type=int, default=3)
    ap.add_argument("--out", required=True)
    ap.add_argument("--sync", choices=["zen", "ddp"], default="zen",
                    help="ddp: plain DDP (Gloo), the control")
    args = ap.parse_args()
    gen = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    lr = 0.1
    started = time.time()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = make_model()
    ckpt = os.path.join(args.out, "checkpoint.pt")
    first = 0
    if os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        first = state["step"] + 1
    ddp = nn.parallel.DistributedDataParallel(model)
    if args.sync == "zen":
        zen.torch.register(ddp)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    print(f"[gen {gen} rank {rank}] start at step {first}", flush=True)
    for step in range(first, args.steps):
        if gen == 0 and rank == 1 and step == args.kill_step:
            print(f"[gen {gen} rank {rank}] SIGKILL at step {step}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        x, y = batch(step, rank)
        opt.zero_grad()
        F.mse_loss(ddp(x), y).backward()
        opt.step()
        print(f"[gen {gen} rank {rank}] step {step} done", flush=True)
        if rank == 0:
            torch.save({"model": model.state_dict(), "step": step}, ckpt + ".tmp")
            os.replace(ckpt + ".tmp", ckpt)
    ref = reference(args.steps, world, lr)
    err = max(((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()
              for a, b in zip(model.parameters(), ref.parameters()))
    result = {"gen": gen, "rank": rank, "first_step": first, "max_rel_error": err,
              "seconds": time.time() - started}
    with open(os.path.join(args.out, f"result.{gen}.{rank}.json"), "w") as f:
        json.dump(result, f)
    print(f"[gen {gen} rank {rank}] finished: {result}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
