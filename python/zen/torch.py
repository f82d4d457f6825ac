"""zen for PyTorch: a drop-in DDP comm hook and an allreduce for your own loop.

DDP (dense and sparse gradients, one call)::

    import torch.distributed as dist, zen.torch
    dist.init_process_group("gloo")                      # env:// from torchrun
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    ddp.register_comm_hook(zen.torch.ZenState(module=model), zen.torch.comm_hook)
    # or, the same: zen.torch.register(ddp)

The hook receives every DDP bucket. A dense bucket is synchronized one
parameter view at a time ([rows x width] for a >= 2-D parameter, so zero rows
of an embedding gradient are not sent; all 0-/1-D parameters of the bucket
together as one [n x 1] element buffer, so zero elements are not sent), the
sum is written back into the bucket and divided by the world size, as DDP
does. A sparse COO bucket (``nn.Embedding(sparse=True)``) is synchronized by
zen instead of Gloo's allgather and comes back coalesced and averaged.

Your own loop::

    zen.torch.allreduce_(dense)           # in place, sum over ranks
    sparse = zen.torch.allreduce_(sparse) # sparse COO: set in place to the coalesced sum, returned

Rendezvous goes through the job's torch.distributed store (no extra port).
The first use of a ZenState connects it; every rank must create and first use
its ZenStates in the same order (as with any collective). The GIL is released
while data moves. Only CPU float32 tensors are synchronized.

Errors: ValueError for bad input, zen.MismatchError when ranks disagree (e.g.
shapes; raised on every rank, nothing hangs), zen.TransportError for network
failures or timeouts. Inside DDP's backward, torch re-raises a hook's error as
a RuntimeError whose message starts with the zen class name.
"""

import datetime
import itertools
import math
import os

import torch
import torch.distributed as dist
from torch.distributed.constants import default_pg_timeout

import zen

__all__ = ["ZenState", "allreduce_", "comm_hook", "register"]

# Environment overrides (documented in docs/sections/pytorch.md).
_ENV_SCHEME = "ZEN_SCHEME"
_ENV_HOSTNAME = "ZEN_HOSTNAME"
_ENV_TIMEOUT = "ZEN_TIMEOUT"

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
    """What zen keeps for one process group: its communicator and schemes.

    Args:
        process_group: the group to synchronize over (default: the world).
        scheme: scheme id (``zen.schemes()``); default $ZEN_SCHEME, else
            ``zen.default_scheme()`` ('auto' when the cost-model selector is
            built in, else 'zen', else 'agsparse').
        module: the model, only to name parameters in error messages.
        hostname: address to bind; default $ZEN_HOSTNAME, else 127.0.0.1 on
            a single-host job (a multi-host job must say).
        timeout: seconds (or a timedelta) for the rendezvous and every
            transfer; default
            $ZEN_TIMEOUT, else torch's default process-group timeout.
        comm: an already connected zen.Communicator (then process_group,
            hostname and timeout are not used).
        threads, seed: passed to the schemes (SchemeOptions).
    """

    def __init__(self, process_group=None, *, scheme=None, module=None, hostname=None,
                 timeout=None, comm=None, threads=0, seed=None):
        self.process_group = process_group
        self.scheme_id = scheme or os.environ.get(_ENV_SCHEME) or zen.default_scheme()
        known = [s for s, _ in zen.schemes()]
        if self.scheme_id not in known:
            raise ValueError(f"zen: unknown scheme '{self.scheme_id}' (known: {', '.join(known)})")
        self._hostname = hostname
        self._timeout = timeout
        self._comm = comm
        self._threads = threads
        self._seed = seed
        self._schemes = {}
        self._names = {}
        if module is not None:
            self._names = {id(p): n for n, p in module.named_parameters()}

    @property
    def comm(self):
        """The zen.Communicator, connected through the torch store on first use."""
        if self._comm is None:
            self._comm = self._connect()
        return self._comm

    @property
    def world_size(self):
        return self.comm.size

    def scheme(self, scheme_id=None):
        """The zen.Scheme for scheme_id (default: this state's), created once."""
        scheme_id = scheme_id or self.scheme_id
        if scheme_id not in self._schemes:
            self._schemes[scheme_id] = zen.create_scheme(scheme_id, seed=self._seed,
                                                         threads=self._threads)
        return self._schemes[scheme_id]

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


def _matrix_shape(shape):
    """[rows, width] of a tensor synchronized row-wise: rows = first dim."""
    if len(shape) >= 2:
        return shape[0], math.prod(shape[1:])
    return math.prod(shape), 1


def _local_error(tensor):
    """Why zen cannot synchronize this tensor, or None."""
    if tensor.device.type != "cpu":
        return f"tensor is on {tensor.device}; zen synchronizes CPU tensors only"
    if tensor.dtype != torch.float32:
        return f"tensor has dtype {tensor.dtype}; zen synchronizes float32 only"
    return None


def _sync_dense_(state, tensor, rows, width, name, scheme_id=None):
    """Sums a [rows x width]-viewable dense tensor over the ranks, in place."""
    scheme = state.scheme(scheme_id)
    error = _local_error(tensor)
    if error:
        scheme.reject(state.comm, rows, width, name, error)
    work = tensor if tensor.is_contiguous() else tensor.contiguous()
    with torch.no_grad():
        scheme.sync_dense(state.comm, work.detach().view(-1).numpy(), rows, width, name)
        if work is not tensor:
            tensor.copy_(work)
    return tensor


def _sync_sparse(state, tensor, name, scheme_id=None):
    """The coalesced global sum of a sparse COO tensor (a new tensor)."""
    scheme = state.scheme(scheme_id)
    sparse_dim = tensor.sparse_dim()
    shape = tuple(tensor.shape)
    rows = math.prod(shape[:sparse_dim])
    width = math.prod(shape[sparse_dim:])
    error = _local_error(tensor)
    if error:
        scheme.reject(state.comm, rows, width, name, error)
    indices = tensor._indices()
    values = tensor._values().detach().reshape(indices.shape[1], width).contiguous()
    if sparse_dim == 1:
        ids = indices[0]
    else:  # row-major linear index over the sparse dimensions
        strides = torch.tensor([math.prod(shape[k + 1:sparse_dim]) for k in range(sparse_dim)],
                               dtype=torch.int64)
        ids = (indices * strides.unsqueeze(1)).sum(0)
    out_ids, out_values = scheme.sync(state.comm, rows, width, ids.contiguous().numpy(),
                                      values.numpy(), name)
    out_ids = torch.from_numpy(out_ids)
    out_values = torch.from_numpy(out_values).view((out_ids.numel(),) + shape[sparse_dim:])
    if sparse_dim == 1:
        out_indices = out_ids.unsqueeze(0)
    else:
        parts, rest = [], out_ids
        for k in reversed(range(sparse_dim)):
            parts.append(rest % shape[k])
            rest = torch.div(rest, shape[k], rounding_mode="floor")
        out_indices = torch.stack(parts[::-1])
    result = torch.sparse_coo_tensor(out_indices, out_values, shape, **_UNCHECKED)
    return result._coalesced_(True)


def allreduce_(tensor, *, average=False, state=None, scheme=None, name=None):
    """Sums `tensor` over all ranks of the state's process group with zen.

    Dense: in place (a >= 2-D tensor is synchronized row-wise over its first
    dimension, so zero rows are not sent; a 0-/1-D one element-wise); returns
    tensor. Sparse COO: the coalesced sum replaces the tensor's contents in
    place (indices sorted, each row once: the union of all ranks' rows) and is
    returned. average=True divides by the world size. Every rank must make the
    same calls with the same shapes; otherwise zen.MismatchError is raised on
    every rank. CPU float32 only (ValueError, on every rank, otherwise).
    """
    state = _state(state)
    name = name or "allreduce_"
    if tensor.layout == torch.sparse_coo:
        result = _sync_sparse(state, tensor, name, scheme)
        if average:
            result = result / state.world_size
        with torch.no_grad():
            tensor.copy_(result)
        return tensor
    if tensor.layout != torch.strided:
        raise ValueError(f"zen: tensor layout {tensor.layout} is not supported (strided or "
                         "sparse_coo)")
    rows, width = _matrix_shape(tuple(tensor.shape))
    _sync_dense_(state, tensor, rows, width, name, scheme)
    if average:
        with torch.no_grad():
            tensor.div_(state.world_size)
    return tensor


def _views(bucket):
    """(gradient view, parameter) pairs of a dense bucket, viewing its buffer."""
    buffer = bucket.buffer()
    grads, params = bucket.gradients(), bucket.parameters()
    start = buffer.data_ptr()
    end = start + buffer.numel() * buffer.element_size()
    if all(start <= g.data_ptr() < end or g.numel() == 0 for g in grads):
        return list(zip(grads, params))
    # Not views (should not happen in torch 1.13): slice the flat buffer in
    # parameter order, which is how DDP lays a bucket out.
    offsets = itertools.accumulate([0] + [g.numel() for g in grads])
    return [(buffer[o:o + g.numel()].view(g.shape), p) for o, g, p in zip(offsets, grads, params)]


def _sync_bucket_(state, bucket):
    """Sums a dense bucket in place: see the module docstring for the layout."""
    index = bucket.index()
    small = []
    for j, (grad, param) in enumerate(_views(bucket)):
        if grad.numel() == 0:
            continue
        if grad.dim() >= 2:
            rows, width = _matrix_shape(tuple(grad.shape))
            _sync_dense_(state, grad, rows, width, state.param_name(param, f"bucket{index}.{j}"))
        else:
            small.append(grad)
    if small:
        flat = torch.cat([g.reshape(-1) for g in small])
        _sync_dense_(state, flat, flat.numel(), 1, f"bucket{index}.vectors")
        offset = 0
        for g in small:
            g.view(-1).copy_(flat[offset:offset + g.numel()])
            offset += g.numel()


def comm_hook(state, bucket):
    """DDP communication hook: ``ddp.register_comm_hook(state, zen.torch.comm_hook)``.

    state: a ZenState, or None for one per default process group. Dense
    buckets are summed in place (zero rows and elements are not sent) and
    divided by the world size; a sparse COO bucket is replaced by the
    coalesced average. Returns a completed torch.futures.Future.
    """
    state = _state(state)
    buffer = bucket.buffer()
    with torch.no_grad():
        if buffer.layout == torch.sparse_coo:
            name = f"bucket{bucket.index()}"
            params = bucket.parameters()
            if len(params) == 1:
                name = state.param_name(params[0], name)
            result = _sync_sparse(state, buffer, name)
            result = result / state.world_size
        else:
            _sync_bucket_(state, bucket)
            buffer.div_(state.world_size)
            result = buffer
    future = torch.futures.Future()
    future.set_result(result)
    return future


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
