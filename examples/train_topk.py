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

Communication (scripts/topk-testbed): --sync-timing adds, per step, the
synchronization time, the slowest rank's (max over ranks; it includes
waiting for the ranks that finish their backward later) and the smallest
over ranks (about the rank that arrived last: the collective itself):
- dense: a timing wrapper around torch's default allreduce hook
  (ddp_comm_hooks.default_hooks.allreduce_hook: bucket / world, then a Gloo
  allreduce, as DDP's own reducer does), registered as the comm hook; per
  bucket from the hook's call to its future's completion. "sync" is the span
  from the first bucket's call to the last bucket's completion (the
  definition of the top-k hook's sync_s), "bucket_sum" the sum of the
  per-bucket times;
- topk: the hook's own accounting, select_s + sync_s (selection on the
  autograd thread, plus the span from the first bucket's start to the last
  bucket's completion);
and the step time (zero_grad to optimizer step, excluding the loss
logging's allreduce) for tokens/s. --record PATH writes what the top-k run
sent in --record-steps steps after warm-up and ramp as a zen-trace/1 file
(TopKState(record=...)); those steps are not measured. --checkpoint DIR
saves every rank's model, optimizer and TopKState (state_dict()) after the
last step, --resume DIR goes on from them: the run ends as the run without
the stop. --summary
DENSE.json TOPK.json prints the comparison (needs neither torch nor zen).
"""

import argparse
import gc
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


class DenseSyncTimer:
    """State of timed_allreduce_hook: per step, the span from the first
    bucket's call to the last bucket's completion and the per-bucket sum."""

    def __init__(self, group=None):
        self.group = group
        self.first = self.last = None
        self.total, self.buckets = 0.0, 0

    def take(self):
        """(span_s, bucket_sum_s, buckets) of the step just finished; resets."""
        span = 0.0 if self.first is None else self.last - self.first
        out = (span, self.total, self.buckets)
        self.first = self.last = None
        self.total, self.buckets = 0.0, 0
        return out


def timed_allreduce_hook(timer, bucket):
    """torch's default allreduce hook, timed from its call to its future's completion."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    t0 = time.perf_counter()
    if timer.first is None:
        timer.first = t0

    def done(fut):
        t1 = time.perf_counter()
        timer.total += t1 - t0
        timer.buckets += 1
        timer.last = t1 if timer.last is None else max(timer.last, t1)
        return fut.value()

    return allreduce_hook(timer.group, bucket).then(done)


def _median(values):
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def summarize(dense_path, topk_path):
    """The comparison of a dense and a top-k run made with --sync-timing (lines of text)."""
    runs = {}
    for label, path in (("dense", dense_path), ("topk", topk_path)):
        data = json.load(open(path))
        a = data["args"]
        (_, run), = data["runs"].items()
        # The same steps of both runs: after warm-up, ramp and the recorded steps.
        skip = a["warmup"] + a["ramp"] + a["record_steps"]
        steps = [s for s in run.get("timing", [])[skip:] if not s.get("recorded")]
        if not steps:
            raise SystemExit(f"{path}: no timed step after the first {skip} "
                             "(run with --sync-timing and more --steps)")
        runs[label] = (a, run, steps, skip)
    a, run, _, skip = runs["dense"]
    tokens = a["world"] * a["batch"] * a["seq_len"]
    buckets = "DDP's default buckets" if a.get("bucket_cap_mb") is None else \
        f"bucket_cap_mb {a['bucket_cap_mb']:g}"
    lines = [f"{a['world']} ranks, batch {a['batch']} x {a['seq_len']} tokens per rank, "
             f"{run['params']} parameters, {buckets}{', unfused' if a.get('no_fuse') else ''}"
             f"{', one exchange per step (coalesced)' if a.get('coalesce') else ''}; "
             "per step the slowest rank's time; median (min-max) "
             f"over the steps after the first {skip} (warm-up, ramp, recorded)"]

    def fig(values):
        return (f"{1e3 * _median(values):.1f} ms ({1e3 * min(values):.1f}-"
                f"{1e3 * max(values):.1f})")

    med = {}
    for label, (a, run, steps, _) in runs.items():
        sync = [s["sync_s"] for s in steps]
        sums = [s["bucket_sum_s"] for s in steps]
        low = [s.get("sync_min_s", 0.0) for s in steps]
        med[label] = (_median(sync), _median(sums), _median(low))
        step_s = _median([s["step_s"] for s in steps])
        if label == "dense":
            lines.append(f"dense DDP + Gloo (allreduce hook), {len(steps)} steps:")
            lines.append(f"  sync (first bucket called to last done) {fig(sync)}; "
                         f"sum of bucket times {fig(sums)}")
            ring = 2 * (a["world"] - 1) / a["world"] * 4 * run["params"]
            lines.append(f"  bytes per rank: {ring / 1e6:.2f} MB (ring allreduce of the model, "
                         "computed)")
        else:
            stats = [run["stats"][s["step"]] for s in steps]
            scheme = a.get("scheme") or "default"
            lines.append(f"top-{a['ratio'] * 100:g}% + zen (scheme {scheme}), {len(steps)} steps:")
            lines.append(f"  sync (selection + first bucket started to last done) {fig(sync)}; "
                         f"selection + sum of bucket times {fig(sums)}")
            lines.append(f"  selection {fig([s['select_s'] for s in steps])}, zen span "
                         f"{fig([s['zen_sync_s'] for s in steps])}")
            lines.append(f"  fraction sent {100 * _median([r['fraction'] for r in stats]):.2f}%, "
                         f"bytes per rank (busiest, median) sent "
                         f"{_median([s['bytes_sent'] for s in steps]) / 1e6:.3f} MB, received "
                         f"{_median([s['bytes_received'] for s in steps]) / 1e6:.3f} MB")
        lines.append(f"  sync of the rank that arrived last (smallest over ranks) {fig(low)}")
        lines.append(f"  step {1e3 * step_s:.1f} ms median: {tokens / step_s:.0f} tokens/s")
    ratio = [d / t if t > 0 else float("inf") for d, t in zip(med["dense"], med["topk"])]
    lines.append(f"ratio dense / top-k, sync medians: {ratio[0]:.2f}x (span, slowest rank), "
                 f"{ratio[1]:.2f}x (bucket sums), {ratio[2]:.2f}x (span, last to arrive)")
    return lines


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
    p.add_argument("--sync-timing", action="store_true",
                   help="time every step's synchronization (dense: through a timed allreduce hook)")
    p.add_argument("--record", default=None,
                   help="the top-k run writes what every rank sent as a zen-trace/1 file")
    p.add_argument("--record-steps", type=int, default=3)
    p.add_argument("--bucket-cap-mb", type=float, default=None,
                   help="DDP's bucket_cap_mb (default: DDP's, 25 MiB with a 1 MiB first bucket; "
                        "e.g. 100 puts this model in one bucket: no backward inside the sync span)")
    p.add_argument("--no-fuse", action="store_true",
                   help="TopKState(fuse=False): one zen item per parameter")
    p.add_argument("--coalesce", action="store_true",
                   help="TopKState(coalesce=True): one zen exchange per step, not per DDP bucket")
    p.add_argument("--checkpoint", default=None, metavar="DIR",
                   help="after the last step, every rank saves model, optimizer and TopKState to "
                        "DIR/<mode>.<rank>.pt")
    p.add_argument("--resume", default=None, metavar="DIR",
                   help="every rank starts from DIR/<mode>.<rank>.pt (--checkpoint's) and trains "
                        "on to --steps; the losses are those of the steps after the checkpoint")
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
        ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_cap_mb)
        state = timer = None
        if mode != "dense":
            record = args.record if mode == "topk" else None
            state = TopKState(ratio=args.ratio, warmup_steps=args.warmup, ramp_steps=args.ramp,
                              module=model, error_feedback=(mode == "topk"), scheme=args.scheme,
                              record=record, record_steps=args.record_steps,
                              fuse=not args.no_fuse, coalesce=args.coalesce)
            ddp.register_comm_hook(state, topk_hook)
        elif args.sync_timing:
            timer = DenseSyncTimer()
            ddp.register_comm_hook(timer, timed_allreduce_hook)
        timing = []  # per step: [sync_s, select_s, zen_sync_s, bucket_sum_s, step_s, sent, recv]
        opt = torch.optim.Adam(model.parameters(), lr=args.lr)
        first = 0
        if args.resume:
            # Every rank its own file: top-k residuals differ between ranks.
            ckpt = torch.load(os.path.join(args.resume, f"{mode}.{rank}.pt"), weights_only=True)
            model.load_state_dict(ckpt["model"])
            opt.load_state_dict(ckpt["opt"])
            if state is not None:
                state.load_state_dict(ckpt["topk"])
            first = ckpt["step"]
        losses, t0 = [], time.time()
        for step in range(first, args.steps):
            rows = torch.arange(step * args.batch, (step + 1) * args.batch) % len(mine)
            chunk = mine[rows]
            x, y = chunk[:, :-1], chunk[:, 1:]
            t_step = time.perf_counter()
            opt.zero_grad()
            loss = F.cross_entropy(ddp(x).reshape(-1, vocab), y.reshape(-1))
            loss.backward()
            opt.step()
            t_step = time.perf_counter() - t_step
            if args.sync_timing:
                if timer is not None:
                    span, bucket_sum, _ = timer.take()
                    timing.append([span, 0.0, span, bucket_sum, t_step, 0.0, 0.0])
                else:
                    r = state.stats[-1]
                    timing.append([r["select_s"] + r["sync_s"], r["select_s"], r["sync_s"],
                                   r["select_s"] + r["bucket_s"], t_step, r["bytes_sent"] or 0,
                                   r["bytes_received"] or 0])
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            losses.append(mean.item() / world)
            if rank == 0 and step % 25 == 0:
                print(f"{mode:10s} step {step:4d} loss {losses[-1]:.4f} "
                      f"({time.time() - t0:.0f} s)", flush=True)
        if args.checkpoint:
            os.makedirs(args.checkpoint, exist_ok=True)
            torch.save({"step": args.steps, "model": model.state_dict(), "opt": opt.state_dict(),
                        "topk": state.state_dict() if state is not None else None},
                       os.path.join(args.checkpoint, f"{mode}.{rank}.pt"))
        with torch.no_grad():
            x, y = held_out[:, :-1], held_out[:, 1:]
            eval_loss = F.cross_entropy(model(x).reshape(-1, vocab), y.reshape(-1)).item()
        run = {"losses": losses, "first_step": first, "eval_loss": eval_loss,
               "seconds": time.time() - t0,
               "params": sum(p.numel() for p in model.parameters())}
        if state is not None:
            run["stats"] = state.stats
        if args.sync_timing:
            # Per step, the largest value over ranks (the rank that waited
            # longest: it also waited for the others to arrive) and, for the
            # sync times, the smallest (about the last rank to arrive: the
            # collective itself).
            worst = torch.tensor(timing, dtype=torch.float64)
            best = worst.clone()
            dist.all_reduce(worst, op=dist.ReduceOp.MAX)
            dist.all_reduce(best, op=dist.ReduceOp.MIN)
            keys = ("sync_s", "select_s", "zen_sync_s", "bucket_sum_s", "step_s", "bytes_sent",
                    "bytes_received")
            run["timing"] = [dict(zip(keys, row), step=i, sync_min_s=low[0],
                                  bucket_sum_min_s=low[3])
                             for i, (row, low) in enumerate(zip(worst.tolist(), best.tolist()))]
            if state is not None:
                for entry, r in zip(run["timing"], state.stats):
                    entry["recorded"] = r.get("recorded", False)
        out["runs"][mode] = run
        if rank == 0:
            tail = sum(losses[-20:]) / len(losses[-20:])
            print(f"[train_topk] {mode}: last-20 mean loss {tail:.4f}, held-out {eval_loss:.4f}",
                  flush=True)
    if rank == 0 and args.out:
        with open(args.out, "w") as f:
            json.dump(out, f)
    # Every rank past its last collective before any rank tears down, and
    # DDP (which holds the process group) gone first: without this, torch
    # 2.13's Gloo aborted one run in 6 at exit on 2 ranks ("terminate called
    # without an active exception"), after all steps, with plain DDP too.
    dist.barrier()
    del ddp
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--plot":
        plot(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "--summary":
        print("\n".join(summarize(sys.argv[2], sys.argv[3])))
    else:
        main()
