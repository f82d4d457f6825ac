"""zen: sparsity-driven gradient synchronization (ZEN, OSDI 2025).

The C++ library bound for Python. Most users want ``zen.torch`` (a DDP comm
hook and ``allreduce_``); this package also exposes the building blocks on
numpy arrays:

    import zen
    comm = zen.connect_url("file:/tmp/zen-job", rank, size)   # or zen.connect(store, ...)
    scheme = zen.create_scheme(zen.default_scheme())
    ids, values = scheme.sync(comm, rows, width, ids, values)  # global sum, coalesced
    scheme.sync_dense(comm, buffer, rows, width)                # in place, zero rows skipped
    ctx = zen.Context(comm)                                     # asynchronous, batched
    h = ctx.start("bucket0", [("dense", "w", buffer, rows, width)])
    h.wait()

Errors: ``ValueError`` for bad input (zen::InvalidArgument); ``zen.MismatchError``
(ranks disagree), ``zen.FormatError`` (undecodable bytes) and
``zen.TransportError`` (network, rendezvous, timeout), all subclasses of
``zen.Error``, itself a ``RuntimeError``.

``zen.__version__`` is the C++ project's version (CMakeLists.txt, project()).
"""

import atexit as _atexit
import weakref as _weakref

from zen._zen import Context as _Context
from zen._zen import (  # noqa: F401  (re-exported)
    __version__,
    Communicator,
    Error,
    FormatError,
    Handle,
    MismatchError,
    Scheme,
    TransportError,
    connect,
    connect_url,
    create_scheme,
    default_scheme,
    schemes,
    write_trace,
)

from zen._zen import TopKSelector, topk_count  # noqa: F401,E402  (re-exported)
for _cls in (Communicator, Error, FormatError, Handle, MismatchError, Scheme, TransportError):
    _cls.__module__ = "zen"
del _cls

__all__ = [
    "Communicator",
    "Context",
    "Error",
    "FormatError",
    "Handle",
    "MismatchError",
    "Scheme",
    "TransportError",
    "connect",
    "connect_url",
    "create_scheme",
    "default_scheme",
    "schemes",
    "write_trace",
]


class Context(_Context):
    """zen.Context (see the C++ docstring below): closed at interpreter exit,
    before the interpreter can no longer run completion callbacks."""

    __doc__ = (__doc__ or "") + "\n\n" + (_Context.__doc__ or "")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _open_contexts.add(self)


_open_contexts = _weakref.WeakSet()


@_atexit.register
def _close_contexts():
    for ctx in list(_open_contexts):
        ctx.close()


Context.__module__ = "zen"
