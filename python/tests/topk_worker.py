"""One rank of the top-k hook tests (started by test_topk_hook.py).

    topk_worker.py --rank R --world N --init file:///tmp/x --out DIR SCENARIO [SCENARIO ...]

Each scenario writes DIR/<scenario>.<rank>.json: {"ok": true, "result": ...}
or {"ok": false, "error": traceback}. References are independent of the
hook: each rank's selection is recomputed with torch (a stable sort by |x|),
its contribution summed with torch.distributed.all_reduce (Gloo), and plain
DDP for the warm-up.
"""

import argparse
import datetime
import json
import os
import sys
import traceback

import numpy as np

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import zen
import zen.torch
from zen.sparsify import TopKState, topk_hook


class FakeBucket:
    """What topk_hook uses of torch's GradBucket, over a given flat buffer."""

    def __init__(self, index, buffer, params, last=True):
        self._index, self._buffer, self._params, self._last = index, buffer, params, last

    def index(self):
        return self._index

    def buffer(self):
        return self._buffer

    def parameters(self):
        return self._params

    def gradients(self):
        out, offset = [], 0
        for p in self._params:
            out.append(self._buffer[offset:offset + p.numel()].view(p.shape))
            offset += p.numel()
        return out

    def is_last(self):
        return self._last


def reference_topk(acc, k):
    """Mask of the k largest |acc| (ties: lowest index), by a stable sort."""
    order = torch.sort(acc.abs(), descending=True, stable=True).indices[:k]
    mask = torch.zeros(acc.numel(), dtype=torch.bool)
    mask[order] = True
    return mask


SHAPES = [(64, 40), (40,), (20, 30), (50, 50)]  # 2560 sparse, bias, 600 < min_numel, 2500


OUT_DIR = None  # the --out directory (main)


def scenario_reference(rank, world, momentum=None, exact=True, fuse=True, record_path=None,
                       split=None, coalesce=False):
    # split: the number of parameters in DDP's first bucket (two buckets per
    # step, the second one last); None: one bucket.
    ratio, min_numel, warmup, steps = 0.05, 1000, 1, 5
    torch.manual_seed(0)
    params = [nn.Parameter(torch.zeros(s)) for s in SHAPES]
    state = TopKState(ratio=ratio, warmup_steps=warmup, min_numel=min_numel, momentum=momentum,
                      exact=exact, zen_state=zen.torch.ZenState(), fuse=fuse, record=record_path,
                      record_steps=2, record_start=2, coalesce=coalesce)
    contributions = []  # this rank's sent values per step, dense
    n = sum(p.numel() for p in params)
    res_ref = [torch.zeros(p.numel()) for p in params]
    vel_ref = [torch.zeros(p.numel()) for p in params]
    gen = torch.Generator().manual_seed(100 + rank)
    checked = []
    for step in range(steps):
        grad = torch.randn(n, generator=gen) * (1 + rank)
        buffer = grad.clone()
        if split is None:
            bucket = FakeBucket(0, buffer, params)
            result = topk_hook(state, bucket).wait()
            assert result is buffer or torch.equal(result, buffer)
        else:
            n0 = sum(p.numel() for p in params[:split])
            first = FakeBucket(0, buffer[:n0], params[:split], last=False)
            last = FakeBucket(1, buffer[n0:], params[split:], last=True)
            f0 = topk_hook(state, first)
            if coalesce and step >= warmup:
                # Coalesced: nothing moves before the step's last bucket.
                assert not f0.done(), "the first bucket's exchange did not wait for the last"
            f1 = topk_hook(state, last)
            result = torch.cat([f0.wait(), f1.wait()])
            assert torch.equal(result, buffer)
        contribution = torch.zeros(n)
        offset = 0
        if step < warmup and momentum is None:
            # As DDP's reducer: each bucket scaled, then summed on its own.
            parts = [grad] if split is None else [grad[:n0], grad[n0:]]
            expected = [part * (1.0 / world) for part in parts]
            for part in expected:
                dist.all_reduce(part)
            expected = torch.cat(expected)
            assert torch.equal(result, expected), "warm-up step differs from allreduce/world"
            assert not state.residuals, "warm-up kept a residual"
            checked.append({"step": step, "mode": "warmup"})
            continue
        sent_values = 0
        for j, p in enumerate(params):
            g = grad[offset:offset + p.numel()]
            if momentum is not None:
                vel_ref[j].mul_(momentum).add_(g)
                g = vel_ref[j].clone()
            dense = p.dim() <= 1 or p.numel() < min_numel or step < warmup
            if dense:
                contribution[offset:offset + p.numel()] = g
                sent_values += p.numel()
            else:
                acc = res_ref[j] + g
                k = zen.topk_count(p.numel(), ratio)
                residual = state.residual(p)
                if exact:
                    mask = reference_topk(acc, k)
                    assert int(mask.sum()) == k
                else:
                    # Sampled: the hook's own choice, checked for consistency:
                    # sent + residual == acc, and everything sent is at
                    # least as large as everything kept.
                    mask = residual == 0
                    mask &= acc != 0
                    assert 0.5 * k <= int(mask.sum()) <= 1.5 * k, (int(mask.sum()), k)
                    assert acc[mask].abs().min() >= acc[~mask].abs().max()
                sent = torch.where(mask, acc, torch.zeros(()))
                kept = torch.where(mask, torch.zeros(()), acc)
                assert torch.equal(residual, kept), f"step {step} param {j}: residual differs"
                res_ref[j] = kept
                if momentum is not None:
                    vel_ref[j][mask] = 0.0
                    assert torch.equal(torch.from_numpy(state.velocities[id(p)]), vel_ref[j])
                contribution[offset:offset + p.numel()] = sent
                sent_values += int(mask.sum())
            offset += p.numel()
        contributions.append(contribution.clone())
        expected = contribution.clone()
        dist.all_reduce(expected)
        expected.div_(world)
        # Summation order differs (zen vs Gloo): within 2 ulps of the largest
        # contribution (|values| < 16 here, ulp 2^-19) after / world.
        torch.testing.assert_close(result, expected, rtol=1e-6, atol=4e-6,
                                   msg=lambda m: f"step {step}: {m}")
        record = state.stats[-1]
        assert record["step"] == step and record["mode"] == "zen", record
        assert record["recorded"] == (record_path is not None and step in (2, 3)), record
        assert record["values_sent"] == sent_values, (record, sent_values)
        assert record["values_total"] == n
        assert record["bytes_sent"] > 0 and record["bytes_received"] > 0, record
        assert record["select_s"] >= 0 and record["sync_s"] > 0, record
        buckets = 1 if split is None else 2
        assert record["buckets"] == buckets, record
        coalesced = coalesce and fuse and not record["recorded"]
        assert record["batches"] == (1 if coalesced else buckets), record
        checked.append({"step": step, "fraction": record["fraction"],
                        "bytes_sent": record["bytes_sent"]})
    assert state.step == steps
    if record_path is not None:
        return check_recorded(rank, world, record_path, contributions, params, min_numel)
    return checked


def check_recorded(rank, world, path, contributions, params, min_numel):
    """The trace holds, for recorded steps 2 and 3 (trace steps 0 and 1),
    exactly what every rank sent: per parameter its selection (every value
    of a dense one), and step<k>.all the whole bucket."""
    # Steps 2 and 3 of every rank (contributions[0] is step 1: step 0 was
    # the warm-up and kept nothing).
    mine = torch.stack([contributions[1], contributions[2]])
    gathered = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine)
    if rank != 0:
        return None
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools", "capture"))
    from check_trace_format import load_reader  # the docs' numpy reader
    trace_world, tensors = load_reader()(path)
    assert trace_world == world
    n = sum(p.numel() for p in params)
    expect = {f"step{k}.all" for k in range(2)}
    expect |= {f"step{k}.bucket0.{j}" for k in range(2) for j in range(len(params))}
    assert set(tensors) == expect, sorted(tensors)
    for k in range(2):
        rows, width, ranks = tensors[f"step{k}.all"]
        assert (rows, width) == (n, 1)
        offset = 0
        for j, p in enumerate(params):
            m = p.numel()
            prows, pwidth, pranks = tensors[f"step{k}.bucket0.{j}"]
            assert (prows, pwidth) == (m, 1), (j, prows, pwidth)
            for r in range(world):
                sent = gathered[r][k][offset:offset + m].numpy()
                ids, values = pranks[r]
                dense = p.dim() <= 1 or m < min_numel
                want = np.arange(m) if dense else np.flatnonzero(sent)
                np.testing.assert_array_equal(ids, want)
                np.testing.assert_array_equal(values.reshape(-1), sent[want])
            offset += m
        for r in range(world):
            ids, values = ranks[r]
            full = np.zeros(n, np.float32)
            full[ids] = values.reshape(-1)
            np.testing.assert_array_equal(full, gathered[r][k].numpy())
    return {"path": path, "tensors": len(tensors)}


def scenario_reference_momentum(rank, world):
    return scenario_reference(rank, world, momentum=0.9)


def scenario_reference_sampled(rank, world):
    return scenario_reference(rank, world, exact=False)


def scenario_reference_unfused(rank, world):
    return scenario_reference(rank, world, fuse=False)


def scenario_reference_buckets(rank, world):
    # Two buckets per step (DDP's usual case), coalesced into one exchange.
    return scenario_reference(rank, world, split=2, coalesce=True)


def scenario_reference_buckets_apart(rank, world):
    # Two buckets per step, one exchange each (the default).
    return scenario_reference(rank, world, split=2)


def scenario_reference_record(rank, world):
    path = os.path.join(OUT_DIR, "topk-record.safetensors")
    return scenario_reference(rank, world, record_path=path)


# --- real DDP --------------------------------------------------------------

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(200, 32)
        self.norm = nn.LayerNorm(32)
        self.hidden = nn.Linear(32, 64)
        self.out = nn.Linear(64, 200)

    def forward(self, x):
        return self.out(torch.relu(self.hidden(self.norm(self.emb(x)).mean(1))))


def train(rank, steps, hook_state=None, first=0, prepare=None):
    """Steps first..steps-1 of Net under DDP (SGD), with topk_hook and the
    state hook_state(model) when given; prepare(model, opt, state), when
    given, runs before the first step (e.g. loads a checkpoint)."""
    torch.manual_seed(0)
    model = Net()
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.02)
    if hook_state is not None:
        hook_state = hook_state(model)
        ddp.register_comm_hook(hook_state, topk_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    if prepare is not None:
        prepare(model, opt, hook_state)
    losses = []
    for step in range(first, steps):
        gen = torch.Generator().manual_seed(1000 * step + rank)
        x = torch.randint(0, 200, (16, 8), generator=gen)
        y = torch.randint(0, 200, (16,), generator=gen)
        opt.zero_grad()
        loss = F.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return model, hook_state, losses


def scenario_ddp_warmup(rank, world):
    # Warm-up steps are plain DDP, bit for bit.
    steps = 4
    reference, _, ref_losses = train(rank, steps)
    model, state, losses = train(rank, steps, lambda m: TopKState(
        ratio=0.01, warmup_steps=steps, module=m, min_numel=100))
    for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
        assert torch.equal(p, q), f"parameter {name} differs from plain DDP after warm-up"
    assert losses == ref_losses
    assert [r["mode"] for r in state.stats] == ["pg"] * steps
    return {"losses": losses}


def scenario_ddp_sparse(rank, world, coalesce=False):
    # Sparsified training after a warm-up with a ramp: every rank keeps the
    # same parameters (each applies the same averaged gradient), the kept
    # fraction follows the ramp, and the hook's stats add up.
    steps, warmup, ramp = 8, 2, 3
    model, state, losses = train(rank, steps, lambda m: TopKState(
        ratio=0.01, warmup_steps=warmup, ramp_steps=ramp, module=m, min_numel=100,
        coalesce=coalesce))
    for name, p in model.named_parameters():
        lo, hi = p.detach().clone(), p.detach().clone()
        dist.all_reduce(lo, op=dist.ReduceOp.MIN)
        dist.all_reduce(hi, op=dist.ReduceOp.MAX)
        assert torch.equal(lo, hi), f"parameter {name} differs across ranks"
    ratios = [r["ratio"] for r in state.stats]
    assert ratios[:warmup] == [1.0] * warmup
    assert all(a > b for a, b in zip(ratios[warmup:warmup + ramp + 1],
                                      ratios[warmup + 1:warmup + ramp + 1])), ratios
    assert ratios[-1] == 0.01
    last = state.stats[-1]
    assert last["mode"] == "zen" and 0 < last["fraction"] < 0.2, last
    # DDP's several buckets (bucket_cap_mb=0.02): one exchange per step
    # coalesced, else one per bucket.
    assert last["buckets"] > 1, last
    assert last["batches"] == (1 if coalesce else last["buckets"]), last
    # The sparsified parameters' residuals hold what was not sent: non-zero.
    assert any(r.any() for r in state.residuals.values())
    assert all(x == x for x in losses)
    return {"losses": losses, "stats": state.stats}


def scenario_ddp_sparse_coalesced(rank, world):
    return scenario_ddp_sparse(rank, world, coalesce=True)


def scenario_checkpoint(rank, world):
    # Training saved after 3 of 7 steps (in the middle of the ramp, momentum
    # correction on) and resumed in a new model, DDP and TopKState from what
    # torch.save wrote of each (every rank its own file, read back with
    # weights_only=True) ends bit for bit where the run without the stop
    # ends; without the state's checkpoint (a fresh TopKState) it does not.
    steps, stop = 7, 3

    def options(m):
        return TopKState(ratio=0.01, warmup_steps=1, ramp_steps=3, momentum=0.5, module=m,
                         min_numel=100)

    def run(first, last, saved=None, load_topk=True):
        kept = {}

        def prepare(model, opt, state):
            kept["opt"] = opt
            if saved is not None:
                ckpt = torch.load(saved, weights_only=True)
                model.load_state_dict(ckpt["model"])
                opt.load_state_dict(ckpt["opt"])
                if load_topk:
                    state.load_state_dict(ckpt["topk"])

        model, state, _ = train(rank, last, options, first, prepare)
        return model, state, kept["opt"]

    reference, ref_state, _ = run(0, steps)
    model, state, opt = run(0, stop)
    path = os.path.join(OUT_DIR, f"checkpoint.{rank}.pt")
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                "topk": state.state_dict()}, path)
    resumed, resumed_state, _ = run(stop, steps, path)
    assert resumed_state.step == ref_state.step == steps
    assert [r["ratio"] for r in resumed_state.stats] == [r["ratio"] for r in ref_state.stats[stop:]]
    for (name, p), (_, q) in zip(resumed.named_parameters(), reference.named_parameters()):
        assert torch.equal(p, q), f"parameter {name} differs after the resume"
    for table in ("residuals", "velocities"):
        mine, ref = getattr(resumed_state, table), getattr(ref_state, table)
        names = {id(p): n for n, p in resumed.named_parameters()}
        ref_names = {id(p): n for n, p in reference.named_parameters()}
        assert {names[k]: v.tolist() for k, v in mine.items()} == \
            {ref_names[k]: v.tolist() for k, v in ref.items()}, f"{table} differ after the resume"
    fresh, _, _ = run(stop, steps, path, load_topk=False)
    assert any(not torch.equal(p, q) for p, q in zip(fresh.parameters(), reference.parameters())), \
        "resuming without the TopKState's checkpoint gave the same parameters"
    # What load_state_dict refuses, before changing anything.
    saved = torch.load(path, weights_only=True)["topk"]
    other = TopKState(ratio=0.02, warmup_steps=1, ramp_steps=3, momentum=0.5, module=reference)
    expect_value_error(lambda: other.load_state_dict(saved), "ratio=0.01")
    other.load_state_dict(saved, strict=False)
    assert other.step == stop
    nameless = TopKState(ratio=0.01, warmup_steps=1, ramp_steps=3, momentum=0.5)
    expect_value_error(lambda: nameless.load_state_dict(saved), "module=model")
    bad = dict(saved, residuals={"out.weight": torch.zeros(7)})
    fresh_state = options(reference)
    expect_value_error(lambda: fresh_state.load_state_dict(bad), "'out.weight'")
    assert fresh_state.step == 0 and not fresh_state.residuals
    return {"step": resumed_state.step, "residuals": len(resumed_state.residuals)}


def expect_value_error(fn, must_contain):
    try:
        fn()
    except ValueError as e:
        assert must_contain in str(e), f"ValueError without '{must_contain}': {e}"
        return
    raise AssertionError(f"expected ValueError containing '{must_contain}'")


SCENARIOS = {
    "reference": scenario_reference,
    "reference_momentum": scenario_reference_momentum,
    "reference_sampled": scenario_reference_sampled,
    "reference_unfused": scenario_reference_unfused,
    "reference_buckets": scenario_reference_buckets,
    "reference_buckets_apart": scenario_reference_buckets_apart,
    "reference_record": scenario_reference_record,
    "ddp_warmup": scenario_ddp_warmup,
    "ddp_sparse": scenario_ddp_sparse,
    "ddp_sparse_coalesced": scenario_ddp_sparse_coalesced,
    "checkpoint": scenario_checkpoint,
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--init", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("scenarios", nargs="+", choices=sorted(SCENARIOS))
    args = parser.parse_args()
    global OUT_DIR
    OUT_DIR = args.out
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=args.init, rank=args.rank,
                            world_size=args.world, timeout=datetime.timedelta(seconds=60))
    failed = False
    for name in args.scenarios:
        try:
            result = {"ok": True, "result": SCENARIOS[name](args.rank, args.world)}
        except Exception:  # recorded for the test to report
            result = {"ok": False, "error": traceback.format_exc()}
            failed = True
        with open(os.path.join(args.out, f"{name}.{args.rank}.json"), "w") as f:
            json.dump(result, f)
    dist.destroy_process_group()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
