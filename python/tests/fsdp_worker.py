"""One rank of the FSDP2 sparse reduce-scatter tests (started by test_fsdp.py).

    fsdp_worker.py --rank R --world N --init file:///tmp/x --out DIR SCENARIO [SCENARIO ...]

Each scenario writes DIR/<scenario>.<rank>.json: {"ok": true, "result": ...}
or {"ok": false, "error": traceback}. The references are independent of
zen.fsdp: Gloo's own ``dist.reduce_scatter_tensor`` on the same input, FSDP2
trained with its own reduce-scatter, and a plain (unsharded) model whose
gradients are summed with ``dist.all_reduce``.
"""

import argparse
import datetime
import json
import os
import sys
import time
import traceback
import warnings

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

from zen.fsdp import MismatchError, SparseReduceScatter

# reduce_scatter_tensor is the reference; torch 2.13 warns that it is deprecated.
warnings.filterwarnings("ignore", message=".*reduce_scatter_tensor.*")

OPS = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG}
DTYPES = {"fp32": torch.float32, "fp64": torch.float64, "bf16": torch.bfloat16}


def rounding(out, ref, inp, op, world):
    """max |out - ref| in units of eps x the sum over ranks of |value| (what
    two summation orders can differ by), the sum of |value| from Gloo in fp64."""
    mag = torch.empty(out.numel(), dtype=torch.float64)
    dist.reduce_scatter_tensor(mag, inp.double().abs())
    if op == dist.ReduceOp.AVG:
        mag /= world
    eps = torch.finfo(out.dtype).eps
    diff = (out.double() - ref.double()).abs()
    return float((diff / (eps * mag.clamp_min(torch.finfo(out.dtype).tiny))).max()) if diff.numel() else 0.0


def make_input(rank, world, chunk, layout, dtype, seed):
    """A flat reduce-scatter input of world x chunk elements, chunk d laid out as
    layout[d]: "zero", "dense", "rows" (runs of 7, 5% of them), "scatter" (2%
    of elements), "half" (50% of elements). Each rank draws its own values."""
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    parts = []
    for kind in layout:
        x = torch.randn(chunk, generator=g, dtype=torch.float64)
        if kind == "zero":
            x.zero_()
        elif kind == "rows":
            keep = (torch.rand((chunk + 6) // 7, generator=g) < 0.05).repeat_interleave(7)[:chunk]
            x *= keep
        elif kind == "scatter":
            x *= torch.rand(chunk, generator=g) < 0.02
        elif kind == "half":
            x *= torch.rand(chunk, generator=g) < 0.5
        else:
            assert kind == "dense", kind
        parts.append(x)
    return torch.cat(parts).to(dtype)


def layouts(world):
    """The chunk layouts the collective scenarios run (make_input's kinds)."""
    return [
        ["rows"] * world,                                     # embedding-like: runs
        ["zero"] + ["scatter"] * (world - 1),                 # an all-zero chunk
        ["dense"] + ["rows"] * (world - 1),                   # an all-dense chunk
        ["half", "zero"] + ["scatter"] * (world - 2),         # uneven: half dense, empty, sparse
        ["zero"] * world,                                     # nothing at all
        ["dense"] * world,                                    # everything: the fallback
    ]


def collective(rank, world):
    """The reduce-scatter alone against Gloo's, on odd chunk sizes, uneven
    chunks, all-zero and all-dense chunks, bf16/fp32/fp64, SUM and AVG, and
    every encoding forced in turn."""
    comm = SparseReduceScatter(max_fraction=1.5)  # keep the dense-ish cases on the sparse path too
    cases, formats = [], {}
    for dname, dtype in DTYPES.items():
        for chunk in (1, 13, 1000):  # 1000: whole 8-byte words (slots of 2 fp32, 4 bf16)
            for li, layout in enumerate(layouts(world)):
                for oname, op in OPS.items():
                    # Each encoding forced in turn on the 1000-element chunks.
                    forcings = (None, ("coo", "dense"), ("bitmap", "dense"), ("runs", "dense"))
                    for forced in forcings if chunk == 1000 else (None,):
                        comm.formats = forced or ("runs", "coo", "bitmap", "dense")
                        inp = make_input(rank, world, chunk, layout, dtype, seed=li * 7 + chunk)
                        before = inp.clone()
                        out = torch.full((chunk,), 3.0, dtype=dtype)
                        comm(out, inp, dist.group.WORLD, op)
                        ref = torch.empty(chunk, dtype=dtype)
                        dist.reduce_scatter_tensor(ref, inp, op=op)
                        assert torch.equal(inp, before), "the input was modified"
                        for f, n in comm.last_formats.items():
                            formats[f] = formats.get(f, 0) + n
                        cases.append({"dtype": dname, "chunk": chunk, "layout": li, "op": oname,
                                      "slot": comm.last_slot,
                                      "forced": bool(forced), "equal": torch.equal(out, ref),
                                      "rounding": rounding(out, ref, inp, op, world), "sparse": comm.last_sparse})
    # The default threshold sends a dense input through the group's reduce-scatter.
    dflt = SparseReduceScatter()
    inp = make_input(rank, world, 999, ["dense"] * world, torch.float32, seed=5)
    out, ref = torch.empty(999), torch.empty(999)
    dflt(out, inp, dist.group.WORLD, dist.ReduceOp.AVG)
    dist.reduce_scatter_tensor(ref, inp, op=dist.ReduceOp.AVG)
    fallback = {"sparse": dflt.last_sparse, "equal": torch.equal(out, ref),
                "bytes_sent": dflt.last_bytes_sent, "dense_bytes": (world - 1) * 999 * 4}
    return {"cases": cases, "formats": formats, "fallback": fallback}


def premul(rank, world):
    """PREMUL_SUM (FSDP's divide factor): Gloo has none, so the reference
    multiplies each rank's input and sums; the sparse path and the fallback
    (max_fraction=0) both."""
    res = {}
    for name, frac in (("sparse", 1.5), ("fallback", 0.0)):
        comm = SparseReduceScatter(max_fraction=frac)
        inp = make_input(rank, world, 1001, ["rows"] * world, torch.float32, seed=11)
        out = torch.empty(1001)
        comm(out, inp, dist.group.WORLD, dist.ReduceOp.PREMUL_SUM(0.125))
        ref = torch.empty(1001)
        dist.reduce_scatter_tensor(ref, inp * 0.125)
        res[name] = {"sparse": comm.last_sparse, "equal": torch.equal(out, ref),
                     "rounding": rounding(out, ref, inp * 0.125, dist.ReduceOp.SUM, world)}
    return res


def async_op(rank, world):
    """async_op=True returns a Work; after wait() the output holds the result."""
    comm = SparseReduceScatter()
    inp = make_input(rank, world, 1001, ["rows"] * world, torch.float32, seed=3)
    out = torch.zeros(1001)
    work = comm(out, inp, dist.group.WORLD, dist.ReduceOp.SUM, async_op=True)
    done_before = work.is_completed()
    work.wait()
    ref = torch.empty(1001)
    dist.reduce_scatter_tensor(ref, inp)
    return {"done_before": done_before, "done_after": work.is_completed(),
            "equal": torch.equal(out, ref), "rounding": rounding(out, ref, inp, dist.ReduceOp.SUM, world)}


def _disagree_on_numel_then_dtype(comm, rank, world):
    """Two calls of comm in which rank 1 passes one more element, then
    another dtype; per call None, or the MismatchError's message."""
    msgs = []
    for bad in ("numel", "dtype"):
        n = world * 10 + (1 if bad == "numel" and rank == 1 else 0)
        dtype = torch.float64 if bad == "dtype" and rank == 1 else torch.float32
        try:
            comm(torch.empty(10, dtype=dtype), torch.ones(n, dtype=dtype), dist.group.WORLD, dist.ReduceOp.SUM)
            msgs.append(None)
        except MismatchError as e:
            msgs.append(str(e))
    return msgs


def mismatch(rank, world):
    """Rank 1 passes one more element, then (second call) another dtype, then
    (another object) another max_fraction: every rank raises MismatchError
    naming rank 1; the group still works after."""
    comm = SparseReduceScatter()
    msgs = _disagree_on_numel_then_dtype(comm, rank, world)
    # Ranks configured with different thresholds would decide differently.
    odd = SparseReduceScatter(max_fraction=0.25 if rank == 1 else 0.5)
    try:
        odd(torch.empty(10), torch.ones(world * 10), dist.group.WORLD, dist.ReduceOp.SUM)
        msgs.append(None)
    except MismatchError as e:
        msgs.append(str(e))
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    return {"messages": msgs, "after": t.item()}


# -- FSDP2 training ------------------------------------------------------------
ROWS, WIDTH, HIDDEN, CLASSES = 1001, 24, 13, 5  # odd sizes: every shard is padded


def build(world, dtype, reshard, mp=None):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(ROWS, WIDTH), nn.Linear(WIDTH, HIDDEN), nn.ReLU(),
                          nn.Linear(HIDDEN, CLASSES)).to(dtype)
    mesh = init_device_mesh("cpu", (world,))
    kw = {"mesh": mesh, "reshard_after_forward": reshard}
    if mp is not None:
        kw["mp_policy"] = mp
    fully_shard(model[0], **kw)  # the embedding alone: its reduce-scatter is sparse
    fully_shard(model[1], **kw)  # a dense layer: falls back
    fully_shard(model, **kw)     # the root: the last layer
    return model


def batch(rank, step, dtype):
    g = torch.Generator().manual_seed(100 * step + rank)
    tokens = torch.randint(0, ROWS, (4, 6), generator=g)
    labels = torch.randint(0, CLASSES, (4,), generator=g)
    return tokens, labels


def train(world, rank, dtype, reshard, use_zen, steps=10, mp=None, divide=None, **zen_args):
    """zen_args: SparseReduceScatter's transport / zen_state."""
    model = build(world, dtype, reshard, mp)
    comm = None
    modules = [m for m in model.modules() if isinstance(m, FSDPModule)]
    if divide is not None:
        for m in modules:
            m.set_reduce_scatter_divide_factor(divide)
    if use_zen:
        comm = SparseReduceScatter(**zen_args)
        for m in modules:
            m.set_custom_reduce_scatter(comm)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for step in range(steps):
        tokens, labels = batch(rank, step, dtype)
        logits = model(tokens).mean(1)
        loss = nn.functional.cross_entropy(logits.float(), labels)
        loss.backward()
        opt.step()
        opt.zero_grad()
    params = [p.to_local().detach().clone() for p in model.parameters()]
    return params, comm


def compare(a, b):
    equal = all(torch.equal(x, y) for x, y in zip(a, b))
    diff = max(float((x.double() - y.double()).abs().max()) if x.numel() else 0.0 for x, y in zip(a, b))
    return equal, diff


def fsdp_train(rank, world):
    """10 SGD steps under fully_shard with zen and with FSDP's own
    reduce-scatter: fp32 (op AVG) with both reshard settings, fp64 (op SUM
    and a post-divide), and bf16 reduce_dtype (mixed precision, op AVG)."""
    res = {}
    mp = MixedPrecisionPolicy(reduce_dtype=torch.bfloat16)
    for name, dtype, reshard, policy in (("fp32", torch.float32, True, None),
                                         ("fp32_noreshard", torch.float32, False, None),
                                         ("fp64", torch.float64, True, None),
                                         ("bf16_reduce", torch.float32, True, mp)):
        ref, _ = train(world, rank, dtype, reshard, False, mp=policy)
        got, comm = train(world, rank, dtype, reshard, True, mp=policy)
        equal, diff = compare(got, ref)
        res[name] = {"equal": equal, "diff": diff, "sparse_calls": comm.sparse_calls,
                     "fallback_calls": comm.fallback_calls, "calls": comm.calls}
    return res


def fsdp_divide(rank, world):
    """set_reduce_scatter_divide_factor(f) (PREMUL_SUM, which Gloo lacks):
    one backward's sharded gradients against a plain model's gradients summed
    with dist.all_reduce and divided by f, sharded as FSDP shards (dim 0,
    chunks of ceil(rows / world))."""
    factor = 4.0
    model = build(world, torch.float32, True)
    comm = SparseReduceScatter()
    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.set_gradient_divide_factor(factor)  # set_reduce_scatter_divide_factor before torch 2.13
            m.set_custom_reduce_scatter(comm)
    torch.manual_seed(0)
    plain = nn.Sequential(nn.Embedding(ROWS, WIDTH), nn.Linear(WIDTH, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES))
    tokens, labels = batch(rank, 0, torch.float32)
    for m in (model, plain):
        nn.functional.cross_entropy(m(tokens).mean(1), labels).backward()
    worst = 0.0
    for p, q in zip(model.parameters(), plain.parameters()):
        full = q.grad.clone()
        dist.all_reduce(full)
        full /= factor
        rows = -(-full.shape[0] // world)
        want = full[rank * rows:(rank + 1) * rows]
        got = p.grad.to_local()
        assert got.shape == want.shape, (got.shape, want.shape)
        worst = max(worst, float((got - want).abs().max()) if got.numel() else 0.0)
    return {"max_abs_diff": worst, "sparse_calls": comm.sparse_calls}


# -- transport "zen": zen's communicator through a zen.Context --------------------
def zen_collective(rank, world):
    """transport "zen" against transport "process_group" on the collective
    scenario's cases (the same plan, encodings and sum order, only the
    exchange differs: bit for bit on any world size) and against Gloo's
    reduce_scatter_tensor; PREMUL_SUM; the default threshold's fallback."""
    zcomm = SparseReduceScatter(max_fraction=1.5, transport="zen")
    pcomm = SparseReduceScatter(max_fraction=1.5, transport="process_group")
    cases, formats = [], {}
    ops = dict(OPS, premul=dist.ReduceOp.PREMUL_SUM(0.125))
    for dname, dtype in DTYPES.items():
        for chunk in (1, 13, 1000):
            for li, layout in enumerate(layouts(world)):
                for oname, op in ops.items():
                    forcings = (None, ("coo", "dense"), ("bitmap", "dense"), ("runs", "dense"))
                    for forced in forcings if chunk == 1000 else (None,):
                        zcomm.formats = pcomm.formats = forced or ("runs", "coo", "bitmap", "dense")
                        inp = make_input(rank, world, chunk, layout, dtype, seed=li * 7 + chunk)
                        before = inp.clone()
                        out, pg = torch.full((chunk,), 3.0, dtype=dtype), torch.full((chunk,), 5.0, dtype=dtype)
                        zcomm(out, inp, dist.group.WORLD, op)
                        pcomm(pg, inp, dist.group.WORLD, op)
                        ref = torch.empty(chunk, dtype=dtype)
                        premul = oname == "premul"
                        dist.reduce_scatter_tensor(ref, inp * 0.125 if premul else inp,
                                                   op=dist.ReduceOp.SUM if premul else op)
                        assert torch.equal(inp, before), "the input was modified"
                        for f, n in zcomm.last_formats.items():
                            formats[f] = formats.get(f, 0) + n
                        cases.append({"dtype": dname, "chunk": chunk, "layout": li, "op": oname,
                                      "forced": bool(forced), "sparse": zcomm.last_sparse,
                                      "same_plan": (zcomm.last_sparse == pcomm.last_sparse
                                                    and zcomm.last_formats == pcomm.last_formats
                                                    and zcomm.last_bytes_sent == pcomm.last_bytes_sent),
                                      "equal_pg": torch.equal(out, pg), "equal": torch.equal(out, ref),
                                      "rounding": rounding(out, ref, inp * 0.125 if premul else inp,
                                                           dist.ReduceOp.SUM if premul else op, world)})
    dflt = SparseReduceScatter(transport="zen")
    inp = make_input(rank, world, 999, ["dense"] * world, torch.float32, seed=5)
    out, ref = torch.empty(999), torch.empty(999)
    dflt(out, inp, dist.group.WORLD, dist.ReduceOp.AVG)
    dist.reduce_scatter_tensor(ref, inp, op=dist.ReduceOp.AVG)
    fallback = {"sparse": dflt.last_sparse, "equal": torch.equal(out, ref)}
    return {"cases": cases, "formats": formats, "fallback": fallback, "transport": zcomm.transport,
            "zen_bytes": zcomm._zen_states[dist.group.WORLD].bytes_sent}


def zen_async(rank, world):
    """async_op=True on transport "zen": a Work at once; the exchange
    completes on zen's progress thread without wait() (FSDP's overlap), and
    wait() then sums; the result equals transport "process_group"'s."""
    comm = SparseReduceScatter(transport="zen")
    inp = make_input(rank, world, 1001, ["rows"] * world, torch.float32, seed=3)
    out = torch.zeros(1001)
    work = comm(out, inp, dist.group.WORLD, dist.ReduceOp.SUM, async_op=True)
    done_before = work.is_completed()
    deadline = time.monotonic() + 30
    while not work._work.done() and time.monotonic() < deadline:  # no wait(): the progress thread moves it
        time.sleep(0.001)
    progressed = work._work.done()
    untouched = bool((out == 0).all())  # the sum runs in wait(), on the caller's thread
    work.wait()
    ref = torch.empty(1001)
    SparseReduceScatter(transport="process_group")(ref, inp, dist.group.WORLD, dist.ReduceOp.SUM)
    return {"done_before": done_before, "progressed": progressed, "untouched": untouched,
            "done_after": work.is_completed(), "equal_pg": torch.equal(out, ref)}


def zen_mismatch(rank, world):
    """mismatch's disagreements on transport "zen": every rank raises
    MismatchError naming rank 1; zen's communicator stays in step (a later
    call succeeds) and so does the group."""
    comm = SparseReduceScatter(transport="zen")
    msgs = _disagree_on_numel_then_dtype(comm, rank, world)
    state = comm._zen_states[dist.group.WORLD]
    odd = SparseReduceScatter(max_fraction=0.25 if rank == 1 else 0.5, zen_state=state)
    try:
        odd(torch.empty(10), torch.ones(world * 10), dist.group.WORLD, dist.ReduceOp.SUM)
        msgs.append(None)
    except MismatchError as e:
        msgs.append(str(e))
    # Not a CPU tensor: ValueError on every rank before anything is sent.
    try:
        comm(torch.empty(10, device="meta"), torch.empty(world * 10, device="meta"), dist.group.WORLD,
             dist.ReduceOp.SUM)
        msgs.append(None)
    except ValueError as e:
        msgs.append(str(e))
    out = torch.empty(10)
    comm(out, torch.ones(world * 10), dist.group.WORLD, dist.ReduceOp.SUM)
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    return {"messages": msgs, "after_zen": out.tolist(), "after": t.item(), "transport": odd.transport}


def zen_timeout(rank, world):
    """A peer that never joins the call: rank 0 raises zen.TransportError
    (not MismatchError or ValueError) after its ZenState's timeout."""
    from zen.torch import ZenState
    state = ZenState(timeout=2.0)
    state.context  # every rank connects (the rendezvous needs all of them)
    dist.barrier()
    res = {"error": None, "seconds": None}
    if rank == 0:
        comm = SparseReduceScatter(zen_state=state)
        start = time.monotonic()
        try:
            comm(torch.empty(10), torch.ones(world * 10), dist.group.WORLD, dist.ReduceOp.SUM)
        except Exception as e:  # recorded: the test asserts its class
            res["error"] = type(e).__module__ + "." + type(e).__name__
        res["seconds"] = time.monotonic() - start
    dist.barrier()
    return res


def zen_train(rank, world):
    """fsdp_train's four settings with transport "zen" (fp32 through
    zen_state=ZenState(): Gloo's default transport), against FSDP2's own
    reduce-scatter and against transport "process_group"."""
    from zen.torch import ZenState
    res = {}
    mp = MixedPrecisionPolicy(reduce_dtype=torch.bfloat16)
    state = ZenState()
    for name, dtype, reshard, policy in (("fp32", torch.float32, True, None),
                                         ("fp32_noreshard", torch.float32, False, None),
                                         ("fp64", torch.float64, True, None),
                                         ("bf16_reduce", torch.float32, True, mp)):
        ref, _ = train(world, rank, dtype, reshard, False, mp=policy)
        pg, _ = train(world, rank, dtype, reshard, True, mp=policy, transport="process_group")
        zen_args = {"zen_state": state} if name == "fp32" else {"transport": "zen"}
        got, comm = train(world, rank, dtype, reshard, True, mp=policy, **zen_args)
        equal, diff = compare(got, ref)
        res[name] = {"equal": equal, "diff": diff, "equal_pg": compare(got, pg)[0],
                     "transport": comm.transport, "sparse_calls": comm.sparse_calls,
                     "fallback_calls": comm.fallback_calls}
    return res


SCENARIOS = {f.__name__: f for f in (collective, premul, async_op, mismatch, fsdp_train, fsdp_divide,
                                     zen_collective, zen_async, zen_mismatch, zen_timeout, zen_train)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--init", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("scenarios", nargs="+", choices=sorted(SCENARIOS))
    args = parser.parse_args()
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
