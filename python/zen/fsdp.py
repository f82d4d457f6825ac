"""A sparse reduce-scatter for FSDP2 (``fully_shard``).

FSDP2 reduce-scatters every gradient: the flat input of a call holds, for
each rank r, the padded chunk r of every parameter's gradient, and rank r
receives the sum over ranks of chunk r. An embedding's gradient is mostly
zero (only the rows a batch touched), yet FSDP sends it dense.
:class:`SparseReduceScatter` sends each owner only the non-zero part of its
chunk::

    from torch.distributed.fsdp import fully_shard
    from zen.fsdp import SparseReduceScatter        # also zen.torch.SparseReduceScatter

    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)
    comm = SparseReduceScatter()
    for module in model.modules():
        if hasattr(module, "set_custom_reduce_scatter"):   # every FSDPModule
            module.set_custom_reduce_scatter(comm)

Two transports carry the exchanges; everything else (counts, plan,
encodings, sum) is this module's, the same for both:

- ``"process_group"`` (the default): the collectives of the group FSDP
  passes (Gloo on CPU, NCCL on CUDA); torch alone.
- ``"zen"``: zen's C++ communicator, through a ``zen.torch.ZenState``'s
  ``zen.Context`` (``SparseReduceScatter(zen_state=ZenState())``: a Gloo
  group's ZenState picks "zen"; or ``transport="zen"``, which makes one per
  group). CPU tensors only. The counts table and the payload move as byte
  exchanges on the context's progress thread
  (``zen.Context.gather_records`` / ``exchange_bytes``,
  zen/engine/exchange_job.h), reading and writing the torch buffers in
  place (numpy views, no copy), in order with the context's other calls
  (e.g. DDP buckets on the same state). The fallback stays Gloo's
  ``dist.reduce_scatter_tensor`` (what FSDP itself calls, bit for bit).
  Results are bit for bit transport "process_group"'s: only the bytes'
  path differs.

One call:

1. Every rank counts, per destination d, the non-zero slots of chunk d (a
   mask and a sum). A slot is an 8-byte word (2 fp32, 4 bf16 or 1 fp64
   value) when the chunks are whole words, else one element: one int64
   compare per word is the cheapest non-zero test. A rank whose sends
   cannot pay flags itself dense and stops there; otherwise one
   ``torch.nonzero`` of the mask gives the offsets, and per destination the
   maximal runs of consecutive non-zero slots are counted (FSDP flattens
   rows, so an embedding's touched rows are runs of ``width`` elements).
   One all-gather (``all_gather_into_tensor``, or zen's gather_records)
   shares these counts and a metadata word (sizes, dtype, op, max_fraction,
   slot, the dense flag, the rank in FSDP's group) with every rank.
2. From the agreed table every rank picks the same encoding for every
   (source, destination) pair, by the bytes: COO (int32, or int64 when a
   chunk has 2**31 elements or more, offsets + values), a bitmap + values,
   runs (start, length pairs + values), or the dense chunk. When the
   exchange would move more than ``max_fraction`` of a dense reduce-scatter's
   bytes on some rank, the whole call falls back to the group's own
   ``dist.reduce_scatter_tensor``.
3. One all-to-all of bytes with split sizes (``dist.all_to_all_single``,
   or zen's exchange_bytes) moves the payload.
   The owner sums the contributions into ``output_tensor`` in ascending rank
   order (its own chunk taken in place), then applies the op.

Ops: ``SUM``, ``AVG`` (sum, then divided by the world size, as Gloo does)
and ``PREMUL_SUM(f)`` (each value multiplied by f before the sum, as NCCL
does; FSDP uses it for ``set_reduce_scatter_divide_factor``; Gloo has no
PREMUL_SUM, so on Gloo the fallback multiplies a copy and sums). Any other
op, a non-floating dtype or a group of one rank goes to the fallback.

Exactness against ``dist.reduce_scatter_tensor``: on 2 ranks the result is
bit for bit the same (a + b is commutative). On 3 or more ranks the sparse
sum is in ascending rank order while Gloo's order depends on the owner and
the size (measured: a ring order on 3 ranks, neither ring nor ascending on
4 ranks for larger inputs), so it agrees within float rounding (a few ulps
of the sum). Zeros are exact in both: x + 0 == x. One exception: an element
that is -0.0 on every rank comes out +0.0.

Values never leave the device; counts are the only values copied to the
host (this rank's per chunk, the table, and on CUDA ``torch.nonzero``'s
size: host synchronizations, all on counts). ``async_op=True`` returns a
Work whose ``wait()`` waits for the exchange and performs the sum (FSDP
itself calls synchronously); on transport "zen" the exchange runs on the
context's progress thread meanwhile, no thread per call. Each call's
bytes are counted: ``last_bytes_sent``/``last_bytes_received`` (payload and
counts exchange of this rank; for a fallback the dense reduce-scatter's
(world - 1) * chunk bytes, what a ring or direct reduce-scatter sends at the
least), ``bytes_sent``/``bytes_received`` over all calls, ``calls``,
``sparse_calls``, ``fallback_calls``, ``last_formats`` (pairs per encoding),
``last_slot`` (elements per slot).

Errors: when ranks disagree on the input's size, the output's size or the
dtype or op, or a rank's output is not 1/world of its input, every rank
raises :class:`MismatchError` naming the rank, the tensor and the value;
so it does when zen's communicator ranks the group otherwise than FSDP's
group (a ZenState of another group). Nothing waits longer than the process
group's timeout, or on transport "zen" the ZenState's, after which a peer
that never came is a ``zen.TransportError`` (bad input never is). A CUDA
tensor on transport "zen" is a ValueError before anything is sent. The
ranks must use the same transport. Transport "process_group" needs torch
alone (not zen's C++ extension).
"""

import struct

import torch
import torch.distributed as dist

try:  # the base class FSDP expects; older torch has no custom reduce-scatter at all
    from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter as _ReduceScatterBase
except ImportError:  # pragma: no cover
    _ReduceScatterBase = object

__all__ = ["MismatchError", "SparseReduceScatter"]


# Ranks that disagree on a reduce-scatter's sizes, dtype or op: zen's one
# MismatchError (zen/__init__.py defines it also where the C++ extension is
# absent), raised on every rank.
from zen import MismatchError  # noqa: E402


# The metadata word's layout, then two counts (non-zeros, runs) per destination.
_MAGIC = 0x7A656E46  # "zenF": a table written by this module
_META = ("magic", "input numel", "output numel", "dtype", "op", "op factor", "max fraction", "slot", "dense",
         "group rank")
_N_META = len(_META)

# Encodings of one (source, destination) pair, in the order ties are broken.
EMPTY, RUNS, COO, BITMAP, DENSE = "empty", "runs", "coo", "bitmap", "dense"

_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
_TRANSPORTS = ("zen", "process_group")
_NAME = "zen.fsdp.reduce_scatter"  # the calls' name on zen's communicator (in its errors)
_SUM = dist.ReduceOp.SUM
_AVG = dist.ReduceOp.AVG
_PREMUL = dist.ReduceOp.PREMUL_SUM


def _align8(n):
    return (n + 7) & ~7


def _op_kind_and_factor(op):
    """(RedOpType, factor or None) of a ReduceOp or RedOpType."""
    kind = getattr(op, "op", op)
    factor = None
    if kind == _PREMUL:
        factor = getattr(op, "factor", None)
        if isinstance(factor, torch.Tensor):
            factor = float(factor.item())  # a scalar given as a tensor: one host read
    return kind, factor


def _float_bits(x):
    return struct.unpack("<q", struct.pack("<d", x))[0]


def _bits_float(n):
    return struct.unpack("<d", struct.pack("<q", n))[0]


def _op_code(kind):
    return int(kind.value) if hasattr(kind, "value") else int(kind)


class _SparseWork:
    """What ``async_op=True`` returns: ``wait()`` waits for the exchange (a
    process group's Work, or a zen.ExchangeHandle of zen's progress thread,
    bounded by its communicator's timeout), then runs ``finish`` (the sum
    into the output) once."""

    def __init__(self, work, finish):
        self._work, self._finish, self._done = work, finish, False

    def wait(self, timeout=None):
        if not self._done:
            if self._work is not None:
                if timeout is None or not isinstance(self._work, dist.Work):
                    self._work.wait()
                else:
                    self._work.wait(timeout)
            self._finish()
            self._done = True
        return True

    def is_completed(self):
        return self._done


class SparseReduceScatter(_ReduceScatterBase):
    """A ``ReduceScatter`` for ``FSDPModule.set_custom_reduce_scatter`` that
    sends only the non-zero part of each owner's chunk (module docstring).

    Args:
        max_fraction: the sparse exchange is used when, on every rank, the
            bytes it sends and receives are at most this fraction of a dense
            reduce-scatter's, (world - 1) * chunk bytes; otherwise the call
            falls back to ``dist.reduce_scatter_tensor``. 0 always falls
            back; a value above 1 never does.
        formats: the encodings a pair may use, a subset of
            ("runs", "coo", "bitmap", "dense"); "dense" must be among them.
        zen_state: a ``zen.torch.ZenState`` whose transport decides how the
            counts and the payload move (as for DDP's hook and TopKState):
            "zen", its zen communicator through its Context's progress
            thread (CPU tensors); "process_group", the group's collectives.
            Its group must be the one FSDP passes (checked on every call).
        transport: without a zen_state: "zen" makes one
            ``ZenState(process_group=group, transport="zen")`` per group FSDP
            passes, on first use; "process_group" or None (the default) use
            the group's collectives and need no zen extension. With a
            zen_state it may only repeat the state's transport.
    """

    def __init__(self, *, max_fraction=0.5, formats=(RUNS, COO, BITMAP, DENSE), zen_state=None,
                 transport=None):
        if transport not in _TRANSPORTS + (None,):
            raise ValueError(f"SparseReduceScatter: transport must be one of "
                             f"{', '.join(repr(t) for t in _TRANSPORTS)} or None, got {transport!r}")
        if zen_state is not None:
            from zen._ddp import ZenState  # the C++ extension's side: only when asked for
            if not isinstance(zen_state, ZenState):
                raise TypeError(f"SparseReduceScatter: zen_state must be a zen.torch.ZenState, "
                                f"got {type(zen_state).__name__}")
            if transport is not None and transport != zen_state.transport:
                raise ValueError(f"SparseReduceScatter: transport={transport!r} but the zen_state's "
                                 f"transport is {zen_state.transport!r} (give one of them)")
        self._zen_state = zen_state
        self._transport = transport
        self._zen_states = {}  # group -> the ZenState transport="zen" made for it
        if not (isinstance(max_fraction, (int, float)) and max_fraction >= 0):
            raise ValueError(f"SparseReduceScatter: max_fraction must be a number >= 0, got {max_fraction!r}")
        formats = tuple(formats)
        unknown = [f for f in formats if f not in (RUNS, COO, BITMAP, DENSE)]
        if unknown or DENSE not in formats:
            raise ValueError(f"SparseReduceScatter: formats must be a subset of "
                             f"('runs', 'coo', 'bitmap', 'dense') containing 'dense', got {formats!r}")
        self.max_fraction = float(max_fraction)
        self.formats = formats
        self.calls = self.sparse_calls = self.fallback_calls = 0
        self.bytes_sent = self.bytes_received = 0
        self.last_bytes_sent = self.last_bytes_received = 0
        self.last_sparse = False
        self.last_formats = {}
        self.last_slot = 1

    @property
    def transport(self):
        """"zen" or "process_group": the zen_state's, else the one given
        (None: "process_group")."""
        if self._zen_state is not None:
            return self._zen_state.transport
        return self._transport or "process_group"

    def _context(self, group, world, rank, tensor):
        """The zen.Context of transport "zen" for `group` (None on transport
        "process_group"). Raises ValueError, before any exchange, where zen's
        communicator cannot carry the call (every rank of a group is alike)."""
        if self.transport != "zen":
            return None
        if tensor.device.type != "cpu":
            raise ValueError(f"zen.fsdp.SparseReduceScatter (rank {rank}): input_tensor is on "
                             f"{tensor.device}; transport 'zen' reduce-scatters CPU tensors "
                             "(transport='process_group' runs on the group's device)")
        state = self._zen_state
        if state is None:
            state = self._zen_states.get(group)
            if state is None:
                from zen._ddp import ZenState
                state = self._zen_states[group] = ZenState(group, transport="zen")
        if state.world_size != world:
            raise ValueError(f"zen.fsdp.SparseReduceScatter (rank {rank}): the zen_state's group has "
                             f"{state.world_size} ranks, the reduce-scatter's group {world}: pass a "
                             "ZenState of the group FSDP reduce-scatters over")
        return state.context

    # -- the Comm interface ---------------------------------------------------
    def allocate(self, size, *, dtype, device):
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(self, output_tensor, input_tensor, group=None, op=_SUM, async_op=False):
        group = group if group is not None else dist.group.WORLD
        world, rank = dist.get_world_size(group), dist.get_rank(group)
        ctx = self._context(group, world, rank, input_tensor) if world > 1 else None
        kind, factor = _op_kind_and_factor(op)
        flat_in = input_tensor.reshape(-1)
        n_in, n_out = flat_in.numel(), output_tensor.numel()
        chunk = n_in // world if world > 0 else 0
        shape_ok = n_out * world == n_in

        # Step 1: this rank's counts per destination chunk (zeros when its
        # sizes are wrong: every rank still takes part in the exchange, then raises).
        sparse_op = (kind in (_SUM, _AVG) or (kind == _PREMUL and isinstance(factor, float))) \
            and flat_in.dtype.is_floating_point and world > 1
        mine = torch.zeros(_N_META + 2 * world, dtype=torch.int64, device=flat_in.device)
        # The unit of sparsity, a slot: an 8-byte word (2 fp32, 4 bf16, 1
        # fp64 values) when the chunks are whole words, so that finding the
        # non-zeros is one int64 compare per word (a zero word is +0.0 values
        # only; -0.0 is sent, which adds exactly); else one element.
        vb = flat_in.element_size()
        words = chunk > 0 and 8 % vb == 0 and (chunk * vb) % 8 == 0 and flat_in.data_ptr() % 8 == 0
        slot = 8 // vb if words else 1
        nz = None
        dense_bytes = (world - 1) * chunk * vb
        surely_dense = 0
        if shape_ok and sparse_op and chunk > 0:
            # Non-zero slots per chunk (a mask and a sum: two cheap passes),
            # read on the host: when what this rank would send cannot be
            # below max_fraction of a dense reduce-scatter, it says so in the
            # table and skips the offsets (the call will fall back).
            slots = chunk // slot
            mask = (flat_in.view(torch.int64) if words else flat_in).view(world, slots) != 0
            nnz = mask.view(torch.uint8).sum(1, dtype=torch.int32 if slots < 2**31 else torch.int64).tolist()
            least = sum(min(_align8(n * slot * vb), _align8(chunk * vb)) for d, n in enumerate(nnz) if d != rank)
            surely_dense = int(least > self.max_fraction * dense_bytes)
        if not surely_dense and nz is None and shape_ok and sparse_op and chunk > 0:
            # The non-zero slots' offsets, ascending (on CUDA torch.nonzero
            # reads its count on the host: a sync on a count). Everything
            # after works on these nnz offsets only.
            nz = torch.nonzero(mask.view(-1)).squeeze(1)
            bounds = torch.arange(world + 1, device=nz.device, dtype=nz.dtype) * slots
            cuts = torch.searchsorted(nz, bounds)  # chunk d's offsets are nz[cuts[d]:cuts[d + 1]]
            mine[_N_META::2] = cuts[1:] - cuts[:-1]
            # A run starts at an offset that is not its predecessor's + 1, or
            # at a chunk's first slot; runs per chunk from a prefix sum.
            starts = torch.ones(nz.numel(), dtype=torch.int64, device=nz.device)
            if nz.numel() > 1:
                starts[1:] = ((nz[1:] != nz[:-1] + 1) | (nz[1:] % slots == 0)).to(torch.int64)
            prefix = torch.zeros(nz.numel() + 1, dtype=torch.int64, device=nz.device)
            torch.cumsum(starts, 0, out=prefix[1:])
            mine[_N_META + 1::2] = prefix[cuts[1:]] - prefix[cuts[:-1]]
        dtype_code = _DTYPES.index(flat_in.dtype) if flat_in.dtype in _DTYPES else 100 + len(str(flat_in.dtype))
        meta = [_MAGIC, n_in, n_out, dtype_code, _op_code(kind),
                _float_bits(factor) if factor is not None else 0, _float_bits(self.max_fraction),
                slot, surely_dense, rank]
        mine[:_N_META] = torch.tensor(meta, dtype=torch.int64)
        if ctx is not None:
            # zen's communicator, on the context's progress thread in order
            # with its other calls; a rank in another call raises there.
            table = torch.empty(world, mine.numel(), dtype=torch.int64)
            ctx.gather_records(_NAME, mine.numpy(), table.numpy()).wait()
            rows = table.tolist()
        elif world > 1:
            table = torch.empty(world * mine.numel(), dtype=torch.int64, device=flat_in.device)
            dist.all_gather_into_tensor(table, mine, group=group)
            rows = table.view(world, -1).tolist()  # a host synchronization, on the counts
        else:
            rows = [mine.tolist()]
        self._check(rows, rank, world, input_tensor, output_tensor)
        exchange_bytes = (world - 1) * mine.numel() * 8

        self.calls += 1
        self.last_slot = slot
        # Ranks whose inputs are aligned differently (slot), or a rank whose
        # chunks are surely too dense, send this call dense.
        agreed = all(row[7] == slot and row[8] == 0 for row in rows)
        plan = self._plan(rows, world, chunk, vb, slot) if (sparse_op and chunk > 0 and agreed) else None
        if plan is not None:
            sends = [sum(plan[s][d][1] for d in range(world) if d != s) for s in range(world)]
            recvs = [sum(plan[s][d][1] for s in range(world) if s != d) for d in range(world)]
            if max(max(sends), max(recvs)) > self.max_fraction * dense_bytes:
                plan = None
        if plan is None:
            self._count(False, exchange_bytes + dense_bytes, exchange_bytes + dense_bytes, {})
            return self._fallback(output_tensor, flat_in, group, op, kind, factor, async_op)
        formats = {}
        for s in range(world):
            for d in range(world):
                if s != d:
                    formats[plan[s][d][0]] = formats.get(plan[s][d][0], 0) + 1
        self._count(True, exchange_bytes + sends[rank], exchange_bytes + recvs[rank], formats)
        return self._sparse(output_tensor, flat_in, group, world, rank, chunk, slot, kind, factor,
                            nz, rows, plan, async_op, ctx)

    # -- agreement --------------------------------------------------------------
    @staticmethod
    def _check(rows, rank, world, input_tensor, output_tensor):
        """Raises MismatchError on every rank (all hold the same table) when
        the ranks disagree or a rank's sizes do not fit."""
        names = {1: "input_tensor numel", 2: "output_tensor numel", 3: "dtype", 4: "op", 5: "op factor",
                 6: "SparseReduceScatter max_fraction"}
        for r, row in enumerate(rows):
            if row[0] != _MAGIC:
                raise MismatchError(f"zen.fsdp.SparseReduceScatter (rank {rank}): rank {r} is not running "
                                    f"SparseReduceScatter for this reduce-scatter (its table word is {row[0]})")
        ref = rows[0]
        for r, row in enumerate(rows):
            for i, what in names.items():
                if row[i] != ref[i]:
                    def show(v, i=i):
                        if i == 3:
                            return str(_DTYPES[v]) if 0 <= v < len(_DTYPES) else f"dtype code {v}"
                        if i in (5, 6):
                            return repr(_bits_float(v))
                        return str(v)
                    raise MismatchError(
                        f"zen.fsdp.SparseReduceScatter (rank {rank}): ranks disagree on the {what}: "
                        f"rank {r} has {show(row[i])}, rank 0 has {show(ref[i])} "
                        f"(this rank: input {tuple(input_tensor.shape)} {input_tensor.dtype}, "
                        f"output {tuple(output_tensor.shape)})")
        for r, row in enumerate(rows):
            if row[9] != r:  # zen's communicator ranks the group otherwise: chunks would land wrong
                raise MismatchError(
                    f"zen.fsdp.SparseReduceScatter (rank {rank}): rank {r} of the zen communicator is "
                    f"rank {row[9]} of the reduce-scatter's group: the zen_state's group is not the one "
                    "FSDP passes")
        n_in, n_out = ref[1], ref[2]
        if n_out * world != n_in:
            raise MismatchError(
                f"zen.fsdp.SparseReduceScatter (rank {rank}): output_tensor has {n_out} elements on every "
                f"rank, input_tensor {n_in}: the input must hold world size ({world}) x output elements")

    def _plan(self, rows, world, chunk, vb, slot):
        """plan[s][d] = (encoding, bytes) of what rank s sends rank d, from the
        agreed table, so every rank computes the same plan. Offsets, runs and
        bits count slots of `slot` elements."""
        slots = chunk // slot
        ib = 4 if slots < 2**31 else 8
        bitmap = _align8((slots + 7) // 8)
        dense = _align8(chunk * vb)
        plan = []
        for s in range(world):
            row = rows[s]
            out = []
            for d in range(world):
                nnz, runs = row[_N_META + 2 * d], row[_N_META + 2 * d + 1]
                if nnz == 0:
                    out.append((EMPTY, 0))
                    continue
                vals = _align8(nnz * slot * vb)
                cands = {RUNS: _align8(2 * runs * ib) + vals, COO: _align8(nnz * ib) + vals,
                         BITMAP: bitmap + vals, DENSE: dense}
                best = min(self.formats, key=lambda f: cands[f])  # ties: first in self.formats
                out.append((best, cands[best]))
            plan.append(out)
        return plan

    def _count(self, sparse, sent, received, formats):
        self.last_sparse = sparse
        if sparse:
            self.sparse_calls += 1
        else:
            self.fallback_calls += 1
        self.last_bytes_sent, self.last_bytes_received = sent, received
        self.bytes_sent += sent
        self.bytes_received += received
        self.last_formats = formats

    # -- the dense fallback -----------------------------------------------------
    @staticmethod
    def _fallback(output_tensor, flat_in, group, op, kind, factor, async_op):
        out = output_tensor if output_tensor.is_contiguous() else torch.empty_like(output_tensor)
        src = flat_in
        if kind == _PREMUL and dist.get_backend(group) != "nccl":
            # Gloo has no PREMUL_SUM: multiply a copy, as NCCL multiplies each input, then sum.
            src, op = flat_in * factor, _SUM
        work = dist.reduce_scatter_tensor(out.view(-1), src, op=op, group=group, async_op=async_op)

        def finish():
            if out is not output_tensor:
                output_tensor.copy_(out)
            del src_keep[:]
        src_keep = [src]  # the multiplied copy lives until the exchange is done
        if async_op:
            return _SparseWork(work, finish)
        finish()
        return None

    # -- the sparse exchange ----------------------------------------------------
    def _sparse(self, output_tensor, flat_in, group, world, rank, chunk, slot, kind, factor,
                nz, rows, plan, async_op, ctx):
        device, dtype = flat_in.device, flat_in.dtype
        vb = flat_in.element_size()
        slots = chunk // slot
        idx_dtype = torch.int32 if slots < 2**31 else torch.int64
        my_counts = rows[rank]
        sizes = [plan[rank][d][1] if d != rank else 0 for d in range(world)]
        send = torch.empty(sum(sizes), dtype=torch.uint8, device=device)
        src = flat_in.view(world, chunk)
        scale = factor if kind == _PREMUL else None
        offset = 0
        first_nz = 0  # where chunk d's offsets start in nz (the agreed counts, summed)
        for d in range(world):
            fmt, size = plan[rank][d]
            nnz = my_counts[_N_META + 2 * d]
            first_nz += nnz
            if d == rank or fmt == EMPTY:
                continue
            seg = send[offset:offset + size]
            offset += size
            row = src[d]
            if fmt == DENSE:
                vals_out = seg[:chunk * vb].view(dtype)
                if scale is None:
                    vals_out.copy_(row)
                else:
                    torch.mul(row, scale, out=vals_out)
                continue
            idx = nz[first_nz - nnz:first_nz] - d * slots  # offsets within chunk d
            if fmt == COO:
                head = nnz * idx_dtype.itemsize
                seg[:head].view(idx_dtype).copy_(idx)
            elif fmt == RUNS:
                # Runs from the sorted non-zero offsets: a run starts where
                # the offset is not its predecessor's + 1 (small arrays only).
                runs = my_counts[_N_META + 2 * d + 1]
                step_up = torch.ones(nnz, dtype=torch.bool, device=device)
                step_up[1:] = idx[1:] != idx[:-1] + 1
                first_pos = torch.nonzero_static(step_up, size=runs).squeeze(1)
                lengths = torch.diff(first_pos, append=first_pos.new_tensor([nnz]))
                pairs = seg[:2 * runs * idx_dtype.itemsize].view(idx_dtype).view(2, runs)
                pairs[0].copy_(idx[first_pos])
                pairs[1].copy_(lengths)
                head = 2 * runs * idx_dtype.itemsize
            else:  # BITMAP
                head = (slots + 7) // 8
                mask = torch.zeros(slots, dtype=torch.bool, device=device)
                mask[idx] = True
                seg[:head].copy_(_pack_bits(mask))
            # The values: the non-zero slots' elements, nnz rows of `slot`.
            vals_out = seg[_align8(head):_align8(head) + nnz * slot * vb].view(dtype).view(nnz, slot)
            if scale is None:
                torch.index_select(row.view(slots, slot), 0, idx, out=vals_out)
            else:
                torch.mul(row.view(slots, slot).index_select(0, idx), scale, out=vals_out)
        recv_sizes = [plan[s][rank][1] if s != rank else 0 for s in range(world)]
        recv = torch.empty(sum(recv_sizes), dtype=torch.uint8, device=device)
        if ctx is not None:
            # zen's communicator: the buffers are read and written in place
            # (numpy views), the exchange runs on the context's progress thread.
            work = ctx.exchange_bytes(_NAME, send.numpy(), sizes, recv.numpy(), recv_sizes)
            if not async_op:
                work.wait()
        else:
            work = dist.all_to_all_single(recv, send, output_split_sizes=recv_sizes, input_split_sizes=sizes,
                                          group=group, async_op=async_op)

        def finish():
            out = output_tensor.view(-1) if output_tensor.is_contiguous() else torch.empty(
                chunk, dtype=dtype, device=device)
            out.zero_()
            offset = 0
            for s in range(world):  # ascending rank order: the order of the sum
                if s == rank:
                    own = src[rank]
                    out.add_(own if scale is None else own * scale)
                    continue
                fmt, size = plan[s][rank]
                seg = recv[offset:offset + size]
                offset += size
                if fmt == EMPTY:
                    continue
                if fmt == DENSE:
                    out.add_(seg[:chunk * vb].view(dtype))
                    continue
                nnz = rows[s][_N_META + 2 * rank]
                if fmt == COO:
                    head = nnz * idx_dtype.itemsize
                    idx = seg[:head].view(idx_dtype).long()
                elif fmt == RUNS:
                    runs = rows[s][_N_META + 2 * rank + 1]
                    head = 2 * runs * idx_dtype.itemsize
                    pairs = seg[:head].view(idx_dtype).view(2, runs).long()
                    idx = _expand_runs(pairs[0], pairs[1], nnz)
                else:  # BITMAP
                    head = (slots + 7) // 8
                    idx = torch.nonzero_static(_unpack_bits(seg[:head], slots), size=nnz).squeeze(1)
                vals = seg[_align8(head):_align8(head) + nnz * slot * vb].view(dtype).view(nnz, slot)
                out.view(slots, slot).index_add_(0, idx, vals)
            if kind == _AVG:
                out.div_(world)
            if out.data_ptr() != output_tensor.data_ptr():
                output_tensor.copy_(out.view(output_tensor.shape))
            keep.clear()
        keep = [send]  # the send buffer lives until the exchange is done
        if async_op:
            return _SparseWork(work, finish)
        finish()
        return None


def _bit_weights(device):
    """(1, 2, 4, ..., 128): the weight of bit i of a byte."""
    return torch.tensor([1 << i for i in range(8)], dtype=torch.uint8, device=device)


def _pack_bits(mask):
    """Bit i of byte j = mask[8 * j + i] (little-endian bit order)."""
    n = mask.numel()
    padded = torch.zeros(_align8(n), dtype=torch.uint8, device=mask.device)
    padded[:n] = mask
    return (padded.view(-1, 8) * _bit_weights(mask.device)).sum(1, dtype=torch.uint8)


def _unpack_bits(bits, n):
    return ((bits.unsqueeze(1) & _bit_weights(bits.device)) != 0).view(-1)[:n]


def _expand_runs(first, length, nnz):
    """Indices of the runs [first, first + length), concatenated, without a host sync."""
    run_of = torch.repeat_interleave(torch.arange(first.numel(), device=first.device), length, output_size=nnz)
    run_start_pos = torch.cumsum(length, 0) - length  # where each run starts in the value list
    return first[run_of] + (torch.arange(nnz, device=first.device) - run_start_pos[run_of])
