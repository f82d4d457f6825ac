"""zen for PyTorch: a drop-in DDP comm hook and an allreduce for your own loop.

DDP (dense and sparse gradients, one call)::

    import torch.distributed as dist, zen.torch
    dist.init_process_group("gloo")                      # env:// from torchrun
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    ddp.register_comm_hook(zen.torch.ZenState(module=model), zen.torch.comm_hook)
    # or, the same: zen.torch.register(ddp)

The hook receives every DDP bucket. A dense bucket is synchronized one
bucket in one batch (every >= 2-D parameter as a [rows x width] item, so
zero rows of an embedding gradient are not sent, neighbours of the same
width fused into one item; all 0-/1-D parameters of
the bucket together as one [n x 1] element buffer, so zero elements are not
sent). As plain DDP does, each rank's gradient is scaled by 1/world size
before the sum, so the average lands in the bucket. A sparse COO bucket
(``nn.Embedding(sparse=True)``) is synchronized by zen instead of Gloo's
allgather and comes back coalesced and averaged.

Your own loop::

    zen.torch.allreduce_(dense)           # in place, sum over ranks
    sparse = zen.torch.allreduce_(sparse) # sparse COO: set in place to the coalesced sum, returned

Rendezvous goes through the job's torch.distributed store (no extra port).
The first use of a ZenState connects it; every rank must create and first use
its ZenStates in the same order (as with any collective). The GIL is released
while data moves. CPU tensors of float32, float16, bfloat16 and float64 are
synchronized (float32 and float64 each summed in its own precision, float16
and bfloat16 summed in float32 and converted back);
``ZenState(values="bf16")`` sends values at half width.

Errors: ValueError for bad input, zen.MismatchError when ranks disagree (e.g.
shapes; raised on every rank, nothing hangs), zen.TransportError for network
failures or timeouts. Inside DDP's backward, torch re-raises a hook's error as
a RuntimeError whose message holds "ValueError: ...", "zen.MismatchError: ...".

Top-k sparsification with error feedback (DGC) for dense models,
``zen.torch.TopKState`` and ``zen.torch.topk_hook`` (the same objects as
``zen.sparsify``'s; its docstring describes warm-up, momentum correction,
stats, checkpoints and recording)::

    state = zen.torch.TopKState(ratio=0.01, warmup_steps=100, module=model)
    ddp.register_comm_hook(state, zen.torch.topk_hook)

FSDP2's sparse reduce-scatter, ``zen.torch.SparseReduceScatter`` (the same as
``zen.fsdp``'s; see its docstring).
"""

from zen._ddp import ZenState, allreduce_, comm_hook, register
from zen.fsdp import SparseReduceScatter
from zen.sparsify import TopKState, topk_hook

__all__ = ["SparseReduceScatter", "TopKState", "ZenState", "allreduce_", "comm_hook", "register",
           "topk_hook"]
