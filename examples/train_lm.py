#!/usr/bin/env python3
"""Trains a small language model with a large vocabulary on GCIDE text with
DistributedDataParallel, synchronizing gradients with zen or with plain Gloo.

    . .venv/bin/activate        # torch 2.13.0; zen from `pip install .` (or PYTHONPATH=build/python)
    torchrun --standalone --nproc-per-node 2 examples/train_lm.py --sync zen
    ... --sync gloo                 # the same run with DDP's own allreduce/allgather
    ... --dense-embedding           # nn.Embedding(sparse=False): zero rows in dense buckets

Model: nn.Embedding(vocab, 64, sparse=True) -> LSTM(128) -> Linear(128, vocab).
The embedding gradient is row-sparse (only the rows of this batch's tokens);
the output layer's is dense. Text: the plain text of GCIDE
(/usr/share/dictd/gcide.dict.dz, package dict-gcide), markup removed by
tools/capture/gcide_text.py when present, tokenized into the `--vocab` most
frequent words (+ <unk>). Every rank builds the same vocabulary and takes
every world-th window of the token stream.

Rank 0 prints the loss of its batch and the global tokens/s for every step,
then a summary (for zen: payload bytes this rank sent and the scheme `auto`
chose per tensor). With the same arguments, `--sync zen` and `--sync gloo`
print the same losses (to float32 rounding).
"""

import argparse
import collections
import gzip
import itertools
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
    p.add_argument("--dense-embedding", action="store_true",
                   help="nn.Embedding(sparse=False): the embedding gradient is a dense bucket")
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
    def __init__(self, vocab, width, hidden, sparse):
        super().__init__()
        self.embedding = nn.Embedding(vocab, width, sparse=sparse)
        self.lstm = nn.LSTM(width, hidden, batch_first=True)
        self.output = nn.Linear(hidden, vocab)

    def forward(self, x):
        h, _ = self.lstm(self.embedding(x))
        return self.output(h)


def main():
    args = parse_args()
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
    model = LanguageModel(vocab, args.width, args.hidden, sparse=not args.dense_embedding)
    ddp = nn.parallel.DistributedDataParallel(model)
    state = None
    if args.sync == "zen":
        import zen.torch
        state = zen.torch.register(ddp, scheme=args.scheme)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)

    tokens_per_step = world * args.batch * args.seq_len
    rates = []
    for step in range(args.steps):
        start = time.time()
        rows = torch.arange(step * args.batch, (step + 1) * args.batch) % len(windows)
        chunk = windows[rows]
        x, y = chunk[:, :-1], chunk[:, 1:]
        opt.zero_grad()
        loss = F.cross_entropy(ddp(x).reshape(-1, vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        rate = tokens_per_step / (time.time() - start)
        if step > 0:  # step 0 includes zen's connect and DDP's first-iteration work
            rates.append(rate)
        if rank == 0:
            print(f"step {step:4d}  loss {loss.item():.6f}  tokens/s {rate:9.0f}", flush=True)

    if rank == 0:
        mean = sum(rates) / len(rates) if rates else float("nan")
        print(f"[train_lm] sync {args.sync}: mean tokens/s {mean:.0f} over steps 1-{args.steps - 1}")
        if state is not None:
            chosen = {n: state.decision(n) for n in ("embedding.weight", "output.weight")}
            print(f"[train_lm] zen scheme '{state.scheme_id}': rank 0 sent "
                  f"{state.comm.bytes_sent} payload bytes; auto chose {chosen}; dense buckets "
                  f"on the process group's allreduce: "
                  f"{sorted(i for i, m in state.bucket_modes.items() if m == 'pg')}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
