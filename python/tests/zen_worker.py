"""One rank of the multi-process zen.torch tests (started by conftest.run_ranks).

    zen_worker.py --rank R --world N --init file:///tmp/x --out DIR SCENARIO [SCENARIO ...]

Each scenario runs in turn and writes DIR/<scenario>.<rank>.json: {"ok": true,
...} or {"ok": false, "error": traceback}. Every check compares zen against an
independent reference: plain DDP (Gloo) for training, torch.distributed's
all_reduce of the densified tensors for allreduce_ and the hook.
"""

import argparse
import datetime
import json
import os
import sys
import traceback

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms.join import Join

import zen
import zen.torch
from zen.sparsify import TopKState, topk_hook

RTOL = 1e-5
ATOL = 1e-7


def assert_close(actual, expected, what):
    actual, expected = actual.detach(), expected.detach()
    if actual.is_sparse:
        actual = actual.to_dense()
    if expected.is_sparse:
        expected = expected.to_dense()
    torch.testing.assert_close(actual, expected, rtol=RTOL, atol=ATOL, msg=lambda m: f"{what}: {m}")


def dense_sum(tensor):
    """Reference: the dense global sum through torch.distributed (Gloo)."""
    out = (tensor.to_dense() if tensor.is_sparse else tensor).clone().contiguous()
    dist.all_reduce(out)
    return out


# --- DDP equivalence -------------------------------------------------------

VOCAB, DIM, CLASSES, STEPS = 300, 16, 40, 4


class Net(nn.Module):
    def __init__(self, sparse):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM, sparse=sparse)
        self.norm = nn.LayerNorm(DIM)  # 1-D parameters
        self.proj = nn.Linear(DIM, CLASSES)  # a gradient without zero rows

    def forward(self, x):
        return self.proj(self.norm(self.emb(x)).mean(1))


def run_steps(ddp, opt, rank, steps, accumulate=1, pass_step=False):
    """`steps` SGD steps of a Net under DDP on rank-seeded batches (few
    distinct tokens per rank: most embedding rows get no gradient), each of
    `accumulate` micro-batches (the first ones under no_sync()); pass_step:
    the model's forward also takes the step number. The losses."""
    losses = []
    for step in range(steps):
        opt.zero_grad()
        for micro in range(accumulate):
            gen = torch.Generator().manual_seed(1000 * step + 10 * micro + rank)
            x = torch.randint(0, VOCAB, (8, 6), generator=gen)
            y = torch.randint(0, CLASSES, (8,), generator=gen)
            inputs = (x, step) if pass_step else (x,)
            if micro < accumulate - 1:
                with ddp.no_sync():
                    F.cross_entropy(ddp(*inputs), y).backward()
            else:
                loss = F.cross_entropy(ddp(*inputs), y)
                loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def train(sparse, rank, scheme, **options):
    torch.manual_seed(0)
    model = Net(sparse)
    # Small buckets so that several dense buckets, each of several views, occur.
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.01)
    state = zen.torch.register(ddp, scheme=scheme, **options) if scheme else None
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    losses = run_steps(ddp, opt, rank, STEPS)
    return model, state, losses


def scenario_ddp(rank, world):
    """Per configuration: losses, the reference's, and the parameters that
    are not bit-for-bit plain DDP's (torch.equal; the test says where that
    is required). Within RTOL everywhere, asserted here."""
    results = {}
    for sparse in (False, True):
        reference, _, ref_losses = train(sparse, rank, None)
        configs = [(scheme, {}) for scheme in ("auto", "zen", "agsparse")]
        # Dense buckets on the process group from the first call: zen
        # synchronizes the sparse embedding only.
        configs.append(("auto", {"dense_threshold": 0}))
        for scheme, options in configs:
            model, state, losses = train(sparse, rank, scheme, **options)
            inexact = []
            for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
                assert_close(p, q, f"sparse={sparse} scheme={scheme} parameter {name}")
                if not torch.equal(p, q):
                    inexact.append(name)
                if sparse and name == "emb.weight":
                    assert p.grad.is_sparse and p.grad.is_coalesced()
            if sparse or not options:
                assert state.comm.bytes_sent > 0
            key = f"sparse={sparse},{scheme}" + "".join(f",{k}={v}" for k, v in options.items())
            results[key] = {"losses": losses, "ref": ref_losses, "inexact": inexact,
                            "modes": {str(k): v for k, v in state.bucket_modes.items()},
                            "bytes_sent": state.comm.bytes_sent}
    return results


# --- DDP's own options ------------------------------------------------------

class FlagsNet(Net):
    """Net, with a layer used on odd steps only when `sometimes` (for
    find_unused_parameters)."""

    def __init__(self, sparse, sometimes):
        super().__init__(sparse)
        self.sometimes = nn.Linear(DIM, 7) if sometimes else None

    def forward(self, x, step):
        h = self.norm(self.emb(x)).mean(1)
        out = self.proj(h)
        return out + self.sometimes(h).sum() if self.sometimes is not None and step % 2 else out


def register_hook(ddp, model, hook):
    """hook None (plain DDP), "zen" (zen.torch.register, scheme auto) or
    "topk" (TopKState(0.5)) on ddp; the hook's state (None for plain DDP)."""
    if hook == "zen":
        return zen.torch.register(ddp, scheme="auto")
    if hook == "topk":
        state = TopKState(ratio=0.5, module=model, min_numel=1)
        ddp.register_comm_hook(state, topk_hook)
        return state
    return None


def train_flags(rank, hook, sparse, flags, accumulate=1, join=False):
    """STEPS steps of FlagsNet under DDP(**flags), `accumulate` micro-batches a
    step (the first ones under no_sync()); hook as in register_hook. join: rank r
    takes STEPS + 2 r steps inside DDP's Join (uneven inputs: ranks that ran
    out run the hook on zero buckets while the others train)."""
    torch.manual_seed(0)
    model = FlagsNet(sparse, "find_unused_parameters" in flags)
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.01, **flags)
    register_hook(ddp, model, hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    with Join([ddp], enable=join):
        run_steps(ddp, opt, rank, STEPS + 2 * rank if join else STEPS, accumulate,
                  pass_step=True)
    return model


def scenario_ddp_flags(rank, world):
    """zen's hooks under DDP's options that users turn on: gradient_as_bucket_view,
    static_graph, find_unused_parameters (a layer used every other step),
    gradient accumulation under no_sync() and uneven inputs under Join.
    zen.torch's hook: parameters bit-for-bit plain DDP's under the same
    options. topk_hook: under the options that do not change the arithmetic,
    bit-for-bit the hook without them; with accumulation or Join, every rank's
    parameters equal (the step's mean reached all)."""
    cases = [("bucket_view", {"gradient_as_bucket_view": True}, 1, False),
             ("static_graph", {"static_graph": True}, 1, False),
             ("find_unused", {"find_unused_parameters": True}, 1, False),
             ("no_sync", {}, 3, False),
             ("bucket_view+no_sync", {"gradient_as_bucket_view": True}, 2, False),
             ("join", {}, 1, True)]
    for sparse in (False, True):
        for name, flags, accumulate, join in cases:
            ref = train_flags(rank, None, sparse, flags, accumulate, join)
            got = train_flags(rank, "zen", sparse, flags, accumulate, join)
            for (n, p), (_, q) in zip(got.named_parameters(), ref.named_parameters()):
                assert torch.equal(p, q), f"zen hook, {name}, sparse={sparse}: {n} differs"
    plain = dict(train_flags(rank, "topk", False, {}).named_parameters())
    for name, flags, accumulate, join in cases:
        got = train_flags(rank, "topk", False, flags, accumulate, join)
        for n, p in got.named_parameters():
            if accumulate == 1 and not join and "find_unused_parameters" not in flags:
                assert torch.equal(p, plain[n]), f"topk_hook, {name}: {n} differs from no options"
            mine = p.detach().clone()
            dist.broadcast(p.detach(), src=0)
            assert torch.equal(mine, p), f"topk_hook, {name}: {n} differs between ranks"
    return {"cases": [c[0] for c in cases]}


# --- torch.compile ------------------------------------------------------------

def train_compiled(rank, hook, sparse, graphs):
    """STEPS steps of Net under DDP with default buckets (torch's DDPOptimizer
    asserts that no bucket is smaller than the first), hook None, "zen" or
    "topk" as in register_hook; compiled with torch.compile when `graphs` is a
    list (the graphs dynamo hands its backend are appended to it; aot_eager:
    AOTAutograd's forward and backward graphs, run without code generation),
    eager when it is None. The model and the hook's state."""
    torch.manual_seed(0)
    model = Net(sparse)
    ddp = nn.parallel.DistributedDataParallel(model)
    state = register_hook(ddp, model, hook)
    forward = ddp
    if graphs is not None:
        from torch._dynamo.backends.registry import lookup_backend
        aot_eager = lookup_backend("aot_eager")

        def backend(gm, example_inputs):
            graphs.append(gm)
            return aot_eager(gm, example_inputs)

        torch._dynamo.reset()
        forward = torch.compile(ddp, backend=backend)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    run_steps(forward, opt, rank, STEPS)
    return model, state


def scenario_compiled(rank, world):
    """zen's hooks on a DDP model under torch.compile (dynamo traces the model,
    DDP's reducer runs the hook from the compiled backward): zen.torch's hook
    bit-for-bit plain DDP compiled the same way; topk_hook bit-for-bit the
    same hook without compilation, every rank's parameters equal. Sparse and
    dense embeddings."""
    compiled_graphs = {}
    for sparse in (False, True):
        graphs = []
        ref = dict(train_compiled(rank, None, sparse, graphs)[0].named_parameters())
        got, state = train_compiled(rank, "zen", sparse, graphs)
        assert state.comm.bytes_sent > 0, f"sparse={sparse}: the compiled model ran no zen hook"
        for n, p in got.named_parameters():
            assert torch.equal(p, ref[n]), f"zen hook, compiled, sparse={sparse}: {n} differs"
        eager = dict(train_compiled(rank, "topk", sparse, None)[0].named_parameters())
        got, _ = train_compiled(rank, "topk", sparse, graphs)
        for n, p in got.named_parameters():
            assert torch.equal(p, eager[n]), f"topk_hook, sparse={sparse}: {n} differs compiled"
            mine = p.detach().clone()
            dist.broadcast(p.detach(), src=0)
            assert torch.equal(mine, p), f"topk_hook, compiled, sparse={sparse}: {n} differs between ranks"
        assert graphs, f"sparse={sparse}: torch.compile handed its backend no graph"
        compiled_graphs[f"sparse={sparse}"] = len(graphs)
    return {"graphs": compiled_graphs}


# --- DDP on process subgroups -------------------------------------------------

def train_subgroup(rank, group, hook, sparse):
    """STEPS steps of Net under DDP(process_group=group), the model seeded by
    the group (rank % 2): the even and the odd ranks train different
    replicas. hook: None (plain DDP), "register" (zen.torch.register),
    "state" (ZenState(group)), "world" (ZenState(): the world, the wrong
    group), "topk" (TopKState(process_group=group)), "topk-world" (TopKState())."""
    torch.manual_seed(rank % 2)
    model = Net(sparse)
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.01, process_group=group)
    if hook == "register":
        zen.torch.register(ddp, scheme="auto")
    elif hook in ("state", "world"):
        ddp.register_comm_hook(zen.torch.ZenState(group if hook == "state" else None),
                               zen.torch.comm_hook)
    elif hook in ("topk", "topk-world"):
        ddp.register_comm_hook(TopKState(ratio=0.5, module=model, min_numel=1,
                                         process_group=group if hook == "topk" else None),
                               topk_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    run_steps(ddp, opt, rank, STEPS)
    return model


def scenario_subgroups(rank, world):
    """DDP on the even and on the odd ranks (two replicas, as the
    data-parallel groups of a model-parallel job): with the hook's state on
    the model's group, parameters bit-for-bit plain DDP's on that group
    (zen.torch.register, ZenState(group)), top-k equal within the group; with
    the state on the world (the default), zen.MismatchError on every rank
    before any gradient is averaged across the two replicas."""
    groups = [dist.new_group([r for r in range(world) if r % 2 == parity]) for parity in (0, 1)]
    group = groups[rank % 2]
    for sparse in (False, True):
        ref = dict(train_subgroup(rank, group, None, sparse).named_parameters())
        for hook in ("register", "state"):
            for n, p in train_subgroup(rank, group, hook, sparse).named_parameters():
                assert torch.equal(p, ref[n]), f"{hook}, sparse={sparse}: {n} differs"
        expect(zen.MismatchError, lambda: train_subgroup(rank, group, "world", sparse),
               "different parameters")
    got = train_subgroup(rank, group, "topk", False)
    for n, p in got.named_parameters():
        mine = p.detach().clone()
        dist.broadcast(p.detach(), src=rank % 2, group=group)
        assert torch.equal(mine, p), f"topk_hook on the subgroup: {n} differs within it"
    expect(zen.MismatchError, lambda: train_subgroup(rank, group, "topk-world", False),
           "different parameters")
    return {"groups": [dist.get_process_group_ranks(g) for g in groups]}


# --- the hook on hand-made buckets ----------------------------------------

class FakeBucket:
    """What comm_hook uses of torch's GradBucket, over a given flat buffer."""

    def __init__(self, index, buffer, shapes):
        self._index, self._buffer = index, buffer
        self._grads, offset = [], 0
        for shape in shapes:
            n = torch.Size(shape).numel()
            self._grads.append(buffer[offset:offset + n].view(shape))
            offset += n
        self._params = [torch.nn.Parameter(torch.zeros(s)) for s in shapes]

    def index(self):
        return self._index

    def buffer(self):
        return self._buffer

    def gradients(self):
        return self._grads

    def parameters(self):
        return self._params


def run_hook(state, bucket):
    expected = dense_sum(bucket.buffer()) / dist.get_world_size()
    result = zen.torch.comm_hook(state, bucket).wait()
    assert_close(result, expected, f"bucket {bucket.index()}")
    return result


def scenario_hook(rank, world):
    state = zen.torch.ZenState()
    shapes = [(50, 4), (4,), (3, 2, 2), ()]
    n = sum(torch.Size(s).numel() for s in shapes)
    gen = torch.Generator().manual_seed(rank)
    # All zero on every rank.
    zero = run_hook(state, FakeBucket(0, torch.zeros(n), shapes))
    assert not zero.any()
    # No zero rows, no zero elements.
    run_hook(state, FakeBucket(1, torch.rand(n, generator=gen) + 0.5, shapes))
    # Row-sparse with different rows per rank; zero on some ranks only.
    buf = torch.zeros(n)
    grads = FakeBucket(2, buf, shapes).gradients()
    grads[0][rank::7] = torch.randn(grads[0][rank::7].shape, generator=gen)
    if rank == 0:
        grads[1][:] = 1.0
    run_hook(state, FakeBucket(2, buf, shapes))
    # A sparse COO bucket (what nn.Embedding(sparse=True) gives), uncoalesced.
    ids = torch.tensor([[rank, 9, rank, 20 + rank]])
    sparse = torch.sparse_coo_tensor(ids, torch.randn(4, 3, generator=gen), (30, 3))

    class SparseBucket(FakeBucket):
        def buffer(self):
            return sparse

        def gradients(self):
            return []

    out = zen.torch.comm_hook(state, SparseBucket(3, torch.zeros(90), [(30, 3)])).wait()
    assert out.is_sparse and out.is_coalesced()
    assert_close(out, dense_sum(sparse) / world, "sparse bucket")
    want_rows = sorted({9} | {r for r in range(world)} | {20 + r for r in range(world)})
    assert out.indices()[0].tolist() == want_rows, out.indices()
    # Many duplicate ids (an embedding's gradient for a batch of common
    # tokens): bit for bit what DDP's reducer and Gloo's sparse allreduce give
    # (divide, coalesce in torch's order, sum in rank order).
    ids = torch.randint(0, 12, (1, 400), generator=gen)
    vals = torch.randn(400, 3, generator=gen) * torch.rand(400, 1, generator=gen) * 100
    dup = torch.sparse_coo_tensor(ids, vals, (30, 3))

    class DupBucket(SparseBucket):
        def buffer(self):
            return dup

    out = zen.torch.comm_hook(state, DupBucket(4, torch.zeros(90), [(30, 3)])).wait()
    ref = torch.sparse_coo_tensor(ids, vals.clone(), (30, 3))
    ref._values().div_(world)
    dist.all_reduce(ref)
    ref = ref.coalesce()
    assert torch.equal(out.indices(), ref.indices()), (out.indices(), ref.indices())
    assert torch.equal(out.values(), ref.values()), ("not bit for bit Gloo's sparse allreduce", (out.values() - ref.values()).abs().max().item(), out.values()[:3], ref.values()[:3])
    return {"scheme": state.scheme_id}


# --- allreduce_ ------------------------------------------------------------

def scenario_allreduce(rank, world):
    gen = torch.Generator().manual_seed(10 + rank)
    state = zen.torch.ZenState(scheme="zen")
    # Dense 2-D with zero rows, 1-D, 3-D, and a non-contiguous view.
    for shape in [(40, 8), (17,), (5, 3, 4)]:
        t = torch.randn(shape, generator=gen)
        if len(shape) > 1:
            t[rank::2] = 0
        expected = dense_sum(t)
        assert zen.torch.allreduce_(t, state=state, name=f"dense{len(shape)}") is t
        assert_close(t, expected, f"dense {shape}")
    base = torch.randn(6, 10, generator=gen)
    view = base[:, ::2]
    expected = dense_sum(view)
    zen.torch.allreduce_(view, state=state, name="strided")
    assert_close(base[:, ::2], expected, "non-contiguous view")
    avg = torch.randn(9, 3, generator=gen)
    expected = dense_sum(avg) / world
    zen.torch.allreduce_(avg, average=True, state=state, name="avg")
    assert_close(avg, expected, "dense average")
    # Sparse: uncoalesced with duplicates; rank 1 contributes nothing.
    if rank == 1:
        sp = torch.sparse_coo_tensor(torch.zeros(1, 0, dtype=torch.int64), torch.zeros(0, 4),
                                     (100, 4))
    else:
        ids = torch.tensor([[7, 3, 7, 50 + rank]])
        sp = torch.sparse_coo_tensor(ids, torch.randn(4, 4, generator=gen), (100, 4))
    expected = dense_sum(sp)
    out = zen.torch.allreduce_(sp, state=state, name="sparse")
    assert out is sp and sp.is_coalesced()
    assert_close(sp, expected, "sparse sum")
    rows = sorted({3, 7} | {50 + r for r in range(world) if r != 1})
    assert sp.indices()[0].tolist() == rows, sp.indices()
    # Two sparse dimensions (element-sparse matrix), averaged, default state.
    ids = torch.tensor([[0, 2, rank], [1, 1, 3]])
    sp2 = torch.sparse_coo_tensor(ids, torch.randn(3, generator=gen), (4, 5))
    expected = dense_sum(sp2) / world
    zen.torch.allreduce_(sp2, average=True)
    assert_close(sp2, expected, "sparse 2-D average")
    return {"bytes_sent": state.comm.bytes_sent}


# --- errors ----------------------------------------------------------------

def expect(exc_type, fn, must_contain=""):
    try:
        fn()
    except exc_type as e:
        assert must_contain in str(e), f"{exc_type.__name__} without '{must_contain}': {e}"
        return str(e)
    raise AssertionError(f"expected {exc_type.__name__}")


def scenario_mismatch(rank, world):
    state = zen.torch.ZenState()
    messages = {}
    # Different shapes: dense and sparse.
    t = torch.ones(10 + rank, 4)
    messages["dense"] = expect(zen.MismatchError, lambda: zen.torch.allreduce_(t, state=state),
                               "disagree")
    sp = torch.sparse_coo_tensor(torch.tensor([[1]]), torch.ones(1, 2 + rank), (8, 2 + rank))
    messages["sparse"] = expect(zen.MismatchError, lambda: zen.torch.allreduce_(sp, state=state),
                                "width")
    assert issubclass(zen.MismatchError, RuntimeError)
    # One rank with another dtype (each is accepted alone): every rank raises
    # MismatchError naming both dtypes. An unsupported dtype on one rank and
    # an out-of-range id on another: every rank raises ValueError.
    bad = torch.ones(6, 2, dtype=torch.float64 if rank == world - 1 else torch.float32)
    messages["dtype"] = expect(zen.MismatchError, lambda: zen.torch.allreduce_(bad, state=state),
                               "dtype")
    ints = torch.ones(6, 2, dtype=torch.int32 if rank == world - 1 else torch.float32)
    messages["int dtype"] = expect(ValueError, lambda: zen.torch.allreduce_(ints, state=state))
    ids = torch.tensor([[3 if rank else 99]])
    oob = torch.sparse_coo_tensor(ids, torch.ones(1, 2), (100, 2))
    oob._indices()[0, 0] = 100 if rank == 0 else 3  # corrupt on rank 0 only
    messages["range"] = expect(ValueError, lambda: zen.torch.allreduce_(oob, state=state))
    # The communicator is still usable afterwards.
    good = torch.full((4, 3), float(rank + 1))
    zen.torch.allreduce_(good, state=state)
    assert_close(good, torch.full((4, 3), world * (world + 1) / 2), "after errors")
    return messages


# --- dtypes (issue 15) --------------------------------------------------------

def scenario_dtypes(rank, world):
    """float16, bfloat16 and float64 through allreduce_ (dense and sparse),
    against torch.distributed's sum: float16 and bfloat16 summed in float32
    and converted back, float64 summed in float64. Returns the float64 max
    relative errors against a float64 reference (random values float32
    cannot hold; dense, sparse COO rows and element-sparse)."""
    state = zen.torch.ZenState()
    errors = {}

    def given(r, shape):  # rank r's values, the same on every rank
        g = torch.Generator().manual_seed(1000 + r)
        return torch.randn(shape, generator=g, dtype=torch.float64) * 1e3 + 1.0 / 3

    def rel(got, ref):
        return ((got - ref).abs().max() / ref.abs().max()).item()

    ref = sum(given(r, (64, 8)) for r in range(world))
    t = given(rank, (64, 8))
    zen.torch.allreduce_(t, state=state, name="f64 dense")
    errors["dense"] = rel(t, ref)
    for label, width in (("sparse", 8), ("element", 1)):
        rows = torch.arange(0, 200, 3 + rank)  # each rank its own rows, overlapping
        shape = (200, width) if width > 1 else (200,)
        refd = torch.zeros(shape, dtype=torch.float64)
        for r in range(world):
            rr = torch.arange(0, 200, 3 + r)
            refd[rr] += given(r, (len(rr), width) if width > 1 else (len(rr),))
        vals = given(rank, (len(rows), width) if width > 1 else (len(rows),))
        sp = torch.sparse_coo_tensor(rows.unsqueeze(0), vals, shape)
        out = zen.torch.allreduce_(sp, state=state, name=f"f64 {label}")
        assert out.dtype == torch.float64
        errors[label] = rel(out.to_dense(), refd)
    total = world * (world + 1) / 2
    for dtype in (torch.float16, torch.bfloat16, torch.float64, torch.float32):
        t = torch.full((5, 3), float(rank + 1), dtype=dtype)
        t[rank % 5] = 0
        expected = t.to(torch.float64).clone()
        dist.all_reduce(expected)
        zen.torch.allreduce_(t, state=state)
        assert t.dtype == dtype
        torch.testing.assert_close(t.to(torch.float64), expected, rtol=1e-2, atol=0,
                                   msg=lambda m: f"dense {dtype}: {m}")
        v = torch.full((7,), 0.5, dtype=dtype)
        zen.torch.allreduce_(v, average=True, state=state)
        assert v.tolist() == [0.5] * 7, (dtype, v)
        sp = torch.sparse_coo_tensor(torch.tensor([[1, 4]]), torch.ones(2, 2, dtype=dtype),
                                     (6, 2))
        zen.torch.allreduce_(sp, state=state)
        assert sp.dtype == dtype
        dense = sp.to_dense().to(torch.float64)
        assert dense[1].tolist() == [float(world)] * 2 and dense[4].tolist() == [float(world)] * 2
    assert total > 0
    return {"float64 errors": errors}


# --- values at half width on the wire (issue 15) ------------------------------

def train_plain_hook(sparse, rank, hook):
    """Plain DDP with one of torch's own comm hooks (the reference)."""
    torch.manual_seed(0)
    model = Net(sparse)
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.01)
    ddp.register_comm_hook(None, hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    return model, run_steps(ddp, opt, rank, STEPS)


def scenario_values_pg(rank, world):
    """ZenState(values=...) is checked, and a dense bucket on the process
    group's allreduce does exactly what torch's bf16/fp16 compress hooks do
    (bit for bit: torch's hooks are the reference)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    for bad in ("int8", "bfloat16", None):
        expect(ValueError, lambda: zen.torch.ZenState(values=bad), "values")
    for values, hook in (("bf16", default_hooks.bf16_compress_hook),
                         ("fp16", default_hooks.fp16_compress_hook)):
        # DDP refuses bf16_compress_hook by name without CUDA/NCCL; Gloo on
        # CPU sums bfloat16 fine, so call it through a wrapper.
        def wrapped(state, bucket, hook=hook):
            return hook(state, bucket)

        reference, ref_losses = train_plain_hook(False, rank, wrapped)
        model, state, losses = train(False, rank, "auto", values=values, dense_threshold=0)
        assert set(state.bucket_modes.values()) == {"pg"}, state.bucket_modes
        assert losses == ref_losses, (values, losses, ref_losses)
        for (name, p), (_, q) in zip(model.named_parameters(), reference.named_parameters()):
            assert torch.equal(p, q), (values, name, (p - q).abs().max())
    return {}


def scenario_values(rank, world):
    """bf16 and fp16 values on zen's wire (every bucket on zen): after the
    same steps, losses within 1e-2 relative of the float32 run (plain DDP's,
    the reference) and zen's payload bytes at least 40% lower than its own
    float32 run's. Needs the engine's per-item "values" option."""
    out = {}
    for sparse in (False, True):
        _, _, ref_losses = train(sparse, rank, None)
        _, fp32, fp32_losses = train(sparse, rank, "zen", dense_threshold=None)
        out[f"sparse={sparse},fp32"] = fp32.comm.bytes_sent
        for values in ("bf16", "fp16"):
            _, state, losses = train(sparse, rank, "zen", values=values, dense_threshold=None)
            for step, (a, b) in enumerate(zip(losses, ref_losses)):
                assert abs(a - b) <= 1e-2 * abs(b), (sparse, values, step, losses, ref_losses)
            sent = state.comm.bytes_sent
            out[f"sparse={sparse},{values}"] = sent
            assert sent <= 0.6 * fp32.comm.bytes_sent, (
                f"sparse={sparse} values={values}: {sent} payload bytes vs "
                f"{fp32.comm.bytes_sent} with fp32 (want <= 60%)")
    return out


# --- recording a job's gradients (issue 15) ----------------------------------

def scenario_record(rank, world):
    """ZenState(record=...) writes every rank's real gradients of the first
    steps as zen-trace/1; `zen analyze` reads it and its per-rank densities
    are those of the tokens each rank saw (recomputed here for every rank
    from the same generators, an independent reference)."""
    import re
    import subprocess
    import tempfile
    out = {}
    for sparse in (False, True):
        path = os.path.join(tempfile.gettempdir(), f"zen-record-{os.getpid() - rank}-{sparse}")
        path_obj = [path]
        dist.broadcast_object_list(path_obj, src=0)
        path = path_obj[0] + ".safetensors"
        torch.manual_seed(0)
        model = Net(sparse)
        ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.01)
        zen.torch.register(ddp, record=path, record_steps=2)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        run_steps(ddp, opt, rank, 3)
        dist.barrier()
        if rank != 0:
            continue
        zen_cli = os.path.join(os.environ.get("ZEN_BUILD", "build"), "bin", "zen")
        text = subprocess.run([zen_cli, "analyze", path], capture_output=True, text=True,
                              check=True).stdout
        os.unlink(path)
        for step in range(2):
            # Distinct tokens of every rank at this step: rows of emb.weight with a gradient.
            counts = []
            for r in range(world):
                gen = torch.Generator().manual_seed(1000 * step + r)
                counts.append(torch.randint(0, VOCAB, (8, 6), generator=gen).unique().numel())
            block = text.split(f"step{step}.emb.weight")[1]
            found = re.search(r"density per rank\s+min ([0-9.]+)%\s+mean ([0-9.]+)%\s+max "
                              r"([0-9.]+)%", block)
            assert found, text
            want = [100 * min(counts) / VOCAB, 100 * sum(counts) / world / VOCAB,
                    100 * max(counts) / VOCAB]
            got = [float(g) for g in found.groups()]
            for g, w in zip(got, want):
                assert abs(g - w) < 0.01, (sparse, step, got, want, text)
            assert f"step{step}.proj.weight" in text, text
        assert "step2." not in text, text
        out[f"sparse={sparse}"] = text.splitlines()[0]
    return out


# --- call drift and argument errors (issue 13, item 1) ------------------------

def scenario_drift(rank, world):
    """Rank 0 makes one extra call. Before the call identity travelled in the
    metadata, every later call of both ranks returned a sum of different
    calls' tensors (101, 11, 1010 instead of 2, 11, 10010). Now every call of
    every rank raises zen.MismatchError and no tensor is modified."""
    state = zen.torch.ZenState()  # its own communicator: drift spoils it for good
    messages = []
    if rank == 0:
        extra = torch.ones(1)
        messages.append(expect(zen.MismatchError,
                               lambda: zen.torch.allreduce_(extra, state=state), "rank"))
        assert extra.tolist() == [1.0], extra
    for k in range(3):
        t = torch.full((1,), 10.0 ** k)
        messages.append(expect(zen.MismatchError, lambda: zen.torch.allreduce_(t, state=state)))
        assert t.tolist() == [10.0 ** k], f"call {k} changed the tensor: {t.tolist()}"
    return messages


def scenario_raw_args(rank, world):
    """Arguments that fail to convert on one rank raise ValueError on every
    rank (through the metadata exchange), and the next call is exact."""
    import numpy as np
    comm = zen.torch.ZenState().comm
    scheme = zen.create_scheme("zen")
    ids = np.array([rank], dtype=np.int64)
    vals = np.ones((1, 2), dtype=np.float32)
    cases = {
        "int32 values": (10, 2, ids, vals.astype(np.int32), 1),
        "float ids": (10, 2, np.array([1.7]), vals, 0),
        "None values": (10, 2, ids, None, world - 1),
        "float rows": (10.0, 2, ids, vals, 0),
        "huge rows": (2 ** 70, 2, ids, vals, 1 % world),
        "rows x width overflow": (2 ** 62 + 1, 4, ids, np.ones((1, 4), np.float32), 0),
    }
    messages = {}
    for label, (rows, width, i, v, bad) in cases.items():
        if rank == bad:
            call = lambda: scheme.sync(comm, rows, width, i, v, "raw")  # noqa: E731
        else:
            call = lambda: scheme.sync(comm, 10, 2, ids, vals, "raw")  # noqa: E731
        messages[label] = expect(ValueError, call)
        # Every call is followed by a good one that must be exact.
        out_ids, out_values = scheme.sync(comm, 10, 2, ids, vals, "raw")
        assert out_ids.tolist() == list(range(world)), (label, out_ids)
        assert out_values.tolist() == [[1.0, 1.0]] * world, (label, out_values)
    # Dense: an int32 buffer on one rank, then a good call.
    buf = np.full((3, 2), rank + 1, dtype=np.int32 if rank == 0 else np.float32)
    messages["dense int32"] = expect(ValueError,
                                       lambda: scheme.sync_dense(comm, buf, 3, 2, "rawd"))
    good = np.full((3, 2), float(rank + 1), dtype=np.float32)
    scheme.sync_dense(comm, good, 3, 2, "rawd")
    assert good.tolist() == [[world * (world + 1) / 2] * 2] * 3, good
    return messages


# --- silent wrong sums that must raise instead (issue 41: W2, W3) -----------

def scenario_wrong_sums(rank, world):
    """Inputs that zen once summed into a wrong result without an error:
    each must raise ValueError on every rank (the bad input on one rank
    only), and the next call must be exact. float64 values float32 cannot
    hold are summed in float64 now: messages["exact"] holds, per case, the
    sum and its float64 reference."""
    state = zen.torch.ZenState(scheme="zen")
    messages = {}
    exact = messages["exact"] = {}
    bad_rank = world - 1

    def sparse(indices, shape, values=None):
        idx = torch.tensor(indices, dtype=torch.int64)
        vals = values if values is not None else torch.ones(idx.shape[1])
        # check_invariants=False: torch would refuse these itself when asked
        # to check; the hook and user code get them unchecked.
        return torch.sparse_coo_tensor(idx, vals, shape, check_invariants=False)

    # W3: COO tensors with 2 and 3 sparse dimensions and an index out of
    # range in one dimension only: (0, 5) of (3, 4) is row-major id 5 = (1, 1);
    # (1, -1) is id 3 = (0, 3); (0, 0, 7) of (2, 3, 4) is id 7 = (0, 1, 3).
    cases = {"past the end": ([[0, 2], [5, 1]], (3, 4)),
             "negative": ([[1, 2], [-1, 1]], (3, 4)),
             "3 sparse dims": ([[0, 1], [0, 2], [7, 0]], (2, 3, 4)),
             "first dim": ([[3, 0], [0, 1]], (3, 4))}
    for label, (indices, shape) in cases.items():
        if rank == bad_rank:
            t = sparse(indices, shape)
        else:
            t = sparse([[0]] * len(shape), shape)
        messages[label] = expect(ValueError, lambda: zen.torch.allreduce_(t, state=state,
                                                                          name="w3"),
                                 "out of range" if rank == bad_rank else "rejected its input")
        # The next call is exact.
        good = sparse([[0], [1]], (3, 4))
        zen.torch.allreduce_(good, state=state, name="w3")
        assert good.to_dense()[0, 1].item() == world and good._nnz() == 1, good
    # W2: float64 values that float32 cannot hold: past its range (inf in
    # float32) and below its smallest subnormal (0 in float32), and
    # 1e10 + 1 - 1e10 (0 in float32), dense and sparse: summed in float64
    # by scheme auto and by the state's scheme "zen" ("... on zen").
    cancel = [1e10, 1.0, -1e10] if world >= 3 else [1e10, 1.0 - 1e10]
    for label, values in {"1e300": [1e300, 1e-300], "1e40": [1e40, 1.0],
                          "1e-300": [1.0, 1e-300], "FLT_MAX": [3.4e38, 1.0],
                          "1e10 + 1 - 1e10": None}.items():
        def given(r):
            if values is None:
                return [cancel[r] if r < len(cancel) else 0.0, 2.0]
            return values if r == bad_rank else [1.0, 2.0]
        ref = [0.0, 0.0]
        for r in range(world):  # the float64 reference, in rank order
            ref = [a + b for a, b in zip(ref, given(r))]
        for layout in ("dense", "sparse"):
            v = given(rank)
            if layout == "dense":
                t = torch.tensor(v, dtype=torch.float64)
            else:
                t = sparse([[0, 3]], (5,), torch.tensor(v, dtype=torch.float64))
            for on, scheme in (("", "auto"), (" on zen", None)):
                out = zen.torch.allreduce_(t.clone(), state=state, name="w2" + on,
                                           **({"scheme": scheme} if scheme else {}))
                got = out.tolist() if layout == "dense" else [out.to_dense()[0].item(),
                                                              out.to_dense()[3].item()]
                exact[f"{label} {layout}{on}"] = {"got": got, "ref": ref,
                                                  "dtype": str(out.dtype)}
            t = torch.tensor([1.0, 2.0], dtype=torch.float64)
            zen.torch.allreduce_(t, state=state, name="w2", scheme="auto")
            assert t.tolist() == [world * 1.0, world * 2.0], t
    # Empty tensors are accepted, as by all_reduce; empty on one rank only
    # is a mismatch on every rank.
    for shape in [(0,), (0, 4), (3, 0)]:
        e = torch.zeros(shape)
        assert zen.torch.allreduce_(e, state=state, name="empty") is e and e.shape == shape
        esp = torch.sparse_coo_tensor(torch.zeros(1, 0, dtype=torch.int64), torch.zeros(0, 4),
                                      (0, 4))
        assert zen.torch.allreduce_(esp, state=state, name="empty").shape == (0, 4)
    one = torch.zeros((0, 4) if rank == bad_rank else (2, 4))
    messages["empty on one rank"] = expect(zen.MismatchError,
                                           lambda: zen.torch.allreduce_(one, state=state,
                                                                        name="empty1"))
    # A COO tensor of 0 sparse dimensions (one row: the whole tensor).
    s0 = torch.sparse_coo_tensor(torch.zeros(0, 1, dtype=torch.int64),
                                 torch.full((1, 3), float(rank + 1)), (3,))
    out = zen.torch.allreduce_(s0, state=state, name="s0")
    assert out.to_dense().tolist() == [world * (world + 1) / 2] * 3, out
    # W2 in DDP: an fp64 model with gradients near 1e40 (inf in float32):
    # with the default scheme and with scheme "zen" its gradients are plain
    # DDP's bit for bit (summed in float64, not trained on inf and NaN
    # entries). A hook's error reaches backward with its class name: ranks
    # registered with different schemes raise on every rank.
    torch.manual_seed(0)
    model = nn.Linear(4, 3).double()
    ddp = nn.parallel.DistributedDataParallel(model)
    zen.torch.register(ddp, scheme="agsparse" if rank == bad_rank else "zen")
    x = torch.full((2, 4), 1e40 if rank == bad_rank else 1.0, dtype=torch.float64)
    messages["ddp fp64"] = expect(Exception, lambda: ddp(x).sum().backward(), "scheme")
    # The class name reaches backward (not "Unable to cast ... to Tensor").
    assert "MismatchError: rank" in messages["ddp fp64"], messages["ddp fp64"]
    assert "Unable to cast" not in messages["ddp fp64"], messages["ddp fp64"]
    grads = {}
    for hooked in ("auto", "zen", None):
        torch.manual_seed(0)
        net = nn.parallel.DistributedDataParallel(nn.Linear(4, 3).double())
        if hooked:
            zen.torch.register(net, scheme=hooked)
        net(x).sum().backward()
        grads[hooked] = [p.grad.tolist() for p in net.parameters()]
    for on, hooked in (("", "auto"), (" on zen", "zen")):
        exact["ddp fp64 1e40" + on] = {"got": grads[hooked], "ref": grads[None],
                                       "dtype": "torch.float64"}
    return messages


# --- what ran, per parameter (state.decision / decisions) --------------------

class FusedNet(nn.Module):
    """An embedding and a weight of the same width next to each other in
    DDP's bucket: the hook fuses them into one item 'mix.weight+emb.weight'."""
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.mix = nn.Linear(DIM, DIM, bias=False)

    def forward(self, x):
        return self.mix(self.emb(x)).mean(1)


def scenario_decisions(rank, world):
    """decision() and decisions() say what ran for each parameter: the scheme
    of a fused dense embedding's item, and 'allreduce' for buckets handed to
    the process group (not the scheme of their first call)."""
    schemes = {s for s, _ in zen.schemes()}
    torch.manual_seed(0)
    model = FusedNet()
    ddp = nn.parallel.DistributedDataParallel(model)
    state = zen.torch.register(ddp)
    for step in range(3):
        gen = torch.Generator().manual_seed(100 * step + rank)
        x = torch.randint(0, VOCAB, (4, 3), generator=gen)
        ddp(x).square().mean().backward()
    fused = state.decisions()
    assert set(fused) == {"emb.weight", "mix.weight"}, fused
    for name in ("emb.weight", "mix.weight"):
        assert fused[name]["path"] == "zen" and fused[name]["scheme"] in schemes, fused
        assert state.decision(name) == fused[name]["scheme"], (name, state.decision(name))
    # Net in small buckets: proj's dense gradient goes to the process group
    # after its first call; the embedding stays on zen.
    torch.manual_seed(0)
    model = Net(sparse=False)
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.001)
    state = zen.torch.register(ddp, scheme="agsparse")
    run_steps(ddp, torch.optim.SGD(model.parameters(), lr=0.1), rank, 3)
    net = state.decisions()
    assert net["proj.weight"]["path"] == "allreduce", net
    assert state.decision("proj.weight") == "allreduce", state.decision("proj.weight")
    assert net["emb.weight"] == {"bucket": net["emb.weight"]["bucket"], "path": "zen",
                                 "scheme": "agsparse"}, net
    assert state.decision("no.such.parameter") is None
    return {"fused": fused, "net": net}


# --- transport 'process_group' (the group's own collectives) ----------------

def scenario_pg_transport(rank, world):
    """Every zen.torch entry point on ZenState(transport='process_group'),
    over this Gloo group on CPU tensors (the code that runs on NCCL/CUDA):
    allreduce_ against torch.distributed's sum (float64 summed in float64:
    exact where float32 is not), bad input and disagreement on every rank,
    DDP training bit for bit plain DDP (sparse and dense embeddings, dense
    buckets on the engine in Gloo's ring order), topk_hook, decisions."""
    state = zen.torch.ZenState(transport="process_group")
    assert state.transport == "process_group"
    gen = torch.Generator().manual_seed(20 + rank)
    out = {}
    # Dense, every dtype, against all_reduce of float64 copies.
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        t = torch.randn(30, 4, generator=gen).to(dtype)
        t[rank::2] = 0
        expected = t.to(torch.float64)
        dist.all_reduce(expected)
        zen.torch.allreduce_(t, state=state, name=f"dense.{dtype}")
        tol = {torch.float32: 1e-6, torch.float64: 1e-15}.get(dtype, 1e-2)
        torch.testing.assert_close(t.to(torch.float64), expected, rtol=tol, atol=tol,
                                   msg=lambda m: f"dense {dtype}: {m}")
    # float64 in float64: what float32 loses (issue 41 W2) is kept.
    big = torch.tensor([1e300, 1e-300, 1e10 if rank == 0 else 0.0,
                        1.0 if rank == 1 else 0.0], dtype=torch.float64)
    if rank == 0:
        big[3] = -1e10 if world == 2 else 0.0
    expected = big.clone()
    dist.all_reduce(expected)
    zen.torch.allreduce_(big, state=state, name="float64")
    assert torch.equal(big, expected), (big, expected)
    # Sparse COO with repeats, 2 sparse dims, average, an empty rank.
    ids = torch.tensor([[7, 3, 7, 50 + rank]]) if rank != 1 else torch.zeros(1, 0, dtype=torch.int64)
    vals = torch.randn(ids.shape[1], 4, generator=gen, dtype=torch.float64)
    sp = torch.sparse_coo_tensor(ids, vals, (100, 4))
    expected = dense_sum(sp)
    zen.torch.allreduce_(sp, state=state, name="sparse")
    assert sp.is_coalesced() and sp.dtype == torch.float64
    torch.testing.assert_close(sp.to_dense(), expected, rtol=1e-15, atol=0)
    sp2 = torch.sparse_coo_tensor(torch.tensor([[0, 2, rank % 4], [1, 1, 3]]),
                                  torch.randn(3, generator=gen), (4, 5))
    expected = dense_sum(sp2) / world
    zen.torch.allreduce_(sp2, average=True, state=state, name="sparse2")
    assert_close(sp2, expected, "sparse 2-D average")
    # Empty tensors; bad input on one rank; disagreement.
    e = torch.zeros(0, 3)
    assert zen.torch.allreduce_(e, state=state, name="empty") is e
    bad = world - 1
    w3 = torch.sparse_coo_tensor(torch.tensor([[0], [5 if rank == bad else 1]]), torch.ones(1),
                                 (3, 4), check_invariants=False)
    out["w3"] = expect(ValueError, lambda: zen.torch.allreduce_(w3, state=state, name="w3"),
                       "out of range" if rank == bad else "rank")
    shapes = torch.ones(10 + (rank == bad), 2)
    out["mismatch"] = expect(zen.MismatchError,
                             lambda: zen.torch.allreduce_(shapes, state=state, name="shape"))
    good = torch.full((4, 3), float(rank + 1))
    zen.torch.allreduce_(good, state=state, name="after")
    assert good.tolist() == [[world * (world + 1) / 2] * 3] * 4, good
    # DDP: bit for bit plain DDP (float32; dense buckets in Gloo's ring
    # order on >= 3 ranks, sparse buckets in rank order).
    runs = {}
    for sparse in (False, True):
        for options in ({}, {"dense_threshold": 0}, {"dense_threshold": None}):
            reference, _, ref_losses = train(sparse, rank, None)
            model, pg_state, losses = train(sparse, rank, "zen", transport="process_group",
                                            **options)
            inexact = [n for (n, p), (_, q) in zip(model.named_parameters(),
                                                   reference.named_parameters())
                       if not torch.equal(p, q)]
            key = f"sparse={sparse}" + "".join(f",{k}={v}" for k, v in options.items())
            runs[key] = {"losses": losses, "ref": ref_losses, "inexact": inexact,
                         "bytes_sent": pg_state.bytes_sent,
                         "paths": sorted({d["path"] for d in pg_state.decisions().values()})}
            assert inexact == [] and losses == ref_losses, (key, runs[key])
            assert all(d["scheme"] in ("zen", "allreduce")
                       for d in pg_state.decisions().values()), pg_state.decisions()
    out["ddp"] = runs
    # float64 DDP with the hook: bit for bit plain DDP (issue 44's figure).
    for sparse in (False, True):
        torch.manual_seed(0)
        ref_model = Net(sparse).double()
        ref = nn.parallel.DistributedDataParallel(ref_model, bucket_cap_mb=0.01)
        torch.manual_seed(0)
        model = Net(sparse).double()
        ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.01)
        zen.torch.register(ddp, transport="process_group")
        for m, d in ((ref_model, ref), (model, ddp)):
            run_steps(d, torch.optim.SGD(m.parameters(), lr=0.5), rank, 5)
        for (n, p), (_, q) in zip(model.named_parameters(), ref_model.named_parameters()):
            assert torch.equal(p, q), (sparse, n, (p - q).abs().max())
    # topk_hook on the engine: selection on the device, every rank's
    # parameters equal, error feedback kept.
    torch.manual_seed(0)
    model = Net(False)
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.01)
    topk = TopKState(ratio=0.1, module=model, min_numel=1,
                     zen_state=zen.torch.ZenState(transport="process_group"))
    ddp.register_comm_hook(topk, topk_hook)
    run_steps(ddp, torch.optim.SGD(model.parameters(), lr=0.5), rank, STEPS)
    for n, p in model.named_parameters():
        gathered = [torch.empty_like(p) for _ in range(world)]
        dist.all_gather(gathered, p.detach().contiguous())
        assert all(torch.equal(g, gathered[0]) for g in gathered), n
    assert topk.stats[-1]["values_sent"] < topk.stats[-1]["values_total"], topk.stats[-1]
    assert topk.residual(model.emb.weight) is not None
    out["topk"] = topk.stats[-1]
    return out


def scenario_fp64_ddp(rank, world):
    """float64 DDP with the hook on transport zen (scheme auto; dense
    buckets kept on zen, dense_threshold=None): 5 steps bit for bit plain
    DDP (dense buckets summed in float64 in Gloo's ring order on >= 3 ranks,
    sparse ones in rank order). The largest parameter difference per
    configuration (0.0 when bit for bit), and which schemes ran."""
    out = {}
    for sparse in (False, True):
        torch.manual_seed(0)
        ref_model = Net(sparse).double()
        ref = nn.parallel.DistributedDataParallel(ref_model, bucket_cap_mb=0.01)
        torch.manual_seed(0)
        model = Net(sparse).double()
        ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.01)
        state = zen.torch.register(ddp, dense_threshold=None)
        for m, d in ((ref_model, ref), (model, ddp)):
            run_steps(d, torch.optim.SGD(m.parameters(), lr=0.5), rank, 5)
        diff = {n: (p - q).abs().max().item()
                for (n, p), (_, q) in zip(model.named_parameters(), ref_model.named_parameters())}
        unequal = [n for (n, p), (_, q) in zip(model.named_parameters(),
                                               ref_model.named_parameters())
                   if not torch.equal(p, q)]
        assert state.comm.bytes_sent > 0
        out[f"sparse={sparse}"] = {"unequal": unequal, "max_diff": max(diff.values()),
                                   "dtype": str(model.proj.weight.dtype)}
    return out


def scenario_half_ddp(rank, world):
    """bfloat16 and float16 DDP with the hook on transport zen (scheme auto,
    dense buckets kept on zen, dense_threshold=None): 5 steps against plain
    DDP (dense buckets summed in Gloo's ring order on >= 3 ranks, rounded
    after each addition). The largest parameter difference per
    configuration (0.0 when bit for bit)."""
    out = {}
    # (torch's CPU backward has no float16 sparse gradient: "cadd_sparse"
    # not implemented for 'Half', so plain DDP cannot run that one.)
    for dtype, sparse in ((torch.bfloat16, False), (torch.bfloat16, True), (torch.float16, False)):
        torch.manual_seed(0)
        ref_model = Net(sparse).to(dtype)
        ref = nn.parallel.DistributedDataParallel(ref_model, bucket_cap_mb=0.01)
        torch.manual_seed(0)
        model = Net(sparse).to(dtype)
        ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.01)
        state = zen.torch.register(ddp, dense_threshold=None)
        for m, d in ((ref_model, ref), (model, ddp)):
            run_steps(d, torch.optim.SGD(m.parameters(), lr=0.5), rank, 5)
        diff = {n: (p - q).abs().max().item()
                for (n, p), (_, q) in zip(model.named_parameters(),
                                          ref_model.named_parameters())}
        unequal = [n for (n, p), (_, q) in zip(model.named_parameters(),
                                               ref_model.named_parameters())
                   if not torch.equal(p, q)]
        assert state.comm.bytes_sent > 0
        out[f"{dtype},sparse={sparse}"] = {"unequal": unequal,
                                           "max_diff": max(diff.values()),
                                           "dtype": str(model.proj.weight.dtype)}
    return out


def scenario_record_fail(rank, world):
    """ZenState(record=...) on a disk that fills up (rank 0's file size
    limit set just above the trace after step 0): the rewrite at step 1
    fails, every rank raises in that same call, and the file keeps step 0's
    whole trace, which `zen analyze` still reads (issue 41, D1)."""
    import resource
    import signal
    import subprocess
    import tempfile
    out = {}
    for sparse in (False, True):
        path_obj = [os.path.join(tempfile.mkdtemp(), "trace.safetensors") if rank == 0 else None]
        dist.broadcast_object_list(path_obj, src=0)
        path = path_obj[0]
        torch.manual_seed(0)
        model = Net(sparse)
        ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.01)
        zen.torch.register(ddp, record=path, record_steps=3)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        run_steps(ddp, opt, rank, 1)
        dist.barrier()
        limits = resource.getrlimit(resource.RLIMIT_FSIZE)
        if rank == 0:
            before = open(path, "rb").read()
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of the signal
            resource.setrlimit(resource.RLIMIT_FSIZE, (len(before) + 64, limits[1]))
        try:
            message = expect(Exception, lambda: run_steps(ddp, opt, rank, 1),
                             "could not write the trace")
        finally:
            if rank == 0:
                resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        out[f"sparse={sparse}"] = message
        if rank == 0:
            assert open(path, "rb").read() == before, "the trace changed"
            zen_cli = os.path.join(os.environ.get("ZEN_BUILD", "build"), "bin", "zen")
            text = subprocess.run([zen_cli, "analyze", path], capture_output=True, text=True,
                                  check=True).stdout
            assert "step0.emb.weight" in text and "step1." not in text, text
        dist.barrier()
    return out


# --- bfloat16 and float16 at their own width (issue 44) ----------------------

def scenario_half16(rank, world):
    """bfloat16 and float16 through allreduce_ (dense and sparse COO) with
    the schemes that round once per value (agsparse, sparse_ps, omnireduce,
    zen) and auto: each result against a reference computed here, the float32
    sum in rank order of the widened values, rounded once to the dtype. The
    values are multiples of 2^-4 with 8 significant bits, so every float32
    sum of them is exact and one rounding is the only one. The dense call
    must send 2 bytes per value (no float32 copy on the wire)."""
    out = {}
    state = zen.torch.ZenState()

    def given(r, shape, dtype):  # rank r's values, the same on every rank
        g = torch.Generator().manual_seed(2000 + r)
        k = torch.randint(1, 256, shape, generator=g).to(torch.float32)
        sign = torch.randint(0, 2, shape, generator=g).to(torch.float32) * 2 - 1
        e = torch.randint(0, 4, shape, generator=g).to(torch.float32)
        return (sign * k * torch.pow(2.0, e - 4)).to(dtype)

    for dtype in (torch.bfloat16, torch.float16):
        for scheme in ("agsparse", "sparse_ps", "omnireduce", "zen", "auto"):
            key = f"{dtype},{scheme}"
            # Dense: 480 x 8, every 7th row zero on each rank.
            ref = torch.zeros(480, 8, dtype=torch.float32)
            mag = torch.zeros(480, 8, dtype=torch.float32)  # sum of |x|: the per-hop bound
            for r in range(world):
                x = given(r, (480, 8), dtype)
                x[r::7] = 0
                ref += x.to(torch.float32)
                mag += x.to(torch.float32).abs()
            t = given(rank, (480, 8), dtype)
            t[rank::7] = 0
            before = state.comm.bytes_sent
            zen.torch.allreduce_(t, state=state, scheme=scheme, name=f"{key} dense")
            sent = state.comm.bytes_sent - before
            assert t.dtype == dtype
            if scheme != "auto":
                assert torch.equal(t, ref.to(dtype)), (key, (t.float() - ref).abs().max())
            else:  # whichever scheme auto chose: at most one rounding per hop
                bound = world * (2.0 ** -8 if dtype == torch.bfloat16 else 2.0 ** -11)
                assert ((t.float() - ref).abs() <= bound * mag).all(), key
            # agsparse sends each rank's rows at 2 bytes a value (plus 8-byte
            # ids and the calls' small metadata), far below float32's 4.
            if scheme == "agsparse":
                rows = 480 - len(range(rank, 480, 7))
                payload = (world - 1) * rows * (8 + 8 * 2)
                assert payload <= sent < payload + (world - 1) * rows * 8 * 2, (key, sent)
            # Sparse COO: rows of 200 x 4, overlapping across ranks.
            refd = torch.zeros(200, 4, dtype=torch.float32)
            for r in range(world):
                rr = torch.arange(0, 200, 3 + r)
                refd[rr] += given(r, (len(rr), 4), dtype).to(torch.float32)
            rows = torch.arange(0, 200, 3 + rank)
            sp = torch.sparse_coo_tensor(rows.unsqueeze(0), given(rank, (len(rows), 4), dtype),
                                         (200, 4))
            got = zen.torch.allreduce_(sp, state=state, scheme=scheme, name=f"{key} sparse")
            assert got.dtype == dtype
            if scheme != "auto":
                assert torch.equal(got.to_dense(), refd.to(dtype)), key
            out[key] = sent
    return out


SCENARIOS = {"ddp": scenario_ddp, "hook": scenario_hook, "allreduce": scenario_allreduce,
             "mismatch": scenario_mismatch, "drift": scenario_drift,
             "raw_args": scenario_raw_args, "dtypes": scenario_dtypes,
             "record": scenario_record, "values_pg": scenario_values_pg,
             "values": scenario_values, "ddp_flags": scenario_ddp_flags,
             "subgroups": scenario_subgroups, "compiled": scenario_compiled,
             "wrong_sums": scenario_wrong_sums, "decisions": scenario_decisions,
             "pg_transport": scenario_pg_transport, "record_fail": scenario_record_fail,
             "fp64_ddp": scenario_fp64_ddp, "half_ddp": scenario_half_ddp, "half16": scenario_half16}


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
