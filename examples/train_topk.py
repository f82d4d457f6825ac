#!/usr/bin/env python3
"""Convergence of top-k sparsification with and without error feedback:
a small transformer language model on GCIDE text, trained with dense DDP,
with zen's top-k hook (error feedback) and with top-k that drops what it
does not send, from the same seed and data.

    PYTHONPATH=build/python /usr/bin/python3 -m torch.distributed.run --standalone \
        --nproc_per_node 4 --redirects 2 --tee 2 examples/train_topk.py --steps 400 --out /tmp/topk.json
    python3 examples/train_topk.py --plot /tmp/topk.json docs/performance/topk-convergence.png

Model: nn.Embedding(vocab, d) (dense gradient) -> 2 causal transformer
layers (d, 4 heads, ff 2d) -> Linear(d, vocab); Adam. Text and tokenizer:
examples/train_lm.py's (the GCIDE plain text, the --vocab most frequent
words). Every rank takes every world-th window. The sparsified runs keep
`--ratio` of each matrix's values per step (biases and norms dense) after
`--warmup` dense steps and a `--ramp`-step geometric ramp (DGC).

Rank 0 writes the per-step loss (mean over ranks), the held-out loss at the
end, and the hook's per-step stats to --out (JSON); --plot draws the curves
(needs matplotlib only, not torch).
"""

import argparse
import importlib.util
import json
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = ("dense", "topk", "topk-noef")


def plot(path, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    data = json.load(open(path))
    fig, ax = plt.subplots(figsize=(7, 4))
    window = 10
    for mode in MODES:
        if mode not in data["runs"]:
            continue
        losses = data["runs"][mode]["losses"]
        smooth = [sum(losses[max(0, i - window + 1):i + 1]) / len(losses[max(0, i - window + 1):i + 1])
                  for i in range(len(losses))]
        final = data["runs"][mode]["eval_loss"]
        ax.plot(smooth, label=f"{mode} (held-out {final:.3f})")
    a = data["args"]
    ax.set_title(f"{a['world']} ranks, top-{a['ratio'] * 100:g}%, warm-up {a['warmup']}+{a['ramp']} "
                 f"steps ({window}-step mean)", fontsize=9)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (mean over ranks)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    print(f"wrote {png}")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=8, help="sequences per rank and step")
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--vocab", type=int, default=5000)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--ratio", type=float, default=0.01)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--ramp", type=int, default=20)
    p.add_argument("--max-paragraphs", type=int, default=20000)
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--scheme", default=None,
                   help="zen scheme of the sparsified items (default: zen's default, auto)")
    p.add_argument("--out", default=None)
    return p.parse_args()


def main():
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch import nn

    from zen.sparsify import TopKState, topk_hook

    spec = importlib.util.spec_from_file_location("train_lm", os.path.join(REPO, "examples",
                                                                          "train_lm.py"))
    train_lm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train_lm)

    class TinyTransformer(nn.Module):
        def __init__(self, vocab, d, seq_len):
            super().__init__()
            self.embedding = nn.Embedding(vocab, d)
            self.position = nn.Parameter(torch.zeros(seq_len, d))
            layer = nn.TransformerEncoderLayer(d, 4, 2 * d, dropout=0.0, batch_first=True)
            self.layers = nn.TransformerEncoder(layer, 2)
            self.norm = nn.LayerNorm(d)
            self.output = nn.Linear(d, vocab)
            mask = torch.triu(torch.full((seq_len, seq_len), float("-inf")), diagonal=1)
            self.register_buffer("mask", mask)

        def forward(self, x):
            h = self.embedding(x) + self.position[: x.shape[1]]
            h = self.layers(h, mask=self.mask[: x.shape[1], : x.shape[1]])
            return self.output(self.norm(h))

    args = parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    stream, vocab = train_lm.tokenize(args.max_paragraphs, args.vocab)
    n = len(stream) // (args.seq_len + 1)
    windows = stream[: n * (args.seq_len + 1)].view(n, args.seq_len + 1)
    held_out = windows[-64:]
    mine = windows[:-64][rank::world]
    if rank == 0:
        print(f"[train_topk] {world} ranks, vocab {vocab}, {len(stream)} tokens, "
              f"{len(mine)} windows per rank", flush=True)
    out = {"args": dict(vars(args), world=world), "runs": {}}
    for mode in args.modes.split(","):
        torch.manual_seed(args.seed)
        model = TinyTransformer(vocab, args.width, args.seq_len)
        ddp = nn.parallel.DistributedDataParallel(model)
        state = None
        if mode != "dense":
            state = TopKState(ratio=args.ratio, warmup_steps=args.warmup, ramp_steps=args.ramp,
                              module=model, error_feedback=(mode == "topk"), scheme=args.scheme)
            ddp.register_comm_hook(state, topk_hook)
        opt = torch.optim.Adam(model.parameters(), lr=args.lr)
        losses, t0 = [], time.time()
        for step in range(args.steps):
            rows = torch.arange(step * args.batch, (step + 1) * args.batch) % len(mine)
            chunk = mine[rows]
            x, y = chunk[:, :-1], chunk[:, 1:]
            opt.zero_grad()
            loss = F.cross_entropy(ddp(x).reshape(-1, vocab), y.reshape(-1))
            loss.backward()
            opt.step()
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            losses.append(mean.item() / world)
            if rank == 0 and step % 25 == 0:
                print(f"{mode:10s} step {step:4d} loss {losses[-1]:.4f} "
                      f"({time.time() - t0:.0f} s)", flush=True)
        with torch.no_grad():
            x, y = held_out[:, :-1], held_out[:, 1:]
            eval_loss = F.cross_entropy(model(x).reshape(-1, vocab), y.reshape(-1)).item()
        run = {"losses": losses, "eval_loss": eval_loss, "seconds": time.time() - t0}
        if state is not None:
            run["stats"] = state.stats
        out["runs"][mode] = run
        if rank == 0:
            tail = sum(losses[-20:]) / len(losses[-20:])
            print(f"[train_topk] {mode}: last-20 mean loss {tail:.4f}, held-out {eval_loss:.4f}",
                  flush=True)
    if rank == 0 and args.out:
        with open(args.out, "w") as f:
            json.dump(out, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--plot":
        plot(sys.argv[2], sys.argv[3])
    else:
        main()
