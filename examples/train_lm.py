#!/usr/bin/env python3
"""Trains a small language model with a large vocabulary on GCIDE text with
DistributedDataParallel, synchronizing gradients with zen or with plain Gloo.

    . .venv/bin/activate        # torch 2.13.0; zen from `pip install .` (or PYTHONPATH=build/python)
    torchrun --standalone --nproc-per-node 2 examples/train_lm.py --sync zen
    ... --sync gloo                 # the same run with DDP's own allreduce/allgather
    ... --model dense               # nn.Embedding(sparse=False): zero rows in dense buckets
    ... --model none                # no trainable embedding: dense gradients only
    ... --values bf16               # zen: values at half width on the wire
    ... --transport process_group   # zen over the process group's own collectives
    ... --device cuda               # CUDA tensors, NCCL (zen: transport process_group)
    ... --timeline /tmp/tl.json     # per-bucket hook start/end against backward

Model (--model sparse, the default): nn.Embedding(vocab, 64, sparse=True) ->
LSTM(128) -> Linear(128, vocab). The embedding gradient is row-sparse (only
the rows of this batch's tokens); the output layer's is dense. --model dense
(or --dense-embedding) keeps the embedding dense (sparse=False); --model none
replaces it by a fixed random projection of the tokens (the same on every
rank, not a parameter), so every gradient is dense. Text: the plain text of GCIDE
(/usr/share/dictd/gcide.dict.dz, package dict-gcide), markup removed by
tools/capture/gcide_text.py when present, tokenized into the `--vocab` most
frequent words (+ <unk>). Every rank builds the same vocabulary and takes
every world-th window of the token stream.

Rank 0 prints the loss of its batch (9 significant digits: the float32
value exactly) and the global tokens/s for every step, then a summary (for
zen: payload bytes this rank sent and the scheme `auto` chose per tensor).
With the same arguments, `--sync zen` and `--sync gloo` print the same
losses; bit for bit on 2 ranks (docs/sections/pytorch.md says where else).

--timeline PATH: rank 0 writes, per step, when backward started and ended,
when the optimizer step ended, and for every bucket when the hook started
it and when its future was completed (time.perf_counter; with --sync gloo a
hook doing exactly DDP's own arithmetic records the same), as JSON; and
prints step time against compute-only + communication-only time and the
fraction of the communication hidden behind backward.
"""

import argparse
import collections
import gc
import gzip
import itertools
import json
import os
import re
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GCIDE = "/usr/share/dictd/gcide.dict.dz"
WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sync", choices=["zen", "gloo"], default="zen")
    p.add_argument("--scheme", default=None, help="zen scheme id (default: zen's default, auto)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=16, help="sequences per rank and step")
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--vocab", type=int, default=30000)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--lr", type=float, default=1.0)
    p.add_argument("--max-paragraphs", type=int, default=30000,
                   help="GCIDE paragraphs read (0 = all; about 250k)")
    p.add_argument("--model", choices=["sparse", "dense", "none"], default="sparse",
                   help="embedding: sparse=True, sparse=False, or none (a fixed random "
                        "projection, not trained: dense gradients only)")
    p.add_argument("--dense-embedding", action="store_true", help="the same as --model dense")
    p.add_argument("--values", choices=["fp32", "bf16", "fp16"], default="fp32",
                   help="zen: ZenState(values=...), the values' width on the wire")
    p.add_argument("--transport", choices=["zen", "process_group"], default=None,
                   help="zen: ZenState(transport=...); default by backend (Gloo: zen, "
                        "NCCL: process_group)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cuda: one GPU per rank (LOCAL_RANK), backend NCCL")
    p.add_argument("--dense-threshold", type=float, default=0.5,
                   help="zen: ZenState(dense_threshold=...); < 0 for None (every bucket on zen)")
    p.add_argument("--timeline", default=None, metavar="PATH",
                   help="rank 0 writes per-step and per-bucket times as JSON to PATH")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def paragraphs(limit):
    """GCIDE plain text, one paragraph per item, read as a stream (so a small
    --max-paragraphs is quick); markup is removed by tools/capture/gcide_text.py
    when present."""
    sys.path.insert(0, os.path.join(REPO, "tools", "capture"))
    try:
        from gcide_text import strip_markup
    except ImportError:
        def strip_markup(block):
            return " ".join(block.split())
    count, block = 0, []
    with gzip.open(GCIDE, "rt", encoding="utf-8", errors="replace") as f:  # dictzip is gzip
        for line in itertools.chain(f, [""]):
            if line.strip():
                block.append(line)
                continue
            text = strip_markup("".join(block))
            block = []
            if len(text) >= 20 and not text.startswith("00-database"):
                yield text
                count += 1
                if limit and count >= limit:
                    return


def tokenize(limit, vocab_size):
    """(token stream, vocabulary size): the vocab_size - 1 most frequent words and <unk> = 0."""
    words = [WORD.findall(p.lower()) for p in paragraphs(limit)]
    counts = collections.Counter(w for ws in words for w in ws)
    index = {w: i + 1 for i, (w, _) in enumerate(counts.most_common(vocab_size - 1))}
    stream = [index.get(w, 0) for ws in words for w in ws]
    return torch.tensor(stream, dtype=torch.int64), len(index) + 1


class LanguageModel(nn.Module):
    def __init__(self, vocab, width, hidden, embedding):
        super().__init__()
        if embedding == "none":
            # A fixed random projection of the tokens: the same on every rank
            # (seeded), a plain attribute (not a parameter, not a buffer that
            # DDP would broadcast every step).
            gen = torch.Generator().manual_seed(1234)
            self.codes = torch.randn(vocab, width, generator=gen)
            self.embedding = None
        else:
            self.embedding = nn.Embedding(vocab, width, sparse=embedding == "sparse")
        self.lstm = nn.LSTM(width, hidden, batch_first=True)
        self.output = nn.Linear(hidden, vocab)

    def forward(self, x):
        e = F.embedding(x, self.codes) if self.embedding is None else self.embedding(x)
        h, _ = self.lstm(e)
        return self.output(h)


def gloo_timed_hook(timeline, bucket):
    """Plain DDP's own arithmetic (each rank's gradient scaled by 1/world
    before Gloo sums it; sparse: divided, then coalesced and allreduced),
    with the bucket's start and end times; bit-for-bit what DDP computes
    without a hook."""
    world = dist.get_world_size()
    event = {"bucket": bucket.index(), "path": "gloo", "start": time.perf_counter(), "end": None}
    timeline.append(event)
    buffer = bucket.buffer()
    if buffer.is_sparse:
        buffer = (buffer / world).coalesce()
    else:
        buffer.mul_(1.0 / world)

    def finish(f):
        event["end"] = time.perf_counter()
        return f.value()[0]

    return dist.all_reduce(buffer, async_op=True).get_future().then(finish)


def overlap(steps):
    """Means over the steps (step 0 excluded) of: step time; communication
    busy time (union of the buckets' start..end intervals); exposed
    communication (backward's end minus the last bucket's start: backward
    only waits then); compute-only = step - exposed; and the fraction of the
    communication hidden behind backward's compute."""
    rows = []
    for s in steps[1:]:
        buckets = sorted((b["start"], b["end"]) for b in s["buckets"] if b["end"] is not None)
        if not buckets:
            continue
        busy, cur_lo, cur_hi = 0.0, None, None
        for lo, hi in buckets:
            if cur_hi is None or lo > cur_hi:
                if cur_hi is not None:
                    busy += cur_hi - cur_lo
                cur_lo, cur_hi = lo, hi
            else:
                cur_hi = max(cur_hi, hi)
        busy += cur_hi - cur_lo
        last_start = max(lo for lo, _ in buckets)
        exposed = max(0.0, s["backward_end"] - last_start)
        step = s["step_end"] - s["step_start"]
        rows.append((step, busy, exposed, step - exposed))
    if not rows:
        return None
    n = len(rows)
    step, busy, exposed, compute = (sum(r[k] for r in rows) / n for k in range(4))
    hidden = max(0.0, busy - exposed) / busy if busy > 0 else 0.0
    return {"steps": n, "step_s": step, "comm_s": busy, "exposed_comm_s": exposed,
            "compute_s": compute, "hidden_fraction": hidden}


def main():
    args = parse_args()
    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl")
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    t0 = time.time()
    stream, vocab = tokenize(args.max_paragraphs, args.vocab)
    n = len(stream) // (args.seq_len + 1)
    windows = stream[: n * (args.seq_len + 1)].view(n, args.seq_len + 1)[rank::world]
    if rank == 0:
        print(f"[train_lm] {world} ranks, sync {args.sync}, vocab {vocab}, {len(stream)} tokens "
              f"({time.time() - t0:.1f} s to read and tokenize)", flush=True)

    torch.manual_seed(args.seed)
    embedding = "dense" if args.dense_embedding else args.model
    model = LanguageModel(vocab, args.width, args.hidden, embedding).to(device)
    if model.embedding is None:
        model.codes = model.codes.to(device)  # an attribute: .to() leaves it
    ddp = nn.parallel.DistributedDataParallel(model)
    state = None
    timeline = None
    if args.sync == "zen":
        import zen.torch
        threshold = None if args.dense_threshold < 0 else args.dense_threshold
        state = zen.torch.register(ddp, scheme=args.scheme, values=args.values,
                                   transport=args.transport,
                                   dense_threshold=threshold, timeline=bool(args.timeline))
        timeline = state.timeline
    elif args.timeline:
        timeline = []
        ddp.register_comm_hook(timeline, gloo_timed_hook)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    steps = []

    tokens_per_step = world * args.batch * args.seq_len
    rates = []
    for step in range(args.steps):
        start = time.perf_counter()
        rows = torch.arange(step * args.batch, (step + 1) * args.batch) % len(windows)
        chunk = windows[rows].to(device)
        x, y = chunk[:, :-1], chunk[:, 1:]
        opt.zero_grad()
        loss = F.cross_entropy(ddp(x).reshape(-1, vocab), y.reshape(-1))
        backward_start = time.perf_counter()
        loss.backward()
        backward_end = time.perf_counter()
        opt.step()
        end = time.perf_counter()
        rate = tokens_per_step / (end - start)
        if timeline is not None:
            steps.append({"step": step, "step_start": start, "backward_start": backward_start,
                          "backward_end": backward_end, "optimizer_end": end, "step_end": end,
                          "buckets": list(timeline)})
            timeline.clear()
        if step > 0:  # step 0 includes zen's connect and DDP's first-iteration work
            rates.append(rate)
        if rank == 0:
            print(f"step {step:4d}  loss {loss.item():.9g}  tokens/s {rate:9.0f}", flush=True)

    if rank == 0:
        mean = sum(rates) / len(rates) if rates else float("nan")
        print(f"[train_lm] sync {args.sync}: mean tokens/s {mean:.0f} over steps 1-{args.steps - 1}")
        if args.timeline:
            summary = overlap(steps)
            with open(args.timeline, "w") as f:
                json.dump({"sync": args.sync, "model": embedding, "world": world, "steps": steps,
                           "overlap": summary}, f)
            if summary:
                print(f"[train_lm] timeline: step {1e3 * summary['step_s']:.1f} ms vs compute-only "
                      f"{1e3 * summary['compute_s']:.1f} + communication-only "
                      f"{1e3 * summary['comm_s']:.1f} ms = "
                      f"{1e3 * (summary['compute_s'] + summary['comm_s']):.1f} ms; "
                      f"{100 * summary['hidden_fraction']:.0f}% of the communication hidden "
                      f"behind backward ({summary['steps']} steps; {args.timeline})")
        if state is not None:
            print(f"[train_lm] zen scheme '{state.scheme_id}', transport '{state.transport}': "
                  f"rank 0 sent {state.bytes_sent} payload bytes; what ran per bucket "
                  "(latest step):")
            buckets = {}
            for name, ran in state.decisions().items():
                buckets.setdefault((ran["bucket"], ran["path"], ran["scheme"]), []).append(name)
            for (index, path, scheme), names in sorted(buckets.items()):
                how = "the process group's allreduce" if path == "allreduce" else f"zen, {scheme}"
                print(f"[train_lm]   bucket {index} ({path}): {how}: {', '.join(names)}")
    # Every rank past its last collective before any rank tears down, and
    # DDP (which holds the process group) gone first: without this, torch
    # 2.13's Gloo aborted one run in 6 at exit on 2 ranks ("terminate called
    # without an active exception"), after all steps, with plain DDP too.
    dist.barrier()
    del ddp, opt, model, state
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
