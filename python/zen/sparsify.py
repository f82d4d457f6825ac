"""Top-k sparsification with error feedback for DDP, synchronized by zen (DGC).

Turns dense gradients sparse before they travel: per parameter, each rank adds
its residual (what it did not send before) to the gradient, keeps the values
of largest magnitude (a fraction ``ratio``), sends them as an element-sparse
tensor through zen, and keeps the rest as its new residual. The shape of
torch's PowerSGD hook::

    import zen.torch
    from zen.sparsify import TopKState, topk_hook
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    state = TopKState(ratio=0.01, warmup_steps=100, module=model)
    ddp.register_comm_hook(state, topk_hook)
    ...
    state.stats[-1]   # what the latest step sent and how long it took

Per bucket, one zen batch of one element-sparse item (rows = the bucket's
values, width 1; ``coalesce=True``: one batch per step for all buckets): the
selections of every sparsified parameter and every value of the parameters
that stay dense (0-/1-D ones such as biases and norms, those below
``min_numel`` elements, and those named in ``dense_params``).
``fuse=False``: one element-sparse item per sparsified
parameter (rows = numel) and one dense item per dense parameter;
zen.Context coalesces sparse items of at most 2^22 values and dense items of
at most 2^15 values (one scheme, one width) into one exchange each, and
larger items move with their own scheme rounds, so fusing saves rounds, not
bytes (a dense parameter's values cost 12 bytes each instead of 4). zen writes
the global sum, divided by the world size, straight into the bucket (the
item's "out"/"divisor": Scheme::SyncInto); the future is completed from
zen's progress thread (backward goes on meanwhile).

Warm-up (DGC): the first ``warmup_steps`` steps go through the process
group's allreduce exactly as plain DDP (bit-identical, nothing kept in the
residual); then the kept fraction ramps down geometrically from 1 to
``ratio`` over ``ramp_steps`` steps. A step is counted when DDP hands over
the last bucket (``bucket.is_last()``).

Momentum correction (DGC, ``momentum=m``): the hook applies the momentum
locally (u = m*u + g, accumulated into the residual, u cleared where values
were sent) and the optimizer must then run plain SGD (momentum=0). Dense
parameters send u whole (exactly momentum SGD on the average gradient).

Only float32 CPU buckets are sparsified; a bucket of another dtype is handed
to the process group's allreduce (dense). Residuals are kept per parameter
(keyed by the parameter, so DDP's bucket rebuild after the first step does
not mix them up).

``state.stats``: one dict per step: step, ratio, values_sent (the number of
values this rank sent: selected + dense), values_total, fraction,
bytes_sent / bytes_received (zen.Communicator payload counters over the step;
None for steps through the process group), select_s (time spent selecting, in
the hook, on the autograd thread), sync_s (the first bucket's selection done
to the last bucket done, whether or not its exchange waited to be coalesced;
through the process group: the sum of the buckets' times),
bucket_s (the sum over buckets of each one's start to done), buckets,
batches (zen batches started: 1 per step when coalescing, else 1 per bucket),
recorded (True for a step recorded to a trace: its batches also gather
every rank's selection, so its times and bytes are not those of a plain
step).

Checkpoints: ``state.state_dict()`` (the step, this rank's residuals and
momentum by parameter name, the options they depend on; every rank saves its
own) and ``state.load_state_dict(sd)`` resume a run bit for bit; they need
``module=`` for the names.

Recording (``record=path``): the hook writes what every rank sent in
``record_steps`` steps, from ``record_start`` (default: the first step at the
final ratio, after warm-up and ramp), as a zen-trace/1 file (rank 0 writes
it, rewritten after every recorded bucket), for ``zen analyze`` and ``zen
bench --trace``: per step k and parameter, ``step<k>.<name>`` (rows = numel,
width 1: the selected values, or every value of a parameter that stays
dense), and ``step<k>.all``, the concatenation of all of them in bucket
order (rows = the model's values): one step's whole synchronization as one
element-sparse tensor. The rows travel to every rank with the bucket's batch
(scheme agsparse), so recording costs traffic only while it lasts.
"""

import math
import time

import numpy as np
import torch
import torch.distributed as dist

import zen
from zen._ddp import ZenState, _trace_name, _unwrap

__all__ = ["TopKState", "topk_hook"]


class TopKState:
    """State of topk_hook for one DDP model.

    Args:
        ratio: fraction of each sparsified parameter's values sent per step
            (ceil(ratio * numel), at least 1).
        warmup_steps: steps synchronized densely through the process group
            (plain DDP) before sparsification starts.
        ramp_steps: steps over which the kept fraction falls geometrically
            from 1 to ratio after the warm-up (0: ratio at once).
        dense_params: names (or parameters) that always stay dense.
        min_numel: parameters with fewer elements stay dense; so do all 0-/1-D
            parameters (biases, norms).
        momentum: None, or the SGD momentum to apply locally with DGC's
            momentum correction (then use an optimizer without momentum).
        exact: True for exact top-k, False for DGC's sampled threshold (the
            count lands within a few % of k).
        error_feedback: keep the values not sent and add them to the next
            step's gradient (True), or drop them (False: for comparison only).
        zen_state: the zen.torch.ZenState to synchronize through (its
            Context and Communicator); default a new one on `process_group`.
        process_group: the DDP model's process group (``ddp.process_group``)
            when it is not the world, as torch's PowerSGDState takes it; the
            default state synchronizes over it. A state whose group holds
            ranks of other DDP replicas raises zen.MismatchError at the
            first bucket (ZenState.check_replicas) instead of mixing them.
        module: the model, to name parameters (dense_params by name, and the
            items' names across ranks).
        threads: threads of the selector (a persistent pool).
        keep_stats: how many steps of stats to keep (None: all).
        scheme: zen scheme id for the sparsified items (default: the
            ZenState's, e.g. 'auto', whose cost model may pick a dense
            allreduce for them when the union of the ranks' selections is
            dense enough; 'zen' keeps them sparse on the wire).
        fuse: True (default): per bucket, one element-sparse item holding
            every sparsified parameter's selection and every value of the
            parameters that stay dense (rows = the bucket's values, ids
            offset by the parameter's place in the bucket): one data phase
            per bucket. False: one item per parameter, dense ones as dense
            items (a scheme's rounds per parameter; slower when latency or
            CPU scheduling, not bytes, dominates).
        coalesce: False (default): one zen exchange per bucket, started
            when DDP hands the bucket over (it overlaps the rest of
            backward). True (with fuse): one exchange per step: a bucket's
            selection is made when DDP hands it over, but its
            synchronization waits for the step's last bucket
            (``bucket.is_last()``); then every bucket's selection travels as
            ONE element-sparse item (rows = the buckets' values in bucket
            order) and each bucket's future completes with its part. A step
            then pays one scheme call's fixed cost (rounds, per-transfer CPU)
            instead of one per bucket, but gives up the overlap; measured
            on the 8-host testbed it shortened the synchronization span and
            lengthened the step (docs/sections/sparsify.md). Steps that are
            recorded (``record``) are not coalesced.
        record: a path: write what every rank sent in `record_steps` steps
            as a zen-trace/1 file for ``zen analyze`` and ``zen bench
            --trace`` (rank 0 writes it, rewritten after every recorded
            bucket): per step k and parameter ``step<k>.<name>`` (rows =
            numel, width 1: the selected values, or every value of a
            parameter that stays dense) and ``step<k>.all`` (all of them in
            bucket order: the step's whole synchronization). Recorded
            buckets also gather every rank's selection, so they cost
            traffic while recording lasts (zen.sparsify's docstring,
            "Recording").
        record_steps: how many steps to record (default 3).
        record_start: the first recorded step (default warmup_steps +
            ramp_steps: the first at the final ratio).
    """

    def __init__(self, ratio=0.01, *, warmup_steps=0, ramp_steps=0, dense_params=(),
                 min_numel=1024, momentum=None, exact=True, error_feedback=True,
                 zen_state=None, module=None, threads=1, keep_stats=None, scheme=None,
                 record=None, record_steps=3, record_start=None, fuse=True, coalesce=False,
                 process_group=None):
        if not 0.0 < ratio <= 1.0:
            raise ValueError(f"zen: TopKState ratio must lie in (0, 1], got {ratio}")
        if warmup_steps < 0 or ramp_steps < 0:
            raise ValueError("zen: warmup_steps and ramp_steps must be >= 0")
        if momentum is not None and not 0.0 <= momentum < 1.0:
            raise ValueError(f"zen: momentum must lie in [0, 1), got {momentum}")
        self.ratio = float(ratio)
        self.warmup_steps = int(warmup_steps)
        self.ramp_steps = int(ramp_steps)
        self.min_numel = int(min_numel)
        self.momentum = momentum
        self.exact = exact
        self.error_feedback = error_feedback
        self.keep_stats = keep_stats
        self.scheme = scheme
        if zen_state is not None and process_group is not None and (
                zen_state.process_group is not process_group):
            raise ValueError("zen: TopKState: zen_state synchronizes over another process group "
                             "than process_group; pass one of them")
        self._zen_state = zen_state
        self._process_group = process_group
        self._threads = threads
        self._selector = None
        self.step = 0
        self.stats = []
        self._names = {}
        self._numels = {}  # name -> numel, for checkpoints (module only)
        if module is not None:
            for n, p in module.named_parameters():
                self._names[id(p)] = n
                self._numels[n] = p.numel()
        self._dense_names = {p for p in dense_params if isinstance(p, str)}
        self._dense_ids = {id(p) for p in dense_params if not isinstance(p, str)}
        # Per parameter (id): the residual (accumulated values not sent) and
        # the local momentum, float32 1-D.
        self.residuals = {}
        self.velocities = {}
        self._record = None
        self.fuse = bool(fuse)
        self.coalesce = bool(coalesce)
        # Coalescing: the buckets of the current step handed over so far,
        # waiting for the last one (see _flush_step).
        self._pending = []
        if record_steps < 0 or (record_start is not None and record_start < 0):
            raise ValueError("zen: record_steps and record_start must be >= 0")
        self.record = None if record is None else str(record)
        self.record_steps = int(record_steps)
        self.record_start = (self.warmup_steps + self.ramp_steps if record_start is None
                             else int(record_start))
        # Per recorded step k: {(bucket index, position): (trace name, rows, [(ids, values)]
        # per rank)}, kept on every rank; rank 0 writes the file.
        self._recorded = {}

    # --- configuration -----------------------------------------------------

    @property
    def selector(self):
        """zen.TopKSelector of transport 'zen' (created on first use; transport
        'process_group' selects with torch.topk on the gradient's device)."""
        if self._selector is None:
            self._selector = zen.TopKSelector(self._threads,
                                              method="exact" if self.exact else "sampled")
        return self._selector

    @property
    def zen_state(self):
        if self._zen_state is None:
            self._zen_state = ZenState(self._process_group)
        return self._zen_state

    def current_ratio(self, step=None):
        """The fraction kept at `step` (default: the current one); 1.0 during warm-up."""
        step = self.step if step is None else step
        if step < self.warmup_steps:
            return 1.0
        j = step - self.warmup_steps
        if j < self.ramp_steps:
            return self.ratio ** ((j + 1) / (self.ramp_steps + 1))
        return self.ratio

    def is_dense(self, param, name):
        return (param.dim() <= 1 or param.numel() < self.min_numel or id(param) in self._dense_ids
                or name in self._dense_names)

    def name(self, param, fallback):
        name = self._names.get(id(param))
        if name is None and self._zen_state is not None:
            name = self._zen_state.param_name(param, None)
        return name or fallback

    def residual(self, param):
        """This rank's residual of a parameter (a flat float32 tensor, on the
        gradient's device for transport 'process_group'), or None."""
        r = self.residuals.get(id(param))
        if r is None or isinstance(r, torch.Tensor):
            return r
        return torch.from_numpy(r)

    # --- checkpoints ------------------------------------------------------

    # The options a checkpoint's residuals and step depend on: resuming under
    # others is not the run that was saved (load_state_dict(strict=False)
    # allows it).
    _CHECKPOINT_OPTIONS = ("ratio", "warmup_steps", "ramp_steps", "momentum", "error_feedback")

    def state_dict(self):
        """What resuming this rank's training needs, for torch.save: the step
        (warm-up and ramp go on where they stopped), this rank's residuals
        (error feedback) and momentum by parameter name, as float32 tensors,
        and the options they depend on. Residuals differ between ranks:
        every rank saves its own, as with sharded optimizer state (e.g.
        ``torch.save(..., f"ckpt.{rank}.pt")``); torch.load(weights_only=True)
        reads it. Needs the parameters' names: TopKState(module=model)."""
        by_id = {}
        for key in list(self.residuals) + list(self.velocities):
            name = self._names.get(key)
            if name is None:
                raise ValueError("zen: TopKState.state_dict needs the parameters' names: "
                                 "create the state with module=model")
            by_id[key] = name

        def tensors(table):
            return {by_id[k]: torch.from_numpy(v.copy()) for k, v in table.items()}

        return {"format": "zen.TopKState/1", "step": self.step,
                "options": {k: getattr(self, k) for k in self._CHECKPOINT_OPTIONS},
                "residuals": tensors(self.residuals), "velocities": tensors(self.velocities)}

    def load_state_dict(self, state_dict, strict=True):
        """Resumes from state_dict() of the same rank (see state_dict): step,
        residuals and momentum. Raises ValueError, before changing anything,
        on a parameter this state's module does not have or of another size,
        and (strict) on options other than the saved ones."""
        if not isinstance(state_dict, dict) or state_dict.get("format") != "zen.TopKState/1":
            raise ValueError("zen: TopKState.load_state_dict: not a TopKState.state_dict() "
                             "(format zen.TopKState/1)")
        if not self._numels:
            raise ValueError("zen: TopKState.load_state_dict needs the parameters' names: "
                             "create the state with module=model")
        if strict:
            for k in self._CHECKPOINT_OPTIONS:
                saved, mine = state_dict["options"].get(k), getattr(self, k)
                if saved != mine:
                    raise ValueError(f"zen: TopKState.load_state_dict: the checkpoint was saved "
                                     f"with {k}={saved!r}, this state has {k}={mine!r} "
                                     f"(strict=False loads it anyway)")
        ids = {n: k for k, n in self._names.items()}
        tables = {}
        for table in ("residuals", "velocities"):
            tables[table] = {}
            for name, t in state_dict[table].items():
                if name not in ids:
                    raise ValueError(f"zen: TopKState.load_state_dict: the checkpoint's {table} "
                                     f"hold parameter '{name}', which the model does not have")
                if t.dtype != torch.float32 or t.dim() != 1 or t.numel() != self._numels[name]:
                    raise ValueError(f"zen: TopKState.load_state_dict: {table} of '{name}' hold "
                                     f"{t.numel()} {t.dtype} values ({t.dim()}-D), the parameter "
                                     f"has {self._numels[name]} (float32, 1-D expected)")
                tables[table][ids[name]] = t.detach().numpy().copy()
        self.step = int(state_dict["step"])
        self.residuals = tables["residuals"]
        self.velocities = tables["velocities"]
        self._record = None

    # --- per-step accounting ----------------------------------------------

    def _step_record(self, mode):
        """(record, live): the current step's public stats dict and its
        internal counters (created on the step's first bucket)."""
        if self._record is None or self._record[0]["step"] != self.step:
            comm = (self.zen_state.comm
                    if mode == "zen" and self.zen_state.transport == "zen" else None)
            record = {
                "step": self.step, "mode": mode, "ratio": self.current_ratio(),
                "values_sent": 0, "values_total": 0, "fraction": 0.0,
                "bytes_sent": None, "bytes_received": None, "select_s": 0.0, "sync_s": 0.0,
                "bucket_s": 0.0, "buckets": 0, "batches": 0, "recorded": False,
            }
            live = {"t0": None, "comm": comm, "sent0": comm.bytes_sent if comm else 0,
                    "recv0": comm.bytes_received if comm else 0}
            self._record = (record, live)
            self.stats.append(record)
            if self.keep_stats is not None and len(self.stats) > self.keep_stats:
                del self.stats[:len(self.stats) - self.keep_stats]
        return self._record

    def recording(self, step=None):
        """The recorded step number k of `step` (default: the current one), or None."""
        step = self.step if step is None else step
        first = self.record_start
        if self.record is None or not first <= step < first + self.record_steps:
            return None
        return step - self.record_start

    def _end_bucket(self, bucket):
        if bucket.is_last():
            self.step += 1


def _bucket_params(bucket):
    """(param, offset, numel) of every parameter of the bucket, in buffer order."""
    out, offset = [], 0
    for param in bucket.parameters():
        n = param.numel()
        out.append((param, offset, n))
        offset += n
    return out


def _dense_pg(state, bucket):
    """The whole bucket through the process group's allreduce, as plain DDP."""
    record, _ = state._step_record("pg")
    group = state.zen_state.process_group
    world = dist.get_world_size(group)
    buffer = bucket.buffer()
    record["values_sent"] += buffer.numel()
    record["values_total"] += buffer.numel()
    record["fraction"] = record["values_sent"] / max(1, record["values_total"])
    record["buckets"] += 1
    t0 = time.perf_counter()
    # Scaled by 1/world before the sum, as DDP's own reducer does (a multiply
    # by the wrapped scalar 1/world): bit-identical to plain DDP.
    buffer.mul_(1.0 / world)
    fut = dist.all_reduce(buffer, group=group, async_op=True).get_future()

    def done(f):
        record["sync_s"] += time.perf_counter() - t0
        record["bucket_s"] += time.perf_counter() - t0
        return f.value()[0]

    return fut.then(done)


def topk_hook(state, bucket):
    """DDP communication hook: ``ddp.register_comm_hook(TopKState(...), topk_hook)``.

    See the module's docstring. Returns a torch.futures.Future completed from
    zen's progress thread with the averaged bucket.
    """
    if not isinstance(state, TopKState):
        raise TypeError(f"zen: topk_hook needs a TopKState, got {type(state).__name__}")
    state.zen_state.check_replicas(bucket)
    buffer = bucket.buffer()
    ratio = state.current_ratio()
    try:
        on_device = state.zen_state.transport == "process_group"
        supported = (buffer.dtype == torch.float32 and buffer.layout == torch.strided
                     and (on_device or buffer.device.type == "cpu"))
        if not supported and state.momentum is not None:
            raise TypeError("zen: topk_hook's momentum correction needs float32 buckets (CPU, "
                            "or any device with transport 'process_group'), "
                            f"got {buffer.dtype} on {buffer.device} ({buffer.layout})")
        if not supported or (state.momentum is None and ratio >= 1.0):
            return _dense_pg(state, bucket)
        if on_device:
            return _sparse_bucket_device(state, bucket, ratio)
        return _sparse_bucket(state, bucket, ratio)
    finally:
        # Coalesced buckets wait for the step's last one; when that one took
        # another path (or raised), they go now: every future completes.
        if bucket.is_last() and state._pending:
            _flush_step(state)
        state._end_bucket(bucket)


def _sparse_bucket(state, bucket, ratio):
    zs = state.zen_state
    ctx = zs.context
    world = zs.world_size
    record, live = state._step_record("zen")
    index = bucket.index()
    buffer = bucket.buffer()
    flat = buffer.view(-1)
    array = flat.detach().numpy()
    momentum = state.momentum
    fuse = state.fuse
    items = []
    scatter = []  # (offset, numel) of each sparse item (per parameter), in order
    divide = []  # bucket slices summed in place (dense items), divided by world when done
    # A sparse item's mean is written by zen straight into the bucket (zeros
    # elsewhere): no sorted result, no scatter or division pass here.
    into = {"divisor": float(world)}
    if state.scheme:
        into["scheme"] = state.scheme
    sel_ids, sel_values = [], []  # fused: the selections, ids relative to the bucket
    any_selected = False
    recorded = state.recording()
    parts = []  # what this rank sends, to record: (position, name, rows, ids, values)
    sent = total = 0
    t_select = time.perf_counter()
    for j, (param, offset, n) in enumerate(_bucket_params(bucket)):
        if n == 0:
            continue
        name = state.name(param, f"bucket{index}.{j}")
        grad = array[offset:offset + n]
        key = id(param)
        if momentum is not None:
            u = state.velocities.get(key)
            if u is None:
                u = state.velocities[key] = np.zeros(n, dtype=np.float32)
            u *= np.float32(momentum)
            u += grad
            grad[:] = u  # what this rank contributes: its momentum
        total += n
        if state.is_dense(param, name) or ratio >= 1.0:
            if fuse:  # every value, in the bucket's one sparse item
                sel_ids.append(np.arange(offset, offset + n, dtype=np.int64))
                sel_values.append(grad)
            else:
                items.append(("dense", name, grad, n, 1))
                divide.append(flat[offset:offset + n])
            sent += n
            if recorded is not None:  # copied: the dense sum lands in `grad`
                parts.append((j, name, n, np.arange(n, dtype=np.int64), grad.copy()))
            continue
        acc = state.residuals.get(key)
        if acc is None:
            acc = state.residuals[key] = np.zeros(n, dtype=np.float32)
        acc += grad
        k = zen.topk_count(n, ratio)
        ids, values = state.selector.select(acc, k, name=name)
        if momentum is not None:
            state.velocities[key][ids] = 0.0  # DGC's momentum factor masking
        if not state.error_feedback:
            acc.fill(0.0)
        if fuse:
            any_selected = True
            sel_ids.append(ids + offset)
            sel_values.append(values)
        else:
            items.append(("sparse", name, n, 1, ids, values, dict(into, out=grad)))
            scatter.append((offset, n))
        sent += len(ids)
        if recorded is not None:
            parts.append((j, name, n, np.array(ids, dtype=np.int64), np.array(values, np.float32)))
    if fuse and any_selected:
        # One element-sparse item for the whole bucket (rows = the bucket's
        # values): every selection and every value of the parameters that
        # stay dense; one data phase per bucket instead of one per parameter.
        items.append(("sparse", "topk", flat.numel(), 1, np.concatenate(sel_ids),
                      np.concatenate(sel_values), dict(into, out=array)))
        scatter.append((0, flat.numel()))
    elif fuse and sel_ids:
        # Nothing sparsified (all parameters dense, or ratio 1 with momentum):
        # the whole bucket as one dense item, summed in place.
        items.append(("dense", "dense", array, array.size, 1))
        divide.append(flat)
    record["select_s"] += time.perf_counter() - t_select
    record["values_sent"] += sent
    record["values_total"] += total
    record["fraction"] = record["values_sent"] / max(1, record["values_total"])
    record["buckets"] += 1
    t0 = time.perf_counter()
    if live["t0"] is None:
        live["t0"] = t0
    if state.coalesce and fuse and recorded is None:
        # Kept until the step's last bucket (_flush_step): one exchange per step.
        if state._pending and state._pending[0]["step"] != state.step:
            _fail_pending(state, RuntimeError(
                "zen: topk_hook: a step ended without DDP handing over its last bucket; "
                "its coalesced buckets were not synchronized"))
        future = torch.futures.Future()
        entry = {"step": state.step, "index": index, "buffer": buffer, "flat": flat,
                 "array": array, "future": future, "t0": t0, "kind": None}
        if any_selected:
            entry.update(kind="sparse", ids=items[0][4], values=items[0][5], rows=flat.numel())
        elif items:
            entry["kind"] = "dense"
        state._pending.append(entry)
        if bucket.is_last():
            _flush_step(state)
        return future
    layout = None
    if recorded is not None:
        record["recorded"] = True
        extra, layout = _record_items(state, index, recorded, parts)
        items = items + extra
    future = torch.futures.Future()

    def done(handle):
        try:
            results = handle.wait()
            if layout is not None:
                gathered = results[len(scatter):]
                results = results[:len(scatter)]
            with torch.no_grad():  # the sparse items' means are in the bucket already
                for part in divide:
                    part.div_(world)
            _account_done(record, live, [t0])
            if layout is not None:
                _keep_recorded(state, recorded, layout, gathered)
            future.set_result(buffer)
        except Exception as e:  # noqa: BLE001 (handed to DDP)
            future.set_exception(e)

    record["batches"] += 1
    ctx.start(f"topk.bucket{index}", items, on_done=done)
    return future


def _topk_count(n, ratio):
    """ceil(ratio * n), clamped to [0, n] (zen.topk_count without the C++
    extension)."""
    return max(0, min(n, math.ceil(ratio * n)))


def _sparse_bucket_device(state, bucket, ratio):
    """topk_hook on transport 'process_group': selection and error feedback
    with torch ops on the gradient's device (torch.topk of the magnitudes:
    exact top-k; ties broken by torch, so a tie may select another id than
    the C++ selector), then the bucket's selections and its dense
    parameters' values as one element-sparse sum through the engine; the
    mean lands in the bucket. No host copy of the gradient; the engine's
    count records are the only host reads. Runs to its end inside the hook
    (the future is complete when returned). Recording (record=) and
    coalesce=True are transport 'zen' features: here each bucket goes alone
    and nothing is recorded."""
    zs = state.zen_state
    world = zs.world_size
    record, live = state._step_record("zen")
    live["comm"] = None
    index = bucket.index()
    buffer = bucket.buffer()
    flat = buffer.view(-1)
    momentum = state.momentum
    sel_ids, sel_values = [], []
    sent = total = 0
    t_select = time.perf_counter()
    with torch.no_grad():
        for j, (param, offset, n) in enumerate(_bucket_params(bucket)):
            if n == 0:
                continue
            name = state.name(param, f"bucket{index}.{j}")
            grad = flat[offset:offset + n]
            key = id(param)
            if momentum is not None:
                u = state.velocities.get(key)
                if u is None:
                    u = state.velocities[key] = torch.zeros_like(grad)
                u.mul_(momentum).add_(grad)
                grad.copy_(u)
            total += n
            if state.is_dense(param, name) or ratio >= 1.0:
                sel_ids.append(torch.arange(offset, offset + n, device=flat.device))
                sel_values.append(grad.clone())
                sent += n
                continue
            acc = state.residuals.get(key)
            if acc is None:
                acc = state.residuals[key] = torch.zeros_like(grad)
            acc.add_(grad)
            k = _topk_count(n, ratio)
            ids = torch.topk(acc.abs(), k, sorted=False).indices
            values = acc[ids]
            acc[ids] = 0.0  # what was sent leaves the residual
            if momentum is not None:
                state.velocities[key][ids] = 0.0  # DGC's momentum factor masking
            if not state.error_feedback:
                acc.zero_()
            sel_ids.append(ids + offset)
            sel_values.append(values)
            sent += k
        record["select_s"] += time.perf_counter() - t_select
        record["values_sent"] += sent
        record["values_total"] += total
        record["fraction"] = record["values_sent"] / max(1, record["values_total"])
        record["buckets"] += 1
        t0 = time.perf_counter()
        if live["t0"] is None:
            live["t0"] = t0
        future = torch.futures.Future()
        try:
            engine = zs.engine
            sent0, recv0 = engine.bytes_sent, engine.bytes_received
            ids, values = engine.allreduce_sparse(
                "topk", flat.numel(), torch.cat(sel_ids), torch.cat(sel_values).view(-1, 1))
            flat.zero_()
            flat[ids] = values.view(-1) / world
            record["batches"] += 1
            _account_done(record, live, [t0])
            record["bytes_sent"] = (record["bytes_sent"] or 0) + engine.bytes_sent - sent0
            record["bytes_received"] = ((record["bytes_received"] or 0)
                                        + engine.bytes_received - recv0)
            future.set_result(buffer)
        except Exception as e:  # noqa: BLE001 (handed to DDP)
            future.set_exception(e)
    return future.then(_unwrap)


def _account_done(record, live, started):
    """The step's stats when a batch completes: its buckets started at
    `started` (perf_counter); the step's span and byte counters so far."""
    now = time.perf_counter()
    record["sync_s"] = now - live["t0"]
    record["bucket_s"] += sum(now - t for t in started)
    comm = live["comm"]
    if comm is not None:
        record["bytes_sent"] = comm.bytes_sent - live["sent0"]
        record["bytes_received"] = comm.bytes_received - live["recv0"]


def _fail_pending(state, error):
    pending, state._pending = state._pending, []
    for e in pending:
        e["future"].set_exception(error)


def _flush_step(state):
    """Synchronizes the step's coalesced buckets as one zen batch: every
    sparse bucket's selection in one element-sparse item (ids offset by the
    bucket's place among them), every all-dense bucket as a dense item; then
    writes each bucket's part back, divides by the world size and completes
    its future."""
    pending, state._pending = state._pending, []
    zs = state.zen_state
    world = zs.world_size
    record, live = state._step_record("zen")
    items, sparse, ids_parts, value_parts = [], [], [], []
    rows = 0
    for e in pending:
        if e["kind"] == "sparse":
            e["offset"] = rows
            ids_parts.append(e["ids"] + rows)
            value_parts.append(e["values"])
            rows += e["rows"]
            sparse.append(e)
    if sparse:
        item = ("sparse", "topk", rows, 1, np.concatenate(ids_parts), np.concatenate(value_parts))
        items.append(item + ({"scheme": state.scheme},) if state.scheme else item)
    for e in pending:
        if e["kind"] == "dense":
            items.append(("dense", f"dense.bucket{e['index']}", e["array"], e["array"].size, 1))

    def done(handle):
        try:
            results = handle.wait()
            with torch.no_grad():
                if sparse:
                    ids, values = results[0]
                    values = values.reshape(-1)
                    for e in sparse:  # the result's ids are sorted: each bucket's is a slice
                        lo, hi = np.searchsorted(ids, [e["offset"], e["offset"] + e["rows"]])
                        out = e["array"]
                        out.fill(0.0)
                        out[ids[lo:hi] - e["offset"]] = values[lo:hi]
                for e in pending:
                    e["flat"].div_(world)
            _account_done(record, live, [e["t0"] for e in pending])
        except Exception as ex:  # noqa: BLE001 (handed to DDP)
            for e in pending:
                e["future"].set_exception(ex)
            return
        for e in pending:
            e["future"].set_result(e["buffer"])

    record["batches"] += 1
    try:
        zs.context.start("topk.step", items, on_done=done)
    except Exception as ex:  # noqa: BLE001 (handed to DDP through every future)
        for e in pending:
            e["future"].set_exception(ex)


# --- recording what the ranks sent (record=) --------------------------------

def _record_items(state, index, step, parts):
    """Items that gather every rank's sent values of each part to every rank:
    rank r puts its values at offset r x rows of a [world x rows] tensor, so
    the sum is the concatenation (agsparse: an allgather, exact)."""
    zs = state.zen_state
    world, rank = zs.world_size, zs.comm.rank
    items, layout = [], []
    for position, name, rows, ids, values in parts:
        trace_name = _trace_name(step, name)
        items.append(("sparse", "record." + trace_name, world * rows, 1, ids + rank * rows,
                      values.reshape(-1, 1), {"scheme": "agsparse"}))
        layout.append(((index, position), trace_name, rows))
    return items, layout


def _keep_recorded(state, step, layout, gathered):
    """Keeps every rank's sent values of the bucket; rank 0 rewrites the trace."""
    zs = state.zen_state
    world = zs.world_size
    kept = state._recorded.setdefault(step, {})
    for (key, trace_name, rows), (ids, values) in zip(layout, gathered):
        owner = ids // rows
        kept[key] = (trace_name, rows, [(ids[owner == r] - r * rows, values[owner == r].reshape(-1))
                                        for r in range(world)])
    if zs.comm.rank == 0:
        _write_trace(state)


def _write_trace(state):
    """Rank 0: the recorded steps as zen-trace/1: per step, `step<k>.all` (every
    part of the step concatenated in (bucket, position) order), then the parts."""
    world = state.zen_state.world_size
    tensors = []
    for step in sorted(state._recorded):
        parts = [state._recorded[step][key] for key in sorted(state._recorded[step])]
        offset, per_rank = 0, [([], []) for _ in range(world)]
        for _, rows, ranks in parts:
            for r, (ids, values) in enumerate(ranks):
                per_rank[r][0].append(ids + offset)
                per_rank[r][1].append(values)
            offset += rows
        tensors.append((f"step{step}.all", offset, 1,
                        [(np.concatenate(ids), np.concatenate(values).reshape(-1, 1))
                         for ids, values in per_rank]))
        tensors += [(name, rows, 1, [(ids, values.reshape(-1, 1)) for ids, values in ranks])
                    for name, rows, ranks in parts]
    zen.write_trace(state.record, world, tensors, {
        "generator": "zen.sparsify TopKState(record=...)",
        "ratio": repr(state.ratio),
        "record_start": str(state.record_start),
        "all": "step<k>.all: every parameter of step k concatenated (bucket order)",
    })
