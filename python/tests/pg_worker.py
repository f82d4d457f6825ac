"""One rank of the zen.process_group tests (test_process_group.py): runs the
named scenarios over a torch.distributed group (Gloo on CPU tensors, or
NCCL on CUDA tensors with --device cuda) and writes each one's outcome to
OUT/<scenario>.<rank>.json. Every rank derives every rank's input from a
seed, so each checks its result against an independent reference computed
locally (float64 sums, and the exact sum in the engine's documented order
computed element by element in Python).
"""

import argparse
import datetime
import json
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist

import zen
from zen.process_group import ProcessGroupEngine

# The group the scenario runs over: None (the world) or a subgroup of the
# first `world` ranks (main() runs each scenario at every world size up to
# the job's, one process start for all).
GROUP = None
# Scenarios run over the whole job only (not over subgroups).
WHOLE_JOB = {"cxx", "bench", "timeout"}

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def read_trace(path):
    """A zen-trace/1 file (docs/trace-format.md, a safetensors file) read with
    torch alone: {tensor: (rows, width, [(ids int64, values float32) per rank])}."""
    with open(path, "rb") as f:
        data = f.read()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__")
    assert meta["format"] == "zen-trace/1", meta.get("format")
    world = int(meta["world_size"])
    base = 8 + n
    types = {"I64": torch.int64, "I32": torch.int32, "F32": torch.float32}

    def array(key):
        h = header[key]
        lo, hi = h["data_offsets"]
        raw = bytearray(data[base + lo:base + hi])
        t = torch.frombuffer(raw, dtype=types[h["dtype"]]) if raw else \
            torch.empty(0, dtype=types[h["dtype"]])
        return t.reshape(h["shape"])

    out = {}
    for key, value in meta.items():
        if not key.endswith(".shape"):
            continue
        name = key[:-len(".shape")]
        rows, width = json.loads(value)
        per_rank = [(array(f"{name}/{r}/indices").to(torch.int64),
                     array(f"{name}/{r}/values").reshape(-1, width)) for r in range(world)]
        out[name] = (rows, width, per_rank)
    return out


def make_input(rank, seed, rows, width, k, dtype, skew=False, empty=()):
    """Rank `rank`'s (ids, values) of a case: k ids (repeats included), values
    small integers plus a fraction (exact in every dtype at these sizes is
    not needed: the reference rounds as the engine documents)."""
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    if rank in empty:
        return torch.empty(0, dtype=torch.int64), torch.empty((0, width), dtype=dtype)
    if skew:
        ids = (torch.rand(k, generator=g) ** 4 * min(rows, 64)).to(torch.int64)
    else:
        ids = torch.randint(0, min(rows, 1 << 62), (k,), generator=g, dtype=torch.int64)
        if rows > 1 << 40:
            ids = (torch.rand(k, generator=g, dtype=torch.float64) * rows).to(torch.int64) % rows
    values = (torch.randn((k, width), generator=g, dtype=torch.float64) * 3).to(dtype)
    return ids, values


def reference(inputs, width, dtype, divisor=None, wire=None):
    """The engine's documented sum: each rank's rows coalesced in input order
    in the sum dtype, divided, rounded to the wire once; summed over ranks in
    ascending rank order (the first contribution assigned); the sum rounded
    to the wire and returned in the input dtype. Also the float64 sum."""
    sum_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    wire = wire or dtype
    acc, exact = {}, {}
    for ids, values in inputs:
        local = {}
        for i, row in zip(ids.tolist(), values.to(sum_dtype)):
            local[i] = local[i] + row if i in local else row.clone()
        for i, row in local.items():
            if divisor is not None:
                row = row / divisor
            row = row.to(wire).to(sum_dtype)
            acc[i] = acc[i] + row if i in acc else row
        for i, row in zip(ids.tolist(), values.to(torch.float64)):
            r = row / divisor if divisor is not None else row
            exact[i] = exact[i] + r if i in exact else r.clone()
    keys = sorted(acc)
    if not keys:
        return (torch.empty(0, dtype=torch.int64), torch.empty((0, width), dtype=dtype),
                torch.empty((0, width), dtype=torch.float64))
    vals = torch.stack([acc[i] for i in keys]).to(wire).to(dtype)
    return torch.tensor(keys), vals, torch.stack([exact[i] for i in keys])


def bits(t):
    t = t.detach().cpu().contiguous()
    return t.view({8: torch.int64, 4: torch.int32, 2: torch.int16}[t.element_size()])


def check_same(out, ref, what, wire=None):
    ids, vals = out
    rids, rvals, exact = ref
    assert ids.device == vals.device, what
    ids, vals = ids.cpu(), vals.cpu()
    assert ids.tolist() == rids.tolist(), f"{what}: ids {ids.tolist()[:10]} != {rids.tolist()[:10]}"
    assert vals.dtype == rvals.dtype, (what, vals.dtype, rvals.dtype)
    if not torch.equal(bits(vals), bits(rvals)):
        bad = (bits(vals) != bits(rvals)).nonzero()[:3].tolist()
        raise AssertionError(f"{what}: values differ from the reference at {bad}")
    tol = {torch.float64: 1e-12, torch.float32: 1e-5, torch.bfloat16: 2e-2,
           torch.float16: 2e-3}[wire or rvals.dtype]
    if exact.numel():
        err = (vals.to(torch.float64) - exact).abs().max().item()
        scale = exact.abs().max().item() + 1
        assert err <= tol * scale * 8, f"{what}: off the float64 sum by {err}"


def scenario_exact(rank, world, device):
    """Every dtype, widths 1 and 5, uniform / skewed ids, empty ranks,
    repeats, a divisor, a narrower wire: bit for bit the documented
    reference, close to the float64 sum, on every rank."""
    eng = ProcessGroupEngine(GROUP)
    cases = 0
    for d, dtype in enumerate(DTYPES):
        for width in (1, 5):
            for case, (rows, k, skew, empty) in enumerate([
                    (1000, 60, False, ()), (1000, 40, True, ()), (5000, 30, False, (1,)),
                    (7, 12, False, ()), (100000, 0, False, tuple(range(world)))]):
                seed = d * 100 + width * 10 + case
                inputs = [make_input(q, seed, rows, width, k, dtype, skew, empty)
                          for q in range(world)]
                ids, values = inputs[rank]
                out = eng.allreduce_sparse(f"t{seed}", rows, ids.to(device), values.to(device))
                check_same(out, reference(inputs, width, dtype), f"{dtype} w{width} case{case}")
                cases += 1
    # DDP's averaging and a bfloat16 wire for float32.
    inputs = [make_input(q, 7, 500, 3, 40, torch.float32) for q in range(world)]
    ids, values = inputs[rank]
    out = eng.allreduce_sparse("avg", 500, ids.to(device), values.to(device), divisor=world)
    check_same(out, reference(inputs, 3, torch.float32, divisor=world), "divisor")
    out = eng.allreduce_sparse("wire", 500, ids.to(device), values.to(device),
                               wire_dtype=torch.bfloat16)
    check_same(out, reference(inputs, 3, torch.float32, wire=torch.bfloat16), "bf16 wire",
               torch.bfloat16)
    return {"cases": cases + 2, "bytes_sent": eng.bytes_sent}


def scenario_huge(rank, world, device):
    """2^31 + 5 and 2^40 rows (2^62 too) with a few non-zeros: exact, and
    memory follows the non-zeros (a dense row count would not fit)."""
    eng = ProcessGroupEngine(GROUP)
    for rows, width in (((1 << 31) + 5, 1), ((1 << 31) + 5, 3), (1 << 40, 1), (1 << 40, 3),
                        (1 << 62, 1), (1 << 60, 3)):
        if True:
            inputs = []
            for q in range(world):
                ids = torch.tensor([rows - 1, 0, (rows // 3) * (q % 2), 12345 + q, rows - 1 - q])
                inputs.append((ids, torch.arange(5 * width, dtype=torch.float32)
                               .view(5, width) + q))
            ids, values = inputs[rank]
            out = eng.allreduce_sparse("huge", rows, ids.to(device), values.to(device))
            check_same(out, reference(inputs, width, torch.float32), f"rows {rows} w{width}")
    return {"stats": {k: v for k, v in eng.last_stats.items() if isinstance(v, int)}}


def ring_reference(mats, steps):
    """Per element: from its step's start rank down the ranks cyclically,
    ranks whose row is zero skipped, the first value assigned."""
    world = len(mats)
    rows, width = mats[0].shape
    out = torch.zeros_like(mats[0])
    firsts = [a for a, _ in steps]
    for i in range(rows):
        present = [bool((m[i] != 0).any()) for m in mats]
        for k in range(width):
            e = i * width + k
            s = steps[max(j for j, f in enumerate(firsts) if f <= e)][1]
            acc = None
            for j in range(world):
                q = (s - j) % world
                if present[q]:
                    acc = mats[q][i, k].clone() if acc is None else mats[q][i, k] + acc
            if acc is not None:
                out[i, k] = acc
    return out


def scenario_dense(rank, world, device):
    """allreduce_rows_: in place, zero rows skipped; ascending rank order
    and a ring order (steps changing inside a row) bit for bit the
    reference; dtypes kept."""
    eng = ProcessGroupEngine(GROUP)
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        mats = []
        for q in range(world):
            g = torch.Generator().manual_seed(50 + q)
            m = torch.randn((40, 6), generator=g, dtype=torch.float64).to(dtype)
            m[torch.rand(40, generator=g) < 0.6] = 0
            mats.append(m)
        mine = mats[rank].clone().to(device)
        eng.allreduce_rows_("dense", mine)
        rows_of = [((q, i), mats[q][i]) for q in range(world) for i in range(40)
                   if bool((mats[q][i] != 0).any())]
        inputs = [(torch.tensor([i for (p, i), _ in rows_of if p == q], dtype=torch.int64),
                   torch.stack([r for (p, _), r in rows_of if p == q]) if any(
                       p == q for (p, _), _ in rows_of) else torch.empty((0, 6), dtype=dtype))
                  for q in range(world)]
        rids, rvals, _ = reference(inputs, 6, dtype)
        expect = torch.zeros((40, 6), dtype=dtype)
        expect[rids] = rvals
        assert torch.equal(bits(mine), bits(expect)), f"dense {dtype} rank order"
        mine = mats[rank].clone().to(device)
        eng.allreduce_rows_("dense.avg", mine, divisor=world)
        rids, rvals, _ = reference(inputs, 6, dtype, divisor=world)
        expect = torch.zeros((40, 6), dtype=dtype)
        expect[rids] = rvals
        assert torch.equal(bits(mine), bits(expect)), f"dense {dtype} divisor"
        steps = [(0, world - 1), (13, 0), (100, 1 % world), (101, 0), (200, world - 1)]
        mine = mats[rank].clone().to(device)
        eng.allreduce_rows_("ring", mine, sum_order=steps)
        ring = ring_reference([m.to(torch.float64 if dtype == torch.float64 else torch.float32)
                               for m in mats], steps).to(dtype)
        assert torch.equal(bits(mine), bits(ring)), f"dense {dtype} ring order"
    return {}


def expect_raise(exc_type, fn, must_contain=()):
    try:
        fn()
    except exc_type as e:
        text = str(e)
        for s in must_contain:
            assert s in text, f"{exc_type.__name__} without {s!r}: {text}"
        return text
    except Exception as e:  # the wrong kind
        raise AssertionError(f"expected {exc_type.__name__}, got {type(e).__name__}: {e}")
    raise AssertionError(f"expected {exc_type.__name__}, nothing raised")


def scenario_mismatch(rank, world, device):
    """Bad input on one rank raises ValueError on every rank; disagreeing
    metadata raises zen.MismatchError on every rank naming both values; the
    next good call is exact."""
    eng = ProcessGroupEngine(GROUP)
    ids = torch.tensor([rank, 3], device=device)
    vals = torch.ones((2, 2), device=device)
    bad = world - 1

    def good():
        i, v = eng.allreduce_sparse("good", 10, ids, vals)
        expect_ids = sorted(set(range(world)) | {3})
        assert i.tolist() == expect_ids, i
        want = [[float(world + (1 if j < world and j == 3 else 0))] * 2 if j == 3 else [1.0, 1.0]
                for j in expect_ids]
        assert v.cpu().tolist() == want, (v, want)

    messages = {}
    cases = {
        "rows": (lambda: eng.allreduce_sparse("m", 12 if rank == bad else 10, ids, vals),
                 zen.MismatchError, ["rows", "10", "12"]),
        "width": (lambda: eng.allreduce_sparse(
            "m", 10, ids, torch.ones((2, 3 if rank == bad else 2), device=device)),
            zen.MismatchError, ["width", "2", "3"]),
        "dtype": (lambda: eng.allreduce_sparse(
            "m", 10, ids, vals.double() if rank == bad else vals),
            zen.MismatchError, ["dtype", "float32", "float64"]),
        "name": (lambda: eng.allreduce_sparse("other" if rank == bad else "m", 10, ids, vals),
                 zen.MismatchError, ["name", "'m'", "'other'"]),
        "id range": (lambda: eng.allreduce_sparse(
            "m", 10, torch.tensor([rank, 10 if rank == bad else 3], device=device), vals),
            ValueError, [f"rank {bad}", "'m'", "ids outside", "10"]),
        "negative id": (lambda: eng.allreduce_sparse(
            "m", 10, torch.tensor([-1 if rank == bad else 0, 3], device=device), vals),
            ValueError, [f"rank {bad}", "-1"]),
        "int values": (lambda: eng.allreduce_sparse(
            "m", 10, ids, vals.to(torch.int32) if rank == bad else vals),
            ValueError, [f"rank {bad}", "unsupported dtype"]),
        "rows range": (lambda: eng.allreduce_sparse("m", (1 << 62) + 1 if rank == bad else 10,
                                                    ids, vals),
                       ValueError, [f"rank {bad}", "rows"]),
        "sum order": (lambda: eng.allreduce_sparse(
            "m", 10, ids, vals, sum_order=[(0, 1 % world)] if rank == bad else "rank"),
            zen.MismatchError, ["sum order"]),
    }
    good()
    for label, (call, exc, needles) in cases.items():
        if world == 1 and exc is zen.MismatchError:
            continue  # one rank agrees with itself
        messages[label] = expect_raise(exc, call, needles)
        good()
    return messages


def scenario_cxx(rank, world, device):
    """The C++ scheme (zen.create_scheme('zen'), the same default seed) on
    the same float32 tensors: identical ids and bits; and the shipped trace's
    tensors (first `world` of its 8 ranks): the same ids and bits, and the
    bytes of both paths for the test to compare."""
    import numpy as np
    import zen.torch
    comm = zen.torch.ZenState().comm
    scheme = zen.create_scheme("zen")
    eng = ProcessGroupEngine(GROUP)
    for width in (1, 4):
        for rows, k in ((1000, 80), (300000, 2000), ((1 << 33) + 3, 50)):
            inputs = [make_input(q, 300 + width, rows, width, k, torch.float32)
                      for q in range(world)]
            ids, values = inputs[rank]
            uniq = torch.unique(ids)  # the C++ path takes unique ids
            vals = torch.zeros((uniq.numel(), width)).index_add_(
                0, torch.searchsorted(uniq, ids), values)
            c_ids, c_vals = scheme.sync(comm, rows, width, uniq.numpy(), vals.numpy(), "cx")
            p_ids, p_vals = eng.allreduce_sparse("cx", rows, uniq.to(device), vals.to(device))
            assert p_ids.cpu().tolist() == np.asarray(c_ids).tolist(), (rows, width)
            assert np.array_equal(p_vals.cpu().numpy().view(np.int32),
                                  np.ascontiguousarray(c_vals, dtype=np.float32).view(np.int32)
                                  .reshape(p_vals.shape)), (rows, width)
    # Bytes on the shipped trace.
    trace = read_trace(os.path.join(os.environ.get("ZEN_REPO", "."),
                                    "data/traces/gcide-lm-n8.safetensors"))
    out = {}
    for tname, (rows, width, per_rank) in trace.items():
        if not tname.startswith("step0."):
            continue
        ids, values = per_rank[rank]
        scheme.sync(comm, rows, width, ids.numpy(), values.numpy(), tname)  # warm (seed round)
        comm.reset_counters()
        c_ids, c_vals = scheme.sync(comm, rows, width, ids.numpy(), values.numpy(), tname)
        c_sent, c_recv = comm.bytes_sent, comm.bytes_received
        p_ids, p_vals = eng.allreduce_sparse(tname, rows, ids.to(device), values.to(device))
        assert p_ids.cpu().tolist() == np.asarray(c_ids).tolist(), tname
        assert np.array_equal(p_vals.cpu().numpy().view(np.int32),
                              np.ascontiguousarray(c_vals, dtype=np.float32).view(np.int32)
                              .reshape(p_vals.shape)), tname
        st = eng.last_stats
        out[tname] = {"width": width, "cxx_sent": c_sent, "cxx_recv": c_recv,
                      "pg_sent": st["bytes_sent"], "pg_recv": st["bytes_recv"],
                      "pg_push_sent": st["push_bytes_sent"], "pg_pull_sent": st["pull_bytes_sent"],
                      "pg_meta_sent": st["meta_bytes_sent"]}
    return out


def _timed(fn, device, repeat):
    """Median seconds of fn() over `repeat` runs after two warm-ups (the
    benchmark harness waits for the device; the engine itself never does)."""
    times = []
    for i in range(repeat + 2):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i >= 2:
            times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def scenario_bench(rank, world, device):
    """Time per step of the engine against torch's dense all_reduce of the
    same tensors: the shipped trace (ranks 0..world-1 of its 8; a step is
    its embedding and its top-k tensor) and a 4,000,000 x 1 top-1% tensor."""
    eng = ProcessGroupEngine(GROUP)
    trace = read_trace(os.path.join(os.environ.get("ZEN_REPO", "."),
                                    "data/traces/gcide-lm-n8.safetensors"))
    rows_out = []
    # On CPU with the C++ extension: the C++ scheme on the same tensors.
    cxx = None
    if device.type == "cpu" and hasattr(zen, "create_scheme"):
        import importlib
        cxx = (importlib.import_module("zen.torch").ZenState().comm, zen.create_scheme("zen"))
    steps = sorted({k.split(".")[0] for k in trace})
    for step in steps:
        tensors = [(k, trace[k]) for k in sorted(trace) if k.startswith(step + ".")]
        local = [(k, rows, width, per_rank[rank][0].to(device), per_rank[rank][1].to(device))
                 for k, (rows, width, per_rank) in tensors]
        dense = [torch.zeros((rows, width), device=device).index_put_((i,), v)
                 for _, rows, width, i, v in local]
        stats = {}

        def run_zen():
            sent = 0
            for name, rows, width, i, v in local:
                eng.allreduce_sparse(name, rows, i, v)
                sent += eng.last_stats["bytes_sent"]
            stats["sent"] = sent

        def run_dense():
            for d in dense:
                dist.all_reduce(d)

        t_zen = _timed(run_zen, device, 10)
        t_dense = _timed(run_dense, device, 10)
        row = {"case": f"trace {step} ({', '.join(k.split('.', 1)[1] for k, _ in tensors)})",
               "zen_ms": t_zen * 1e3, "dense_ms": t_dense * 1e3,
               "zen_bytes_sent": stats["sent"],
               "dense_bytes": sum(d.numel() * 4 for d in dense)}
        if cxx is not None:
            comm, scheme = cxx
            arrays = [(name, rows, width, i.numpy(), v.numpy()) for name, rows, width, i, v in local]

            def run_cxx():
                for name, rows, width, i, v in arrays:
                    scheme.sync(comm, rows, width, i, v, name)

            row["cxx_ms"] = _timed(run_cxx, device, 10) * 1e3
        rows_out.append(row)
    # 4,000,000 x 1, top 1% by magnitude of a per-rank random gradient.
    g = torch.Generator(device=device).manual_seed(1234 + rank)
    grad = torch.randn(4_000_000, generator=g, device=device)
    _, ids = grad.abs().topk(40_000)
    values = grad[ids].unsqueeze(1)
    stats = {}

    def run_topk():
        eng.allreduce_sparse("topk", 4_000_000, ids, values)
        stats["sent"] = eng.last_stats["bytes_sent"]

    dense = grad.clone()
    t_zen = _timed(run_topk, device, 10)
    t_dense = _timed(lambda: dist.all_reduce(dense), device, 10)
    rows_out.append({"case": "4,000,000 x 1 top-1%", "zen_ms": t_zen * 1e3,
                     "dense_ms": t_dense * 1e3, "zen_bytes_sent": stats["sent"],
                     "dense_bytes": dense.numel() * 4})
    return rows_out


def scenario_timeout(rank, world, device):
    """A rank that does not take part: the others raise zen.TransportError
    within the engine's timeout instead of hanging (run last: the group is
    not usable afterwards). CPU only (on CUDA the group's timeout applies)."""
    import time
    eng = ProcessGroupEngine(GROUP, timeout=2)
    ids = torch.tensor([rank])
    vals = torch.ones((1, 1))
    eng.allreduce_sparse("t", 10, ids, vals)  # a good call first (the seed round)
    t0 = time.monotonic()
    if rank == 0:
        text = expect_raise(zen.TransportError,
                            lambda: eng.allreduce_sparse("t", 10, ids, vals),
                            ["rank 0", "'t'", "counts exchange"])
    else:
        time.sleep(4)
        text = ""
    waited = time.monotonic() - t0
    assert rank != 0 or waited < 3.5, waited
    return {"message": text, "waited": waited}


def scenario_torch_hook(rank, world, device):
    """zen.torch on the device: ZenState(transport='process_group') as a DDP
    comm hook (sparse and dense embeddings, float32 and float64 models)
    against plain DDP on the same group, allreduce_ against all_reduce, and
    topk_hook. Bit for bit where the sum order agrees: always on 1 and 2
    ranks; on 3+ Gloo ranks the engine adds dense buckets in Gloo's ring
    order; NCCL's own order (ring or tree, chosen at run time) is not
    modelled, so on 3+ NCCL ranks the parameters agree within rounding."""
    import torch.nn as nn
    import torch.nn.functional as F
    import zen.torch
    from zen.sparsify import TopKState, topk_hook

    group = GROUP
    exact = world <= 2 or device.type == "cpu"

    class Net(nn.Module):
        def __init__(self, sparse):
            super().__init__()
            self.emb = nn.Embedding(300, 16, sparse=sparse)
            self.norm = nn.LayerNorm(16)
            self.proj = nn.Linear(16, 40)

        def forward(self, x):
            return self.proj(self.norm(self.emb(x)).mean(1))

    def train(sparse, dtype, hook):
        torch.manual_seed(0)
        model = Net(sparse).to(device=device, dtype=dtype)
        ddp = nn.parallel.DistributedDataParallel(model, process_group=group,
                                                  bucket_cap_mb=0.01)
        if hook == "zen":
            zen.torch.register(ddp, transport="process_group")
        elif hook == "topk":
            ddp.register_comm_hook(TopKState(0.1, module=model, min_numel=1, process_group=group,
                                             zen_state=zen.torch.ZenState(
                                                 group, transport="process_group")), topk_hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        for step in range(4):
            gen = torch.Generator().manual_seed(1000 * step + rank)
            x = torch.randint(0, 300, (8, 6), generator=gen).to(device)
            y = torch.randint(0, 40, (8,), generator=gen).to(device)
            opt.zero_grad()
            F.cross_entropy(ddp(x).to(torch.float32), y).backward()
            opt.step()
        return model

    checked = 0
    for sparse in (False, True):
        for dtype in (torch.float32, torch.float64):
            ref, mine = train(sparse, dtype, None), train(sparse, dtype, "zen")
            for (n, p), (_, q) in zip(mine.named_parameters(), ref.named_parameters()):
                if exact:
                    assert torch.equal(p, q), (sparse, dtype, n, (p - q).abs().max().item())
                else:
                    torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
                checked += 1
    topk = train(False, torch.float32, "topk")
    for n, p in topk.named_parameters():
        gathered = [torch.empty_like(p) for _ in range(world)]
        dist.all_gather(gathered, p.detach().contiguous(), group=group)
        assert all(torch.equal(g, gathered[0]) for g in gathered), n
    state = zen.torch.ZenState(group, transport="process_group")
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        t = torch.randn(50, 4, generator=torch.Generator().manual_seed(rank)).to(device, dtype)
        t[rank::2] = 0
        expected = t.to(torch.float64)
        dist.all_reduce(expected, group=group)
        zen.torch.allreduce_(t, state=state, name=f"dense.{dtype}")
        assert t.device == expected.device
        tol = {torch.float32: 1e-6, torch.float64: 1e-15}.get(dtype, 1e-2)
        torch.testing.assert_close(t.to(torch.float64), expected, rtol=tol, atol=tol)
    return {"parameters_checked": checked, "exact": exact}


SCENARIOS = {"exact": scenario_exact, "huge": scenario_huge, "dense": scenario_dense,
             "mismatch": scenario_mismatch, "cxx": scenario_cxx, "bench": scenario_bench,
             "timeout": scenario_timeout, "torch_hook": scenario_torch_hook}


def launch(world, device, scenarios, timeout):
    """Starts `world` ranks of this file (a file store in a temporary
    directory), waits at most `timeout` seconds (then kills them all), and
    prints each scenario's outcome; the bench's table on stdout. Returns the
    exit code: 0 when every rank passed every scenario. (scripts/gpu-check's
    path where pytest is not installed.)"""
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out")
        os.mkdir(out)
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1")
        procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), "--world",
                                   str(world), "--init", f"file://{tmp}/store", "--out", out,
                                   "--device", device, *scenarios],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  env=env) for r in range(world)]
        logs, timed_out = [], False
        for p in procs:
            try:
                logs.append(p.communicate(timeout=timeout)[0])
            except subprocess.TimeoutExpired:
                timed_out = True
                for q in procs:
                    q.kill()
                logs.append(p.communicate()[0])
        failed = timed_out
        for s, w in [(s, w) for s in scenarios
                     for w in ([world] if s in WHOLE_JOB else
                               sorted({v for v in (2, 3) if v < world} | {world}))]:
            for r in range(w):
                path = os.path.join(out, f"{s}@{w}.{r}.json")
                if not os.path.exists(path):
                    print(f"{s}: rank {r} wrote no result")
                    failed = True
                    continue
                with open(path) as f:
                    res = json.load(f)
                if not res["ok"]:
                    print(f"{s}: rank {r} FAILED\n{res['error']}")
                    failed = True
                elif s == "bench" and r == 0:
                    print_table(res["result"], world, device)
                elif s == "cxx":
                    print(f"cxx rank {r}: {json.dumps(res['result'])}")
            if not failed:
                print(f"{s}: passed on {w} rank(s)")
        if failed:
            for r, log in enumerate(logs):
                print(f"--- rank {r} ---\n{log[-4000:]}")
        if timed_out:
            print(f"ranks did not finish within {timeout} s")
        return 1 if failed else 0


def print_table(rows, world, device):
    name = torch.cuda.get_device_name(0) if device == "cuda" else "CPU"
    print(f"\nzen.process_group vs dense all_reduce, {world} rank(s), {device} ({name}), "
          f"torch {torch.__version__}; median of 10 steps")
    cxx = any("cxx_ms" in r for r in rows)
    print("| case | zen process group ms/step | dense all_reduce ms/step | "
          + ("C++ zen ms/step | " if cxx else "") + "zen bytes sent/rank | dense tensor bytes |")
    print("|---|---:|---:|" + ("---:|" if cxx else "") + "---:|---:|")
    for r in rows:
        c = (f"{r['cxx_ms']:.2f} | " if "cxx_ms" in r else "- | ") if cxx else ""
        print(f"| {r['case']} | {r['zen_ms']:.2f} | {r['dense_ms']:.2f} | {c}"
              f"{r['zen_bytes_sent']:,} | {r['dense_bytes']:,} |")


def main():
    if "--launch" in sys.argv:
        parser = argparse.ArgumentParser()
        parser.add_argument("--launch", type=int, required=True)
        parser.add_argument("--device", default="cpu")
        parser.add_argument("--timeout", type=float, default=300)
        parser.add_argument("scenarios", nargs="+", choices=sorted(SCENARIOS))
        args = parser.parse_args()
        sys.exit(launch(args.launch, args.device, args.scenarios, args.timeout))
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world", type=int, required=True)
    parser.add_argument("--init", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("scenarios", nargs="+", choices=sorted(SCENARIOS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.device == "cuda":
        torch.cuda.set_device(args.rank % torch.cuda.device_count())
        device = torch.device("cuda", torch.cuda.current_device())
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    dist.init_process_group(backend, init_method=args.init, rank=args.rank,
                            world_size=args.world, timeout=datetime.timedelta(seconds=60))
    global GROUP
    worlds = sorted({w for w in (2, 3) if w < args.world} | {args.world})
    groups = {w: dist.new_group(list(range(w))) for w in worlds if w < args.world}
    failed = False
    for name in args.scenarios:
        for w in ([args.world] if name in WHOLE_JOB else worlds):
            GROUP = groups.get(w)
            t0 = time.monotonic()
            if args.rank >= w:
                result = {"ok": True, "result": None}
            else:
                try:
                    result = {"ok": True, "result": SCENARIOS[name](args.rank, w, device)}
                except Exception:  # recorded for the test to report
                    result = {"ok": False, "error": traceback.format_exc()}
                    failed = True
            result["seconds"] = time.monotonic() - t0
            with open(os.path.join(args.out, f"{name}@{w}.{args.rank}.json"), "w") as f:
                json.dump(result, f)
    if "timeout" in args.scenarios:
        # The timed-out collective is still pending in the group: leave
        # without tearing it down (which would wait for it).
        sys.stdout.flush()
        os._exit(1 if failed else 0)
    dist.destroy_process_group()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
