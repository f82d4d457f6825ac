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

try:
    from zen._zen import Context as _Context
except ModuleNotFoundError as _e:
    # A source tree without the C++ extension (PYTHONPATH=python): only the
    # pure-torch modules work (zen.process_group); the error classes are
    # defined here with the extension's hierarchy so that they are caught
    # the same way.
    if _e.name != "zen._zen":
        raise
    _Context = None

    class Error(RuntimeError):
        """zen's error (the extension's zen.Error)."""

    class MismatchError(Error):
        """Ranks disagree on a call's arguments."""

    class FormatError(Error):
        """Bytes that do not decode."""

    class TransportError(Error):
        """Network, rendezvous or timeout failure."""

    for _cls in (Error, FormatError, MismatchError, TransportError):
        _cls.__module__ = "zen"
    del _cls, _e
    __all__ = ["Error", "FormatError", "MismatchError", "TransportError"]
if _Context is not None:
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
        scheme_dtypes,
        schemes,
        transports,
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
        "transports",
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
