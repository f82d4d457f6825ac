"""The DDP side of zen.torch: ZenState, comm_hook, allreduce_ and register.

Internal: users import these from ``zen.torch`` (its docstring describes
them). They live here so that zen.sparsify (TopKState builds a ZenState, its
futures complete through _unwrap) and zen.torch (which also re-exports
TopKState and topk_hook) both import from one module with no circle:
zen._ddp <- zen.sparsify <- zen.torch.
"""

import datetime
import functools
import hashlib
import itertools
import math
import os
import sys
import time
import zlib

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.constants import default_pg_timeout

import zen

__all__ = ["ZenState", "allreduce_", "comm_hook", "register"]

# Environment overrides (documented in docs/sections/pytorch.md).
_ENV_SCHEME = "ZEN_SCHEME"
_ENV_HOSTNAME = "ZEN_HOSTNAME"
_ENV_TIMEOUT = "ZEN_TIMEOUT"
_ENV_TRANSPORT = "ZEN_TRANSPORT"
_TRANSPORTS = ("zen", "process_group")

# Communicators connected so far in this process, per process-group tag: the
# n-th one of a group uses the store prefix "zen/<generation>/<tag>/<n>", which
# is the same on every rank as long as all ranks connect in the same order.
# <generation> is "gen<k>": under torchrun, k is the sum over the group's ranks
# of $TORCHELASTIC_RESTART_COUNT (one tiny allreduce when the state connects),
# so the workers of a restart never read keys left in the store by an earlier
# generation; "gen0" when not under torchrun.
_connections = {}
# ZenState used when the hook or allreduce_ gets state=None, per process group.
_default_states = {}
# zen's sums are sorted, unique and in range: no invariant check (torch 2.x
# warns when the choice is left implicit; 1.13 has no such argument).
_UNCHECKED = ({"check_invariants": False}
              if hasattr(torch.sparse, "check_sparse_tensor_invariants") else {})


def _group_tag(group):
    if group is None or group is dist.GroupMember.WORLD:
        return "world"
    name = getattr(group, "group_name", None)  # torch >= 2.x: the same on every rank
    if name:
        return f"pg{name}"
    ranks = dist.get_process_group_ranks(group)
    return "ranks" + "_".join(str(r) for r in ranks)


def _generation(group):
    """The restart generation of a torchrun job, the same on every rank.

    Each torchrun agent counts only its own restarts: on a multi-host job the
    hosts that did not fail restart their workers with an unchanged
    $TORCHELASTIC_RESTART_COUNT. The sum over the group grows with every
    restart and is agreed by all ranks. 0 when not under torchrun.
    """
    value = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if value is None:
        return 0
    try:
        count = torch.tensor([int(value)], dtype=torch.int64)
    except ValueError:
        raise ValueError(f"zen: TORCHELASTIC_RESTART_COUNT is '{value}', not an integer") from None
    dist.all_reduce(count, group=group)
    return int(count.item())


def _torch_store():
    """The job's torch.distributed store (the TCPStore of env://, or the
    FileStore of file://). torch has no public accessor for it: this is the
    store that init_process_group created, as torch 1.13 to 2.13 keep it."""
    c10d = dist.distributed_c10d
    getter = getattr(c10d, "_get_default_store", None)
    if getter is None:
        raise RuntimeError(f"zen: torch {torch.__version__} has no "
                           "torch.distributed.distributed_c10d._get_default_store; pass "
                           "ZenState(comm=zen.connect_url(...)) instead")
    return getter()


def _default_hostname():
    hostname = os.environ.get(_ENV_HOSTNAME)
    if hostname:
        return hostname
    local, world = os.environ.get("LOCAL_WORLD_SIZE"), os.environ.get("WORLD_SIZE")
    if local is not None and world is not None and local != world:
        raise ValueError(
            f"zen: this job spans several hosts (LOCAL_WORLD_SIZE={local}, WORLD_SIZE={world}); "
            f"set {_ENV_HOSTNAME} to this host's address on the training network, or pass "
            "ZenState(hostname=...): zen binds only to the address it is told (loopback otherwise)")
    return "127.0.0.1"


def _default_timeout():
    value = os.environ.get(_ENV_TIMEOUT)
    if value:
        return float(value)
    return default_pg_timeout.total_seconds()


class ZenState:
    """What zen keeps for one process group: its communicator and its context.

    Args:
        process_group: the group to synchronize over (default: the world).
        scheme: scheme id (``zen.schemes()``); default $ZEN_SCHEME, else
            ``zen.default_scheme()`` ('auto' when the cost-model selector is
            built in, else 'zen', else 'agsparse').
        module: the model, to name parameters in error messages and in the
            calls' identities.
        hostname: address to bind; default $ZEN_HOSTNAME, else 127.0.0.1 on
            a single-host job (a multi-host job must say).
        timeout: seconds (or a timedelta) for the rendezvous and every
            transfer; default $ZEN_TIMEOUT, else torch's default
            process-group timeout.
        comm: an already connected zen.Communicator (then process_group,
            hostname and timeout are not used for connecting).
        threads, seed: passed to the schemes.
        dense_threshold: a dense DDP bucket whose global sum has at least
            this fraction of its elements in non-zero rows on its first call
            is handed to the process group's own allreduce from then on (as
            fast as plain DDP on dense data). Every rank sees the same sum,
            so every rank decides the same. None: always zen; 0: every
            dense bucket on the process group from its first call (zen then
            synchronizes only the sparse buckets).
        record: a path: the hook records the job's real gradients (every
            rank's, per parameter) of the first `record_steps` calls of
            each bucket as a zen-trace/1 file that rank 0 writes there
            (rewritten after every recorded call), for `zen analyze` and
            `zen simulate`. The recorded rows travel with the bucket's batch
            (scheme agsparse), so recording costs traffic only while it lasts.
        record_steps: how many calls of each bucket to record (default 3).
        values: how gradient values travel: "fp32" (default; bit-for-bit
            what plain DDP computes where the sum order agrees), "bf16" or
            "fp16" (half width on the wire, summed in float32: zen's
            equivalent of torch's bf16_compress_hook / fp16_compress_hook,
            composed with zen's sparsity). Buckets on the process group's
            allreduce (dense_threshold) are then cast to that dtype, summed
            by the process group and cast back, as torch's hooks do.
        ddp_order: True (default): on 3 or more ranks, a float32 dense
            bucket synchronized by zen is summed in the order Gloo's ring
            allreduce adds the ranks (per chunk of the bucket), so the
            result is plain DDP + Gloo's bit for bit (on 2 ranks every
            order gives the same float32 sum). Costs an ordered sum per
            element on the servers and means scheme zen where the scheme
            is auto; a sparse bucket is summed in ascending rank order, as
            Gloo's sparse allreduce does ('auto' then chooses among zen,
            agsparse and omnireduce, the schemes that add in that order).
            False: zen's own order (ascending ranks) and auto's free
            choice, with sums that may differ from DDP's in the last bit.
        timeline: True to record, per bucket call, when the hook started it
            and when its future was completed (time.perf_counter seconds)
            in ``state.timeline``, a list of dicts {"bucket", "path" ("zen",
            "sparse" or "pg"), "start", "end"}; the caller clears it as it
            likes. Off (None) by default: then the hook does no timing.
    """

    def __init__(self, process_group=None, *, scheme=None, module=None, hostname=None,
                 timeout=None, comm=None, threads=0, seed=None, dense_threshold=0.5,
                 record=None, record_steps=3, values="fp32", timeline=None, ddp_order=True,
                 transport=None):
        self.process_group = process_group
        transport = transport or os.environ.get(_ENV_TRANSPORT) or None
        if transport not in _TRANSPORTS + (None,):
            raise ValueError(f"zen: ZenState(transport={transport!r}): expected one of "
                             f"{', '.join(repr(t) for t in _TRANSPORTS)} (or None: by backend)")
        if transport == "process_group" and comm is not None:
            raise ValueError("zen: ZenState(comm=...) is zen's own communicator: it goes with "
                             "transport='zen', not 'process_group'")
        self._transport = "zen" if comm is not None else transport
        self._engine = None
        if self._transport == "process_group":  # the engine runs ZEN; no other scheme there
            self.scheme_id = scheme or "zen"
            if self.scheme_id not in ("zen", "auto"):
                raise ValueError(f"zen: transport 'process_group' runs scheme zen; "
                                 f"scheme '{self.scheme_id}' needs transport='zen'")
        else:
            self.scheme_id = scheme or os.environ.get(_ENV_SCHEME) or zen.default_scheme()
            known = [s for s, _ in zen.schemes()]
            if self.scheme_id not in known:
                raise ValueError(f"zen: unknown scheme '{self.scheme_id}' "
                                 f"(known: {', '.join(known)})")
        self._hostname = hostname
        self._timeout = timeout
        self._comm = comm
        self._threads = threads
        self._seed = seed
        self._context = None
        self.dense_threshold = dense_threshold
        # Per dense bucket index: "zen" or "pg" (the process group's allreduce),
        # decided from the first call's global sum.
        self.bucket_modes = {}
        self.record = os.fspath(record) if record is not None else None
        self.record_steps = record_steps
        self._calls = {}       # bucket index -> calls so far
        self._recorded = {}    # trace tensor name -> (rows, width, [(ids, values)] per rank)
        if values not in _WIRE_VALUES:
            raise ValueError(f"zen: ZenState(values={values!r}): expected one of "
                             f"{', '.join(repr(v) for v in _WIRE_VALUES)}")
        self.values = values
        self.ddp_order = bool(ddp_order)
        self.timeline = [] if timeline else None
        self._names = {}
        if module is not None:
            self._names = {id(p): n for n, p in module.named_parameters()}
        self._replicas_checked = set()  # (bucket index, parameter ids) found equal on all ranks
        # What each DDP bucket's latest call ran, for decision(): bucket index
        # -> (kind: "zen" / "sparse" / "allreduce", its parameters, its zen
        # item names or None). Set per call: one dict store.
        self._bucket_paths = {}
        self._seen_items = set()   # zen item names of the buckets synchronized so far
        self._bucket_keys = {}     # bucket index -> ids of its parameters when its mode was decided
        self._record_failure = None  # rank 0: why the latest trace write failed

    @property
    def comm(self):
        """The zen.Communicator, connected through the torch store on first use."""
        if self._comm is None:
            self._comm = self._connect()
        return self._comm

    @property
    def context(self):
        """The zen.Context (progress thread) every call of this state goes through."""
        if self._context is None:
            self._context = zen.Context(self.comm, scheme=self.scheme_id, threads=self._threads,
                                        seed=self._seed)
        return self._context

    @property
    def transport(self):
        """'zen' (zen's C++ communicator: CPU tensors) or 'process_group' (the
        group's own collectives: CPU or CUDA tensors, any backend). Unless
        given, 'zen' for a Gloo group and 'process_group' for any other
        backend (NCCL), decided on first use; the backend is the same on
        every rank, so is the decision."""
        if self._transport is None:
            backend = str(dist.get_backend(self.process_group)) if dist.is_initialized() else "gloo"
            self._transport = "zen" if backend == "gloo" else "process_group"
        return self._transport

    @property
    def engine(self):
        """The zen.process_group.ProcessGroupEngine of transport
        'process_group' (created on first use)."""
        if self._engine is None:
            from zen.process_group import ProcessGroupEngine
            timeout = (_timedelta_seconds(self._timeout) if self._timeout is not None
                       else _default_timeout())
            self._engine = ProcessGroupEngine(self.process_group, seed=self._seed,
                                              timeout=timeout)
        return self._engine

    @property
    def rank(self):
        if self.transport == "process_group":
            return dist.get_rank(self.process_group)
        return self.comm.rank

    @property
    def world_size(self):
        if self.transport == "process_group":
            return dist.get_world_size(self.process_group)
        return self.comm.size

    @property
    def bytes_sent(self):
        """Payload bytes this rank sent so far, on either transport."""
        if self.transport == "process_group":
            return self.engine.bytes_sent
        return self.comm.bytes_sent

    def check_replicas(self, bucket):
        """Before a DDP bucket's first synchronization: every rank of this
        state's group holds the same parameters, as DDP keeps them within its
        process group. A hook state whose group is not the DDP model's (the
        world by default, while DDP runs on a subgroup, e.g. one
        data-parallel group of a model-parallel job) would otherwise average
        gradients of different replicas or shards and train on them without
        an error. Compares a fingerprint of the bucket's parameters (their
        shapes, dtypes and up to 257 values each) over zen's communicator, in
        one small batch; raises zen.MismatchError on every rank when
        they differ. The hooks call it; no gradient is synchronized before it.
        Again when a bucket holds other parameters (DDP rebuilds its
        buckets after the first step; a state serves a new model)."""
        index = bucket.index()
        params = bucket.parameters()
        self._check_replicas(bucket, index, params, tuple(map(id, params)))

    def _check_replicas(self, bucket, index, params, ids):
        key = (index, ids)  # a new model or rebuilt bucket: again
        if key in self._replicas_checked:
            return
        world, rank = self.world_size, self.rank
        mine = _replica_fingerprint(params)
        if self.transport == "process_group":
            prints = self._gather_fingerprints(mine, bucket.buffer().device)
            self._check_prints(key, prints, index, rank)
            return
        # Each rank's 48-bit fingerprint in 16-bit pieces, in its own slots of
        # a dense sum: one non-zero per slot, so the float32 sum is exact.
        slots = np.zeros(3 * world, dtype=np.float32)
        slots[3 * rank:3 * rank + 3] = [(mine >> (16 * i)) & 0xFFFF for i in range(3)]
        self.context.start(f"zen.replicas.bucket{index}",
                           [("dense", "replicas", slots, slots.size, 1, {"scheme": "agsparse"})]
                           ).wait()
        prints = [sum(int(slots[3 * r + i]) << (16 * i) for i in range(3)) for r in range(world)]
        self._check_prints(key, prints, index, rank)

    def _gather_fingerprints(self, mine, device):
        out = torch.empty(self.world_size, dtype=torch.int64, device=device)
        _all_gather_single(out, torch.tensor([mine], dtype=torch.int64, device=device),
                                    group=self.process_group)
        return out.tolist()

    def _check_prints(self, key, prints, index, rank):
        if all(f == prints[0] for f in prints):
            self._replicas_checked.add(key)
        else:
            groups = {}
            for r, f in enumerate(prints):
                groups.setdefault(f, []).append(r)
            held = " | ".join(", ".join(map(str, rs)) for rs in groups.values())
            raise zen.MismatchError(
                f"zen: rank {rank}: DDP bucket {index}: the ranks of this hook's group hold "
                f"different parameters (ranks with equal ones: {held}), so they are not "
                "replicas of one DDP model: the hook's state must synchronize over the DDP "
                "model's process group (zen.torch.register(ddp) does; else "
                "ZenState(ddp.process_group), TopKState(process_group=ddp.process_group))")

    def decision(self, tensor):
        """What synchronized `tensor` on its latest call: a scheme id ('zen',
        'agsparse', ...: the one 'auto' chose, or the state's fixed scheme)
        for what went through zen, 'allreduce' for a DDP bucket handed to the
        process group's own allreduce (ZenState.dense_threshold), or None
        when nothing of that name has been synchronized yet. `tensor` is a
        parameter name of the DDP model (``module=``; also when the hook
        fused it with its neighbours into one item, or synchronized it with
        the bucket's other 0-/1-D parameters) or the name of an allreduce_
        call."""
        path = self._latest_path(tensor)
        if path is None:
            return self._scheme_of(tensor)
        kind, item = path
        return "allreduce" if kind == "allreduce" else self._scheme_of(item)

    def decisions(self):
        """{parameter name: {"bucket", "path", "scheme"}} for every parameter
        of the DDP buckets synchronized so far, as of each bucket's latest
        call: path "zen" (a dense bucket's rows through zen), "sparse" (a
        sparse COO bucket through zen) or "allreduce" (the process group's
        own); scheme as decision() says."""
        out = {}
        for index, (kind, params, items) in sorted(self._bucket_paths.items()):
            for param in params:
                name = self.param_name(param, None)
                if name is None:
                    continue
                item = _item_of(name, param, index, items)
                out[name] = {"bucket": index, "path": kind,
                             "scheme": "allreduce" if kind == "allreduce"
                             else self._scheme_of(item)}
        return out

    def _latest_path(self, tensor):
        """(kind, item name) of the latest bucket call that held parameter
        `tensor`, or None."""
        for index, (kind, params, items) in self._bucket_paths.items():
            for param in params:
                if self.param_name(param, None) == tensor:
                    return kind, _item_of(tensor, param, index, items)
        return None

    def _scheme_of(self, item):
        if self._transport == "process_group":  # the engine runs ZEN
            return "zen" if item in self._seen_items else None
        if self._context is None:
            return None
        self.context.drain()
        chosen = self.context.decision(item)
        if chosen is not None:
            return chosen
        if item in self._seen_items:  # a fixed scheme, or auto held to zen by a sum order
            return self.scheme_id if self.scheme_id != "auto" else "zen"
        return None

    def param_name(self, param, fallback):
        return self._names.get(id(param), fallback)

    def _connect(self):
        if not dist.is_available() or not dist.is_initialized():
            raise ValueError("zen: torch.distributed is not initialized: call "
                             "init_process_group('gloo') first, or pass ZenState(comm=...)")
        group = self.process_group
        rank, size = dist.get_rank(group), dist.get_world_size(group)
        if rank < 0:
            raise ValueError("zen: this rank is not a member of the process group")
        tag = _group_tag(group)
        n = _connections.get(tag, 0)
        _connections[tag] = n + 1
        store = _torch_store()
        hostname = self._hostname or _default_hostname()
        timeout = (_timedelta_seconds(self._timeout) if self._timeout is not None
                   else _default_timeout())
        return zen.connect(store, rank, size, prefix=f"zen/gen{_generation(group)}/{tag}/{n}",
                           hostname=hostname, timeout=timeout)


def _state(state):
    if isinstance(state, ZenState):
        return state
    if state is not None:
        raise TypeError(f"zen: expected a zen.torch.ZenState or None, got {type(state).__name__}")
    group = dist.GroupMember.WORLD if dist.is_initialized() else None
    if group not in _default_states:
        _default_states[group] = ZenState()
    return _default_states[group]


def _item_of(name, param, index, items):
    """The zen item that carried parameter `name` in a bucket call whose
    items were `items` (None for the process group's allreduce)."""
    if not items:
        return name
    if len(items) == 1 and not items[0].endswith(".vectors"):
        return items[0]  # a sparse bucket, or a dense one of one item
    for item in items:
        if name in item.split("+"):
            return item
    return f"bucket{index}.vectors" if param.dim() < 2 else name


def _replica_fingerprint(params):
    """48 bits of a digest of the parameters' shapes, dtypes and up to 257
    values each (a stride through each and its last value): equal on ranks
    that hold the same parameters."""
    digest = hashlib.blake2b(digest_size=8)
    for p in params:
        flat = p.detach().reshape(-1)
        digest.update(f"{tuple(p.shape)} {p.dtype};".encode())
        n = flat.numel()
        if n:
            sample = torch.cat([flat[::max(1, n // 256)][:256], flat[-1:]])
            digest.update(sample.to(torch.float32).cpu().contiguous().numpy().tobytes())
    return int.from_bytes(digest.digest()[:6], "little")


def _matrix_shape(shape):
    """[rows, width] of a tensor synchronized row-wise: rows = first dim."""
    if len(shape) >= 2:
        return shape[0], math.prod(shape[1:])
    return math.prod(shape), 1


# all_gather into one tensor (torch 2.13 renamed all_gather_into_tensor).
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor

# ZenState(values=...): the wire format of zen's items ("values" option of
# zen.Context.start) and the dtype a process-group bucket is cast to.
_WIRE_VALUES = ("fp32", "bf16", "fp16")
_PG_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


# Dtypes zen accepts: float32 and float64 are summed in their own precision
# (float64 values with ZenState(values="fp32"); a half-width wire rounds them
# through float32). float16 and bfloat16 are handed over at their own width
# and summed in float32 (rounded where the scheme stores a result) when the
# scheme sums them (zen.scheme_dtypes); for one that does not, or with a
# half-width wire, they are copied to float32 and converted back afterwards.
_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


@functools.lru_cache(maxsize=None)
def _scheme_dtypes():
    """{scheme id: the names of the dtypes it sums} (SyncCapabilities)."""
    return {id_: frozenset(names) for id_, names in zen.scheme_dtypes()}


def _numpy(tensor):
    """A CPU tensor's values as a numpy array in place (no copy): bfloat16,
    which numpy lacks, as its int16 bits (the item's "dtype" names it)."""
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy()
    return tensor.numpy()


def _torch(array, dtype):
    """The tensor over a numpy array of zen's (no copy): bfloat16 values
    arrive as 16-bit integers holding their bits."""
    if dtype == torch.bfloat16:
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


def _local_error(tensor):
    """Why zen's communicator (transport 'zen') cannot synchronize this
    tensor, or None."""
    if tensor.device.type != "cpu":
        return (f"tensor is on {tensor.device}; transport 'zen' synchronizes CPU tensors "
                "(ZenState(transport='process_group') runs on the process group's device)")
    if tensor.dtype not in _DTYPES:
        return (f"tensor has dtype {tensor.dtype}; zen synchronizes float32, float16, bfloat16 "
                "and float64")
    return None


def _index_error(tensor):
    """Why a COO tensor's indices are not in range, or None. Each sparse
    dimension is checked on its own: the row-major linear id the schemes
    see would fold an index past one dimension's end into the next
    ((0, 5) of shape (3, 4) is row 1, column 1) and a negative one into the
    previous, and summing there would be a silent wrong sum. (With one
    sparse dimension the schemes' own range check on the ids is the same.)"""
    sparse_dim = tensor.sparse_dim()
    indices = tensor._indices()
    if sparse_dim < 2 or indices.numel() == 0:
        return None
    shape = torch.tensor(tensor.shape[:sparse_dim], dtype=indices.dtype, device=indices.device)
    bad = ((indices < 0) | (indices >= shape.unsqueeze(1))).any(dim=0)
    if not bool(bad.any()):
        return None
    j = int(bad.nonzero()[0, 0])
    where = tuple(int(v) for v in indices[:, j].tolist())
    dims = [k for k in range(sparse_dim) if not 0 <= where[k] < tensor.shape[k]]
    return (f"COO index {where} (entry {j} of {indices.shape[1]}) is out of range in sparse "
            f"dimension {dims[0]} of shape {tuple(tensor.shape)}: indices must lie in "
            f"[0, size) in every dimension")


def _item_options(state, options=None):
    """`options` of one of the state's zen items, with its wire format
    (ZenState(values=...)); None when there is nothing to say."""
    if state.values == "fp32":
        return options
    out = dict(options or {})
    out["values"] = state.values
    return out


def _describe(exc):
    return f"{type(exc).__name__}: {exc}"


def _dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def _native(tensor, wire="fp32", scheme="auto"):
    """The dtype zen is handed `tensor` in: its own for values sent as they
    are (`wire` "fp32", ZenState.values) when it is float64, or bfloat16 or
    float16 and `scheme` sums that dtype; else float32."""
    if wire != "fp32" or tensor.dtype == torch.float32:
        return torch.float32
    if tensor.dtype == torch.float64:
        return torch.float64
    if _dtype_name(tensor.dtype) in _scheme_dtypes().get(scheme, ()):
        return tensor.dtype
    return torch.float32


def _summed(tensor, wire="fp32", scheme="auto"):
    """A contiguous tensor of the dtype zen is handed `tensor` in (_native)
    with tensor's values: tensor itself when it already is one (then results
    land in place, no converting copy), else a copy."""
    dtype = _native(tensor, wire, scheme)
    if tensor.dtype == dtype and tensor.is_contiguous():
        return tensor
    return tensor.detach().to(dtype).contiguous()


def _sparse_item(tensor, name, options, divisor=None, world=1, scheme="auto"):
    """('sparse', ...) for a COO tensor, or ('reject', ...) saying why not,
    and the function that turns the handle's result into a COO tensor.
    divisor: the values (float32, or float64 for float64 sent as they are;
    still with their duplicates) are divided by it first, as DDP's reducer divides a sparse gradient before Gloo. Any
    failure here becomes a 'reject' item, so that it travels through the
    batch's metadata round and every rank raises instead of pairing with
    this rank's next call."""
    rows = width = 0
    try:
        sparse_dim = tensor.sparse_dim()
        shape = tuple(tensor.shape)
        rows = math.prod(shape[:sparse_dim])
        width = math.prod(shape[sparse_dim:])
        error = _local_error(tensor) or _index_error(tensor)
        if not error:
            indices = tensor._indices()
            opts = options or {}
            dtype = _native(tensor, opts.get("values", "fp32"), opts.get("scheme", scheme))
            values = tensor._values().detach().to(dtype).reshape(indices.shape[1], width)
            if divisor is not None:
                indices, values = _ddp_divided(indices, values, divisor,
                                               shape[:sparse_dim] + (width,))
            ids = _linear_ids(indices, shape, sparse_dim)  # row-major over the sparse dims
            item = ("sparse", name, rows, width, ids.contiguous().numpy(),
                    _numpy(values.contiguous()), options)
    except Exception as e:
        error = _describe(e)
    if error:
        return ("reject", name, rows, width, error), None
    dtype = tensor.dtype

    def finish(result):
        out_ids, out_values = result
        return _coo_from(torch.from_numpy(out_ids), _torch(out_values, values.dtype), shape,
                         sparse_dim), dtype

    return item, finish


def _ddp_divided(indices, values, divisor, shape):
    """(indices, values) of a COO gradient as DDP + Gloo sum it: divided by
    `divisor` with its repeats still apart, then coalesced by torch, whose
    sum of repeated ids follows its own sort, not the input order; the
    schemes then see no repeats, so the sum is Gloo's sparse allreduce's bit
    for bit (both transports)."""
    merged = torch.sparse_coo_tensor(indices, values / divisor, shape, **_UNCHECKED).coalesce()
    return merged._indices(), merged._values()


def _call_site_name(depth, frames=8):
    """'allreduce_@file.py:LINE#xxxxxxxx' for the caller `depth` frames up,
    the suffix a checksum of the `frames` call sites above it. The same on
    every rank running the same code, and different for calls from different
    places (also through a shared wrapper), so that a rank that makes an
    extra call is caught (zen.MismatchError on every rank) instead of
    pairing its calls with the peers' next ones."""
    frame = sys._getframe(depth)
    top = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
    sites = []
    while frame is not None and len(sites) < frames:
        sites.append(f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}")
        frame = frame.f_back
    return f"allreduce_@{top}#{zlib.crc32(' '.join(sites).encode()):08x}"


def allreduce_(tensor, *, average=False, state=None, scheme=None, name=None):
    """Sums `tensor` over all ranks of the state's process group with zen.

    Dense: in place (a >= 2-D tensor is synchronized row-wise over its first
    dimension, so zero rows are not sent; a 0-/1-D one element-wise); returns
    tensor. Sparse COO: the coalesced sum replaces the tensor's contents in
    place (indices sorted, each row once: the union of all ranks' rows) and is
    returned. average=True divides by the world size (after the sum). Every
    rank must make the same calls with the same shapes and dtypes; otherwise
    zen.MismatchError is raised on every rank. `name` identifies the call
    across ranks (default: the call site and its callers,
    'allreduce_@file.py:LINE#checksum'): a rank that makes a call the others
    do not make raises zen.MismatchError on every rank, on that call and
    every later one of the state's communicator, rather than pairing with
    the peers' next call. CPU tensors of float32, float16, bfloat16 or
    float64; float64 is summed in float64, other dtypes in float32 and
    converted back (the division of average=True happens in the summed
    dtype, before the conversion).
    Bad input raises ValueError on every rank. A tensor with no elements
    (a 0 in its shape) is accepted, as by torch.distributed.all_reduce: it
    still takes part in the call's agreement (as a 1 x 1 placeholder named
    after its shape), so a rank whose tensor is empty where the others' is
    not raises zen.MismatchError on every rank.
    """
    state = _state(state)
    name = name or _call_site_name(2)
    options = {"dtype": _dtype_name(tensor.dtype)}
    if scheme:
        options["scheme"] = scheme
    options = _item_options(state, options)
    if state.transport == "process_group":
        return _pg_allreduce_(state, tensor, average, name)
    ctx = state.context
    if tensor.numel() == 0 and tensor.layout in (torch.strided, torch.sparse_coo):
        shape = "x".join(str(d) for d in tensor.shape)
        placeholder = np.zeros(1, dtype=np.float32)
        ctx.start(name, [("dense", f"{name}[empty {shape}]", placeholder, 1, 1, options)]).wait()
        return tensor
    if tensor.layout == torch.sparse_coo:
        item, finish = _sparse_item(tensor, name, options, world=state.world_size,
                                    scheme=state.scheme_id)
        results = ctx.start(name, [item]).wait()
        result, dtype = finish(results[0])
        if average:
            result = result / state.world_size
        with torch.no_grad():
            tensor.copy_(result.to(dtype))
        return tensor
    rows, width = _matrix_shape(tuple(tensor.shape))
    error = None
    if tensor.layout != torch.strided:
        error = f"tensor layout {tensor.layout} is not supported (strided or sparse_coo)"
    else:
        error = _local_error(tensor)
    if error:
        ctx.start(name, [("reject", name, rows, width, error)]).wait()
    with torch.no_grad():
        work = _summed(tensor, state.values, scheme or state.scheme_id)
        ctx.start(name, [("dense", name, _numpy(work.view(-1)), rows, width, options)]).wait()
        if average:
            work.div_(state.world_size)
        if work is not tensor:
            tensor.copy_(work)
    return tensor


# Gloo's ring allreduce (gloo/allreduce.cc, what ProcessGroupGloo runs for a
# CPU bucket) cuts a buffer of `total` bytes into numSegments =
# roundUp(max(ceil(total / 1 MiB), 2 world), world) segments of
# roundUp(ceil(total / numSegments), 4) bytes; chunk c (segments
# [c nspr, (c + 1) nspr), nspr = numSegments / world) travels the ring from
# rank c - 1 down to rank c, each adding its value to the sum so far. zen
# adds in that order when told (SyncOptions::sum_order), so a dense bucket
# summed by zen is plain DDP's bucket bit for bit.
_GLOO_MAX_SEGMENT_BYTES = 1024 * 1024


def _ddp_order(state, buffer):
    """Whether a dense bucket's zen items are summed in Gloo's ring order:
    values sent at the bucket's own width, 3 or more ranks (on 2 the order
    does not matter), and a scheme that can (float32, bfloat16, float16: zen;
    float64: dense or zen; or auto, which then means zen or dense). zen
    rounds a 16-bit sum after each addition in that order, as Gloo's ring
    does at each hop, so a bfloat16/float16 bucket is plain DDP's bit for
    bit too."""
    can = {torch.float32: ("auto", "zen"), torch.float64: ("auto", "dense", "zen"),
           torch.bfloat16: ("auto", "zen"), torch.float16: ("auto", "zen")}
    return (state.ddp_order and state.values == "fp32" and buffer.dtype in can
            and state.world_size >= 3 and state.scheme_id in can[buffer.dtype])


def _ddp_rank_order(state):
    """Whether a sparse bucket's sum must be added in ascending rank order
    (what Gloo's sparse allreduce does, so plain DDP's bit for bit): float32
    values and 3 or more ranks; 'auto' then chooses among the schemes that
    sum so (zen, agsparse, omnireduce), never one that adds in another
    order (sparcml's recursive doubling, sparse_ps)."""
    return state.ddp_order and state.values == "fp32" and state.world_size >= 3


def _with(item, options):
    return item + (options,) if options else item


def _ring_sum_order(pieces, numel, world, element_size=4):
    """(first element, start rank) steps for an item made of `pieces`
    ((offset, length) in a bucket of `numel` elements of `element_size`
    bytes, in item order)."""
    def round_up(v, m):
        return -(-v // m) * m
    total = numel * element_size
    segments = round_up(max(-(-total // _GLOO_MAX_SEGMENT_BYTES), 2 * world), world)
    chunk = (segments // world) * (round_up(-(-total // segments), element_size) // element_size)
    steps, at = [], 0
    for offset, length in pieces:
        g = offset
        while g < offset + length:
            c = g // chunk
            start = (c - 1) % world
            if not steps or steps[-1][1] != start:
                steps.append((at + g - offset, start))
            g = min(offset + length, (c + 1) * chunk)
        at += length
    return steps


def _bucket_layout(state, bucket, fuse=True):
    """Where a dense bucket's parameters lie in its buffer: (matrices, small),
    matrices = [(offset, name, rows, width)] for the >= 2-D parameters (with
    `fuse`, neighbours of the same width merged into one, names joined by
    '+'), small = [(offset, numel)] for the 0-/1-D ones."""
    buffer = bucket.buffer()
    index = bucket.index()
    start = buffer.data_ptr()
    size = buffer.element_size()
    grads, params = bucket.gradients(), bucket.parameters()
    matrices, small = [], []  # (offset, name, rows, width); (offset, numel)
    offset = 0
    for j, (grad, param) in enumerate(zip(grads, params)):
        n = grad.numel()
        if n == 0:
            continue
        if start <= grad.data_ptr() < start + buffer.numel() * size:
            offset = (grad.data_ptr() - start) // size
        if grad.dim() >= 2:
            rows, width = _matrix_shape(tuple(grad.shape))
            name = state.param_name(param, f"bucket{index}.{j}")
            last = matrices[-1] if matrices else None
            if fuse and last and last[3] == width and last[0] + last[2] * width == offset:
                matrices[-1] = (last[0], last[1] + "+" + name, last[2] + rows, width)
            else:
                matrices.append((offset, name, rows, width))
        else:
            small.append((offset, n))
        offset += n
    return matrices, small


def _bucket_items(state, bucket, work, fuse=True):
    """The items of a dense bucket, viewing `work` (the bucket's buffer, or
    its float32 copy): one per >= 2-D parameter ([rows x width], so zero rows
    of an embedding are not sent), and all 0-/1-D parameters together as one
    element buffer (copied out and back: they are small). With `fuse`,
    parameters of the same width that lie next to each other in the bucket
    (e.g. a transformer's q, k, v and output projections) are one item: one
    [rows1 + rows2 + ... x width] view, so one exchange instead of one per
    parameter, with the same sums. Returns the items and a function that
    copies the vectors' sums back."""
    buffer = bucket.buffer()
    index = bucket.index()
    flat = work.view(-1)
    array = _numpy(flat)
    matrices, small = _bucket_layout(state, bucket, fuse)
    ring = _ddp_order(state, buffer)
    # A bucket handed over at its own width other than float32 names its dtype.
    typed = {"dtype": _dtype_name(work.dtype)} if work.dtype != torch.float32 else {}

    def options(pieces):  # the item's options: its sum order, the state's wire values
        if ring:
            return _item_options(state, {**typed, "sum_order": _ring_sum_order(
                pieces, flat.numel(), state.world_size, buffer.element_size())})
        return _item_options(state, typed or None)

    items = [_with(("dense", name, array[o:o + rows * width], rows, width),
                   options([(o, rows * width)]))
             for o, name, rows, width in matrices]
    if not small:
        return items, None
    vectors = torch.cat([flat[o:o + n] for o, n in small])
    items.append(_with(("dense", f"bucket{index}.vectors", _numpy(vectors), vectors.numel(), 1),
                       options(small)))

    def copy_back():
        at = 0
        for o, n in small:
            flat[o:o + n].copy_(vectors[at:at + n])
            at += n

    return items, copy_back


def _dense_fraction(work, items):
    """Fraction of the bucket's elements that lie in non-zero rows of the
    (global) sum: the same on every rank."""
    total = nonzero = 0
    for item in items:
        _, _, array, rows, width = item[:5]
        m = _torch(array, work.dtype).view(rows, width)
        total += rows * width
        nonzero += int((m != 0).any(dim=1).sum()) * width
    return nonzero / total if total else 0.0


def _trace_name(step, name):
    clean = "".join(c if c.isalnum() or c in "_.:-" else "_" for c in name)
    return f"step{step}.{clean}"[:200]


def _nonzero_rows(matrix):
    """(ids, float32 values) of the non-zero rows of a [rows x width] tensor."""
    ids = (matrix != 0).any(dim=1).nonzero().view(-1)
    return ids, matrix[ids].to(torch.float32).contiguous()


def _record_items(state, step, parts):
    """Items that gather every rank's gradient of each part to every rank:
    rank r puts its rows at offset r x rows of a [world x rows] tensor, so
    the sum is the concatenation. parts: (name, rows, width, ids, values) of
    this rank's gradient."""
    world, rank = state.world_size, state.rank
    items, layout = [], []
    for name, rows, width, ids, values in parts:
        trace_name = _trace_name(step, name)
        items.append(("sparse", "record." + trace_name, world * rows, width,
                      (ids + rank * rows).contiguous().numpy(),
                      values.reshape(-1, width).to(torch.float32).contiguous().numpy(),
                      {"scheme": "agsparse"}))
        layout.append((trace_name, rows, width))
    return items, layout


def _keep_recorded(state, layout, results):
    """Stores the gathered gradients; rank 0 writes the trace file."""
    world = state.world_size
    for (trace_name, rows, width), (ids, values) in zip(layout, results):
        per_rank = []
        owner = ids // rows
        for r in range(world):
            mask = owner == r
            per_rank.append((ids[mask] - r * rows, values[mask]))
        state._recorded[trace_name] = (rows, width, per_rank)
    if state.rank == 0:
        tensors = [(n, rows, width, per_rank)
                   for n, (rows, width, per_rank) in sorted(state._recorded.items())]
        try:  # written whole or not at all (zen.write_trace: a new file, fsync, rename)
            zen.write_trace(state.record, world, tensors,
                            {"generator": "zen.torch ZenState(record=...)"})
        except Exception as e:  # noqa: BLE001 (every rank raises it: _agree_recorded)
            state._record_failure = f"{type(e).__name__}: {e}"


def _agree_recorded(state, device):
    """After a recorded call, every rank learns whether rank 0 wrote the
    trace (one tiny exchange): a failed write (a full disk) raises
    zen.Error on every rank in this same call, instead of on rank 0 only
    and a peer's 'connection closed' one step later. The file keeps its
    previous whole content (zen.write_trace replaces it by rename)."""
    failure, state._record_failure = state._record_failure, None
    if state.transport == "process_group":
        flag = torch.tensor([0 if failure is None else 1], dtype=torch.int64, device=device)
        dist.all_reduce(flag, group=state.process_group)
        failed = int(flag.item())
    else:
        flag = np.array([0.0 if failure is None else 1.0], dtype=np.float32)
        state.context.start("zen.record.status",
                            [("dense", "record.status", flag, 1, 1, {"scheme": "agsparse"})]
                            ).wait()
        failed = int(flag[0])
    if failed:
        where = failure if failure is not None else "see rank 0's error"
        raise zen.Error(f"zen: rank {state.rank}: ZenState(record={state.record!r}): rank 0 "
                        f"could not write the trace ({where}); the file keeps its previous "
                        "content")


def comm_hook(state, bucket):
    """DDP communication hook: ``ddp.register_comm_hook(state, zen.torch.comm_hook)``.

    state: a ZenState, or None for one per default process group. Starts the
    bucket's synchronization on zen's progress thread and returns at once
    with a torch.futures.Future, completed from that thread, so backward
    goes on meanwhile. One batch per bucket (one metadata round for all its
    parameters). As plain DDP does, each rank's gradient is scaled by 1/world
    size before the sum (dense: multiplied by 1/world in float32; sparse:
    divided, before its duplicates are summed), so float32 results are
    bit-for-bit plain DDP's wherever the sum order agrees (always on 2
    ranks; on the process group's allreduce at any size). Dense buckets are
    summed in place (zero rows and elements are not sent); a bucket whose
    first global sum is dense (ZenState.dense_threshold) uses the process
    group's allreduce from then on. A sparse COO bucket is replaced by the
    coalesced average. float64 buckets are scaled and summed in float64;
    float16/bfloat16 ones in float32, then converted back. ZenState(values="bf16"/"fp16")
    sends the values at half width.
    """
    state = _state(state)
    # One read of the bucket's parameters per call: the replica check, the
    # mode's key and the record of what ran share it (the steady state of a
    # bucket on the process group's allreduce is these lookups, a scaling
    # and the allreduce).
    buffer = bucket.buffer()
    index = bucket.index()
    params = bucket.parameters()
    key = tuple(map(id, params))
    state._check_replicas(bucket, index, params, key)
    if state._bucket_keys.get(index) != key:
        # A new composition under this index (DDP rebuilds its buckets after
        # the first step, in gradient-ready order): its mode is decided anew,
        # not inherited from whatever the index held before.
        state._bucket_keys[index] = key
        state.bucket_modes.pop(index, None)
    world = state.world_size
    event = None
    if state.timeline is not None:
        event = {"bucket": index, "path": "zen", "start": time.perf_counter(), "end": None}
        state.timeline.append(event)
    recording = False
    if buffer.layout != torch.sparse_coo:
        recording = state.record and state._calls.get(index, 0) < state.record_steps
        if state.dense_threshold == 0 and index not in state.bucket_modes and not recording:
            state.bucket_modes[index] = "pg"  # every bucket qualifies: no first call on zen
        if state.bucket_modes.get(index) == "pg" and not recording:
            if event is not None:
                event["path"] = "pg"
            state._bucket_paths[index] = ("allreduce", params, None)
            return _pg_allreduce(state, buffer, world, event)
    if state.transport == "process_group":
        return _pg_hook(state, bucket, buffer, index, params, world, event)
    future = torch.futures.Future()

    def done(result):
        if event is not None:
            event["end"] = time.perf_counter()
        future.set_result(result)

    def fail(e):
        future.set_exception(e)

    if buffer.layout == torch.sparse_coo:
        if event is not None:
            event["path"] = "sparse"
        name = _sparse_bucket_name(state, params, index)
        extra = {"dtype": _dtype_name(buffer.dtype)}
        if _ddp_rank_order(state):
            extra["rank_order"] = True
        options = _item_options(state, extra)
        item, finish = _sparse_item(buffer, name, options, divisor=world, world=world,
                                    scheme=state.scheme_id)
        items, layout = [item], None
        step = _next_call(state, index)
        if state.record and step < state.record_steps and finish is not None:
            rows, width = item[2], item[3]
            local = buffer.coalesce()
            if local.sparse_dim() == 1:
                ids, values = local._indices()[0], local._values()
            else:  # the item's linear ids; its values were divided: undo for the trace
                ids, values = torch.from_numpy(item[4]), _torch(item[5], buffer.dtype) * world
            extra, layout = _record_items(state, step, [(name, rows, width, ids, values)])
            items += extra

        def sparse_done(handle):
            try:
                results = handle.wait()
                if layout:
                    _keep_recorded(state, layout, results[1:])
                result, dtype = finish(results[0])
                done(result.to(dtype))
            except Exception as e:  # noqa: BLE001 (handed to DDP)
                fail(e)

        state._bucket_paths[index] = ("sparse", params, [name])
        state._seen_items.add(name)
        if layout:  # a recorded call runs to its end here: a failed write raises on every rank
            sparse_done(state.context.start(name, items))
            return _recorded_future(state, future, buffer.device)
        state.context.start(name, items, on_done=sparse_done)
        return future.then(_unwrap)

    error = _local_error(buffer)
    if error:
        state.context.start(f"bucket{index}", [("reject", f"bucket{index}", buffer.numel(), 1,
                                                error)], on_done=lambda h: _fail_from(h, fail))
        return future.then(_unwrap)
    with torch.no_grad():
        work = _summed(buffer, state.values, state.scheme_id)
        items, copy_back = _bucket_items(state, bucket, work, fuse=not recording)
        n_sync = len(items)
        layout = None
        step = _next_call(state, index)
        if state.record and step < state.record_steps:
            parts = [(item[1], item[3], item[4],
                      *_nonzero_rows(_torch(item[2], work.dtype).view(item[3], item[4])))
                     for item in items]
            extra, layout = _record_items(state, step, parts)
        # DDP's reducer multiplies each rank's gradient by 1/world before
        # Gloo sums it; so does the hook (the recorded rows above are the
        # unscaled gradients: _nonzero_rows copies).
        scale = 1.0 / world
        work.mul_(scale)
        if copy_back is not None:  # the vectors item is a copy of the 0-/1-D parameters
            _torch(items[-1][2], work.dtype).mul_(scale)
        if layout:
            items = items + extra
    decide = index not in state.bucket_modes

    def dense_done(handle):
        try:
            results = handle.wait()
            if layout:
                _keep_recorded(state, layout, results)  # sparse outputs only: the recorded items
            with torch.no_grad():
                if copy_back is not None:
                    copy_back()
                if decide:
                    threshold = state.dense_threshold
                    dense = (threshold is not None
                             and _dense_fraction(work, items[:n_sync]) >= threshold)
                    state.bucket_modes[index] = "pg" if dense else "zen"
                if work is not buffer:
                    buffer.copy_(work)
            done(buffer)
        except Exception as e:  # noqa: BLE001 (handed to DDP)
            fail(e)

    names = [item[1] for item in items[:n_sync]]
    state._bucket_paths[index] = ("zen", params, names)
    state._seen_items.update(names)
    if layout:  # a recorded call runs to its end here: a failed write raises on every rank
        dense_done(state.context.start(f"bucket{index}", items))
        return _recorded_future(state, future, buffer.device)
    state.context.start(f"bucket{index}", items, on_done=dense_done)
    return future.then(_unwrap)


def _pg_allreduce(state, buffer, world, event):
    """A dense bucket on the process group's own allreduce. float32 wire:
    multiplied by 1/world first, exactly as DDP's reducer does without a
    hook, so the result is bit-for-bit plain DDP's. bf16/fp16 wire: cast,
    divided, summed and cast back, as torch's bf16_compress_hook does."""
    group = state.process_group
    wire = _PG_DTYPES.get(state.values)
    if wire is None:
        buffer.mul_(1.0 / world)
        sent = buffer
    else:
        sent = buffer.to(wire).div_(world)
    fut = dist.all_reduce(sent, group=group, async_op=True).get_future()
    if sent is buffer and event is None:
        return fut.then(_first_value)  # the steady state: nothing else to do

    def finish(f):
        if sent is not buffer:
            buffer.copy_(f.value()[0])
        if event is not None:
            event["end"] = time.perf_counter()
        return buffer

    return fut.then(finish)


def _recorded_future(state, future, device):
    """The future of a recorded call, after every rank agreed on the write."""
    try:
        _agree_recorded(state, device)
    except Exception as e:  # noqa: BLE001 (handed to DDP)
        failed = torch.futures.Future()
        failed.set_exception(e)
        return failed.then(_unwrap)
    return future.then(_unwrap)


def _first_value(future):
    """The tensor of an allreduce's future (its value is a list of one)."""
    return future.value()[0]


def _unwrap(future):
    """The hook's result, or its error raised here. A future completed with
    set_exception alone holds the exception as a Python object, which DDP's
    C++ reducer then fails to cast to a tensor ("Unable to cast ... to
    Tensor", the zen class name lost); raised inside a then-callback it
    becomes the chained future's error, which DDP re-raises as a
    RuntimeError whose message holds "<zen class name>: <message>"."""
    return future.wait()


def _next_call(state, index):
    """The number of earlier calls of bucket `index` (its step)."""
    n = state._calls.get(index, 0)
    state._calls[index] = n + 1
    return n


def _fail_from(handle, fail):
    try:
        handle.wait()
    except Exception as e:  # noqa: BLE001
        fail(e)


# ---- transport 'process_group': the group's own collectives ----------------
#
# The same entry points on zen.process_group.ProcessGroupEngine (ZEN with
# torch tensor ops and the group's all_to_all_single / all_gather): CPU
# tensors on Gloo, CUDA tensors on NCCL. Values stay on their device and in
# their dtype (float64 summed in float64; bfloat16/float16 summed in float32,
# sent at their own width). The engine's only host reads are its two count
# records per call, so a call runs to its end inside the hook (ordered on the
# current stream after the gradient's producer) and the hook returns a
# completed future; nothing synchronizes the device.

_PG_DTYPES_OK = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def _pg_error(tensor):
    """Why transport 'process_group' cannot synchronize this tensor, or None."""
    if tensor.dtype not in _PG_DTYPES_OK:
        return (f"tensor has dtype {tensor.dtype}; zen synchronizes float32, float64, bfloat16 "
                "and float16")
    return None


def _linear_ids(indices, shape, sparse_dim):
    """Row-major linear ids of a COO tensor's indices over its sparse dims."""
    if sparse_dim == 1:
        return indices[0]
    if sparse_dim == 0:
        return torch.zeros(indices.shape[1], dtype=torch.int64, device=indices.device)
    strides = torch.tensor([math.prod(shape[k + 1:sparse_dim]) for k in range(sparse_dim)],
                           dtype=torch.int64, device=indices.device)
    return (indices * strides.unsqueeze(1)).sum(0)


def _coo_from(ids, values, shape, sparse_dim):
    """The coalesced COO tensor of `shape` holding sorted unique linear ids
    (a COO tensor of 0 sparse dimensions: one row, the whole tensor)."""
    values = values.reshape((ids.numel(),) + tuple(shape[sparse_dim:]))
    if sparse_dim == 1:
        indices = ids.unsqueeze(0)
    elif sparse_dim == 0:
        indices = torch.zeros((0, ids.numel()), dtype=torch.int64, device=ids.device)
    else:
        parts, rest = [], ids
        for k in reversed(range(sparse_dim)):
            parts.append(rest % shape[k])
            rest = torch.div(rest, shape[k], rounding_mode="floor")
        indices = torch.stack(parts[::-1])
    return torch.sparse_coo_tensor(indices, values, shape, **_UNCHECKED)._coalesced_(True)


def _pg_sparse(state, tensor, name, divisor=None, sum_order="rank"):
    """The coalesced global sum of a COO tensor through the engine. With a
    divisor, each rank's values are divided first and their repeats
    coalesced by torch, as DDP's reducer does before Gloo's sparse
    allreduce. A bad tensor on any rank raises on every rank."""
    shape = tuple(tensor.shape)
    sparse_dim = tensor.sparse_dim()
    rows = math.prod(shape[:sparse_dim])
    width = math.prod(shape[sparse_dim:])
    error = _pg_error(tensor) or _index_error(tensor)
    indices = tensor._indices()
    values = tensor._values().detach()
    if not error and divisor is not None:
        indices, values = _ddp_divided(indices, values, divisor, shape)
    ids = _linear_ids(indices, shape, sparse_dim)
    values = values.reshape(ids.numel(), width)
    out_ids, out_values = state.engine.allreduce_sparse(
        name, rows, ids, values, sum_order=sum_order, wire_dtype=_PG_DTYPES.get(state.values),
        error=error)
    return _coo_from(out_ids, out_values, shape, sparse_dim)


def _pg_allreduce_(state, tensor, average, name):
    """allreduce_ on transport 'process_group'."""
    world = state.world_size
    wire = _PG_DTYPES.get(state.values)
    with torch.no_grad():
        if tensor.layout == torch.sparse_coo:
            if tensor.numel() == 0:
                state.engine.allreduce_rows_(f"{name}[empty {tuple(tensor.shape)}]",
                                             torch.zeros(1, 1, device=tensor.device))
                return tensor
            result = _pg_sparse(state, tensor, name)
            if average:
                result = result / world
            tensor.copy_(result)
            return tensor
        error = (f"tensor layout {tensor.layout} is not supported (strided or sparse_coo)"
                 if tensor.layout != torch.strided else _pg_error(tensor))
        if tensor.numel() == 0 or error:
            placeholder = torch.zeros(1, 1, device=tensor.device)
            state.engine.allreduce_rows_(f"{name}[empty {tuple(tensor.shape)}]" if not error
                                         else name, placeholder, error=error)
            return tensor
        rows, width = _matrix_shape(tuple(tensor.shape))
        work = tensor if tensor.is_contiguous() else tensor.contiguous()
        state.engine.allreduce_rows_(name, work.view(rows, width), wire_dtype=wire)
        if average:
            work.div_(world)
        if work is not tensor:
            tensor.copy_(work)
    return tensor


def _pg_ring(state, buffer):
    """Whether a dense bucket on the engine is summed in Gloo's ring order
    (bit for bit plain DDP on >= 3 ranks): float32 or float64 sent at full
    width. (bfloat16/float16 are summed in float32 here, Gloo sums them in
    their own width: no order makes those equal.)"""
    return (state.ddp_order and state.values == "fp32" and state.world_size >= 3
            and buffer.dtype in (torch.float32, torch.float64))


def _sparse_bucket_name(state, params, index):
    """The name a sparse DDP bucket is synchronized and recorded under: its
    parameter's name when it holds one parameter (as a sparse embedding's
    bucket does), else bucket<index>. Both transports' hooks use it."""
    name = f"bucket{index}"
    if len(params) == 1:
        name = state.param_name(params[0], name)
    return name


def _pg_hook(state, bucket, buffer, index, params, world, event):
    """comm_hook on transport 'process_group'. Returns the hook's future."""
    future = torch.futures.Future()
    wire = _PG_DTYPES.get(state.values)
    try:
        with torch.no_grad():
            if buffer.layout == torch.sparse_coo:
                if event is not None:
                    event["path"] = "sparse"
                name = _sparse_bucket_name(state, params, index)
                state._bucket_paths[index] = ("sparse", params, [name])
                state._seen_items.add(name)
                step = _next_call(state, index)
                result = _pg_sparse(state, buffer, name, divisor=world)
                if state.record and step < state.record_steps:
                    local = buffer.coalesce()
                    sparse_dim = buffer.sparse_dim()
                    rows = math.prod(buffer.shape[:sparse_dim])
                    width = math.prod(buffer.shape[sparse_dim:])
                    ids = _linear_ids(local._indices(), tuple(buffer.shape), sparse_dim)
                    _pg_record(state, step, [(name, rows, width, ids, local._values())])
                    _agree_recorded(state, buffer.device)
                future.set_result(result)
            else:
                recording = state.record and state._calls.get(index, 0) < state.record_steps
                step = _next_call(state, index)
                matrices, small = _bucket_layout(state, bucket, fuse=not recording)
                flat = buffer.view(-1)
                if recording:
                    _pg_record(state, step, [
                        (name, rows, width, *_nonzero_rows(flat[o:o + rows * width]
                                                           .view(rows, width)))
                        for o, name, rows, width in matrices])
                    _agree_recorded(state, buffer.device)
                buffer.mul_(1.0 / world)  # as DDP's reducer, in the bucket's dtype
                ring = _pg_ring(state, buffer)
                size = buffer.element_size()

                def order(pieces):
                    return (_ring_sum_order(pieces, flat.numel(), world, size) if ring
                            else "rank")

                names = []
                total = nonzero = 0
                decide = index not in state.bucket_modes
                for o, name, rows, width in matrices:
                    view = flat[o:o + rows * width].view(rows, width)
                    state.engine.allreduce_rows_(name, view, sum_order=order([(o, rows * width)]),
                                                 wire_dtype=wire)
                    names.append(name)
                    if decide:
                        total += rows * width
                        nonzero += int((view != 0).any(dim=1).sum()) * width
                if small:
                    name = f"bucket{index}.vectors"
                    vectors = torch.cat([flat[o:o + n] for o, n in small])
                    state.engine.allreduce_rows_(name, vectors.view(-1, 1), sum_order=order(small),
                                                 wire_dtype=wire)
                    at = 0
                    for o, n in small:
                        flat[o:o + n].copy_(vectors[at:at + n])
                        at += n
                    names.append(name)
                    if decide:
                        total += vectors.numel()
                        nonzero += int((vectors != 0).sum())
                if decide:
                    threshold = state.dense_threshold
                    dense = threshold is not None and total and nonzero / total >= threshold
                    state.bucket_modes[index] = "pg" if dense else "zen"
                state._bucket_paths[index] = ("zen", params, names)
                state._seen_items.update(names)
                future.set_result(buffer)
    except Exception as e:  # noqa: BLE001 (handed to DDP)
        future.set_exception(e)
    if event is not None:
        event["end"] = time.perf_counter()
    return future.then(_unwrap)


def _pg_record(state, step, parts):
    """Recording on transport 'process_group': every rank's rows of each part
    gathered to every rank through the engine (rank r's rows at r x rows of a
    [world x rows] tensor, so the sum is the concatenation), kept and written
    as on transport 'zen' (a host copy: recording is a diagnostic)."""
    world, rank = state.world_size, state.rank
    layout, results = [], []
    for name, rows, width, ids, values in parts:
        trace_name = _trace_name(step, name)
        out_ids, out_values = state.engine.allreduce_sparse(
            "record." + trace_name, world * rows, ids + rank * rows,
            values.reshape(-1, width).to(torch.float32))
        layout.append((trace_name, rows, width))
        results.append((out_ids.cpu().numpy(), out_values.cpu().numpy()))
    _keep_recorded(state, layout, results)


def register(ddp, **state_options):
    """Registers comm_hook on a DistributedDataParallel model; returns its ZenState.

    state_options go to ZenState (scheme=..., hostname=..., timeout=...);
    process_group defaults to the DDP model's and module to ddp.module.
    """
    state_options.setdefault("process_group", getattr(ddp, "process_group", None))
    state_options.setdefault("module", ddp.module)
    if state_options["process_group"] is dist.GroupMember.WORLD:
        state_options["process_group"] = None
    state = ZenState(**state_options)
    ddp.register_comm_hook(state, comm_hook)
    return state


def _timedelta_seconds(value):
    return value.total_seconds() if isinstance(value, datetime.timedelta) else float(value)

