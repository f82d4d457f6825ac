#!/usr/bin/env python3
"""Captures real sparse gradients of a small language model as a zen-trace/1 file.

What it does (docs/workloads.md has the figures, docs/trace-format.md the format):
  1. trains (once, then cached) a SentencePiece BPE tokenizer on the plain text
     of GCIDE (/usr/share/dictd/gcide.dict.dz, see gcide_text.py) and tokenizes it;
  2. builds an LM: nn.Embedding(vocab, width, sparse=True) -> LSTM(hidden) ->
     untied nn.Linear(hidden, vocab);
  3. simulates N data-parallel workers in one process: the token stream is cut
     into (seq_len + 1)-token windows, shuffled with the seed and dealt
     round-robin to the workers (like DistributedSampler); every worker holds
     the same parameters and runs forward/backward on its own batch;
  4. records, for every worker, the coalesced sparse embedding gradient (rows
     present = tokens in its batch) and, for each --topk-params weight, the
     DGC-style top-5% (by magnitude) of its dense gradient, element-sparse;
  5. averages the workers' gradients (what AllReduce would give) and takes an
     SGD step, so consecutive steps differ; --warmup-steps such steps run
     before recording starts.

Tensors are named step<k>.embedding and step<k>.<param>_topk (e.g.
step0.output_topk for output.weight, step0.lstm_weight_hh_l0_topk).

Usage (the shipped trace; see docs/workloads.md):
  .venv/bin/python tools/capture/capture_trace.py --out data/traces/gcide-lm-n8.safetensors
(.venv/: torch 2.13.0 and sentencepiece, created by scripts/lib.sh's zen_venv;
the shipped trace was captured with torch 1.13, its metadata says so.)
"""
import argparse
import os
import shlex
import sys
import time

import numpy as np
import sentencepiece as spm
import torch
import torch.nn.functional as F
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gcide_text import GCIDE, gcide_paragraphs  # noqa: E402
from zen_trace import write_zen_trace  # noqa: E402


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="output .safetensors path")
    p.add_argument("--workers", type=int, default=8, help="data-parallel world size N")
    p.add_argument("--vocab-size", type=int, default=32000, help="BPE vocabulary (embedding rows)")
    p.add_argument("--width", type=int, default=64, help="embedding width")
    p.add_argument("--hidden", type=int, default=64, help="LSTM hidden size")
    p.add_argument("--layers", type=int, default=1, help="LSTM layers")
    p.add_argument("--batch", type=int, default=16, help="sequences per worker per step")
    p.add_argument("--seq-len", type=int, default=64, help="tokens per sequence")
    p.add_argument("--steps", type=int, default=3, help="recorded steps")
    p.add_argument("--warmup-steps", type=int, default=5, help="training steps before recording")
    p.add_argument("--lr", type=float, default=0.5, help="SGD learning rate")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--topk-ratio", type=float, default=0.05, help="DGC top-k fraction")
    p.add_argument("--topk-params", default="lstm.weight_hh_l0",
                   help="comma-separated dense weights whose top-k gradient is recorded "
                        "(output.weight is the output projection; empty for none)")
    p.add_argument("--index-dtype", choices=("I64", "I32"), default="I64")
    p.add_argument("--cache-dir", default=os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "zen-capture"),
        help="where the tokenizer model and token ids are cached")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    return p.parse_args(argv)


def log(*parts):
    print("[capture]", *parts, file=sys.stderr, flush=True)


def tokenizer_and_tokens(cache_dir, vocab_size):
    """Trains or loads the cached BPE model; returns (processor, int32 token stream)."""
    os.makedirs(cache_dir, exist_ok=True)
    prefix = os.path.join(cache_dir, f"gcide-bpe{vocab_size}")
    if not os.path.exists(prefix + ".model"):
        log(f"training SentencePiece BPE, vocab {vocab_size}, on {GCIDE} (cached in {cache_dir})")
        t = time.time()
        spm.SentencePieceTrainer.train(
            sentence_iterator=gcide_paragraphs(), model_prefix=prefix, vocab_size=vocab_size,
            model_type="bpe", character_coverage=0.9995, input_sentence_size=1000000,
            num_threads=2, minloglevel=2)
        log(f"tokenizer trained in {time.time() - t:.0f} s")
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    tokens_path = prefix + "-tokens.npy"
    if not os.path.exists(tokens_path):
        log("tokenizing GCIDE")
        eos = sp.eos_id()
        pieces = sp.encode(list(gcide_paragraphs()))
        stream = np.fromiter((t for ids in pieces for t in (*ids, eos)), dtype=np.int32)
        np.save(tokens_path, stream)
    return sp, np.load(tokens_path)


class LanguageModel(nn.Module):
    def __init__(self, vocab, width, hidden, layers):
        super().__init__()
        self.embedding = nn.Embedding(vocab, width, sparse=True)
        self.lstm = nn.LSTM(width, hidden, num_layers=layers, batch_first=True)
        self.output = nn.Linear(hidden, vocab)  # untied from the embedding

    def forward(self, x):
        h, _ = self.lstm(self.embedding(x))
        return self.output(h)


class Shards:
    """(seq_len + 1)-token windows, shuffled once and dealt round-robin to workers."""

    def __init__(self, tokens, seq_len, workers, seed):
        n = len(tokens) // (seq_len + 1)
        windows = torch.from_numpy(tokens[: n * (seq_len + 1)].astype(np.int64)).view(n, seq_len + 1)
        order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
        self.shards = [windows[order[w::workers]] for w in range(workers)]

    def batch(self, worker, step, batch):
        shard = self.shards[worker]
        rows = torch.arange(step * batch, (step + 1) * batch) % len(shard)
        chunk = shard[rows]
        return chunk[:, :-1], chunk[:, 1:]


def topk_name(param):
    base = param[: -len(".weight")] if param.endswith(".weight") else param
    return base.replace(".", "_") + "_topk"


def element_topk(grad, ratio):
    """DGC-style: the top ratio of |grad| entries, as sorted flat ids and [k, 1] values."""
    flat = grad.detach().flatten()
    k = max(1, int(round(ratio * flat.numel())))
    ids = torch.topk(flat.abs(), k, sorted=False).indices.sort().values
    return ids.numpy().astype(np.int64), flat[ids].numpy().reshape(-1, 1).astype(np.float32)


def run_step(model, shards, args, step, record):
    """One data-parallel step: per-worker backward, then the averaged SGD update."""
    params = dict(model.named_parameters())
    sums, losses, rec = {}, [], {}
    for w in range(args.workers):
        model.zero_grad(set_to_none=True)
        x, y = shards.batch(w, step, args.batch)
        loss = F.cross_entropy(model(x).reshape(-1, args.vocab_size), y.reshape(-1))
        loss.backward()
        losses.append(loss.item())
        for name, p in params.items():
            g = p.grad.coalesce() if p.grad.is_sparse else p.grad
            sums[name] = g.clone() if name not in sums else sums[name] + g
        if record:
            g = params["embedding.weight"].grad.coalesce()
            ids = g.indices()[0].numpy().astype(np.int64)
            rec.setdefault("embedding", []).append((ids, g.values().numpy().astype(np.float32)))
            for pname in args.topk:
                rec.setdefault(topk_name(pname), []).append(
                    element_topk(params[pname].grad, args.topk_ratio))
    with torch.no_grad():
        for name, p in params.items():
            g = sums[name].coalesce() if sums[name].is_sparse else sums[name]
            p.add_(g / args.workers, alpha=-args.lr)
    return float(np.mean(losses)), rec


def main(argv):
    args = parse_args(argv)
    args.topk = [s for s in args.topk_params.split(",") if s]
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    sp, tokens = tokenizer_and_tokens(args.cache_dir, args.vocab_size)
    log(f"{len(tokens)} tokens, vocab {sp.get_piece_size()}")
    model = LanguageModel(args.vocab_size, args.width, args.hidden, args.layers)
    for pname in args.topk:
        if pname not in dict(model.named_parameters()):
            sys.exit(f"--topk-params: no parameter {pname!r}; have "
                     f"{', '.join(n for n, _ in model.named_parameters())}")
    shards = Shards(tokens, args.seq_len, args.workers, args.seed)
    t = time.time()
    for step in range(args.warmup_steps):
        loss, _ = run_step(model, shards, args, step, record=False)
    if args.warmup_steps:
        log(f"{args.warmup_steps} warm-up steps, loss {loss:.3f}, {time.time() - t:.1f} s")
    tensors, meta = {}, {}
    for k in range(args.steps):
        loss, rec = run_step(model, shards, args, args.warmup_steps + k, record=True)
        meta[f"loss.step{k}"] = f"{loss:.4f}"
        emb = rec["embedding"]
        log(f"step {k}: loss {loss:.3f}, embedding rows per worker "
            f"{min(len(i) for i, _ in emb)}-{max(len(i) for i, _ in emb)} of {args.vocab_size}")
        tensors[f"step{k}.embedding"] = (args.vocab_size, args.width, emb)
        for pname in args.topk:
            numel = dict(model.named_parameters())[pname].numel()
            tensors[f"step{k}.{topk_name(pname)}"] = (numel, 1, rec[topk_name(pname)])
    meta.update({
        "generator": "tools/capture/capture_trace.py",
        "command": "python3 tools/capture/capture_trace.py " + shlex.join(argv),
        "model": f"Embedding({args.vocab_size},{args.width},sparse) -> LSTM({args.hidden}"
                 f"x{args.layers}) -> Linear({args.hidden},{args.vocab_size}) untied",
        "data": "GCIDE (dict-gcide) plain text, SentencePiece BPE",
        "batch": f"{args.batch}x{args.seq_len} tokens per worker",
        "topk": f"top {args.topk_ratio:g} by magnitude of {','.join(args.topk) or 'none'}",
        "torch": torch.__version__,
    })
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_zen_trace(args.out, args.workers, tensors, meta, index_dtype=args.index_dtype)
    log(f"wrote {args.out}: {len(tensors)} tensors, {os.path.getsize(args.out)} bytes")


if __name__ == "__main__":
    main(sys.argv[1:])
