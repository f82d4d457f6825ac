"""ZEN's sparse allreduce with torch tensor ops and a torch.distributed group.

The process-group transport of zen: the same algorithm as the C++ scheme
``zen`` (zen/schemes/zen.h: Balanced Parallelism, the keyed row permutation
for ownership, COO push, hash-bitmap pull), written with torch tensor ops and
the collectives of a ``torch.distributed`` process group, so that it runs
wherever the group runs: CUDA tensors over NCCL, CPU tensors over Gloo. It
imports only torch (never the C++ extension ``zen._zen``), so it works from a
source tree with ``PYTHONPATH=python``.

One call, on every rank of the group:
  1. local coalesce: repeated ids summed (in the sum dtype, input order);
  2. ownership: the row permutation pi of zen/core/row_permutation.h (same
     seed, same Feistel network, same blocks of 2^b ids for width 1) maps
     each id to its key; server j owns the keys of [start_j, start_{j+1}),
     the row's position in j's domain is key - start_j (from a tensor's
     second call, small pi and pi^-1 are lookup tables: RowOwner.use_table);
  3. one small all_gather of a record per rank (sent as an
     ``all_to_all_single`` of the record to every peer: one round where
     Gloo's all_gather takes n - 1): its row count per server
     and the call's metadata (rows, width, dtype, name hash, wire dtype, sum
     order, error code: n + 5 int64). This rank's bad input travels as the
     error code, and every rank raises the same exception; disagreeing
     metadata raises zen.MismatchError on every rank (only then do the
     ranks exchange the details the messages name). Its one ``.tolist()``
     is the first of the call's two explicit host reads;
  4. push: one ``all_to_all_single`` of bytes with split sizes: to each
     server the rows it owns, positions (COO; width 1: the smallest of
     COO32, a bitmap over the domain and Elias-Fano, as the C++ scheme's
     compact push) then values at the wire width;
  5. aggregation on the owner: the ranks' rows summed rank by rank in
     ascending rank order (each rank's addition its own step: no atomics,
     the first contribution assigned, not added to 0; on CPU an index_add_
     per rank from -0.0, the same bits), or in a ring order
     (``sum_order``, Gloo's ring allreduce order: see allreduce_rows_);
  6. second small all_gather: each server's row count and, per rank, the rows
     only that rank contributed (its second and last explicit host read);
  7. pull: one ``all_to_all_single``: each server sends every other rank its
     sums, positions as a hash bitmap over its domain, COO32/COO or
     Elias-Fano, whichever is fewest bytes (zen's kAuto, decided from the
     agreed counts, so sender and receiver agree without a header). Rows
     wider than 1: the rows that only the receiver contributed stay home
     (the receiver has them: its own pushed values), as the C++ scheme's
     grouped pull does;
  8. decode: positions back to ids (pi^-1), the result sorted by id.

Exactness: float32 is summed in float32, float64 in float64, bfloat16 and
float16 in float32, and values travel at their own width (``wire_dtype``
narrows float32's wire, e.g. to torch.bfloat16: the owner's sums are rounded
to the wire for every rank, itself included, so all ranks hold the same
result). With the same seed and the ascending rank order the float32 results
are bit for bit the C++ scheme's.

Values never leave the device and the device is never synchronized; the only
``.item()``/``.tolist()`` calls are on the two count records (and on the
seed, on the first call). (torch's data-dependent shapes, e.g. unique or
boolean indexing, wait for their sizes, as every sparse op in torch does.)
The engine issues its work on the current stream, after whatever produced
the inputs there; the NCCL collectives' waits order that stream after them.

Bytes: about the C++ scheme's for the same tensors (within 2.2% on the
shipped trace at 2, 4 and 8 ranks; docs/sections/process-group.md).

Memory follows the non-zeros: 2^40 rows with a few non-zeros cost nothing
(the permutation is arithmetic; a bitmap is chosen only when it is smaller
than the positions it replaces), plus the permutation tables of tensors of
at most 2^18 rows seen twice (16 bytes a row, at most 2^22 rows in all).

Errors: ``ValueError`` for bad input (raised on every rank, naming the rank,
the tensor and the bad value), ``zen.MismatchError`` when ranks disagree,
``zen.TransportError`` when a collective fails or exceeds ``timeout``.

Usage:
    import torch.distributed as dist
    from zen.process_group import ProcessGroupEngine

    dist.init_process_group("nccl")             # or "gloo" for CPU tensors
    engine = ProcessGroupEngine()               # the world; seed as zen's C++ scheme
    ids, values = engine.allreduce_sparse("emb", 32000, ids, values)  # sorted unique ids
    engine.allreduce_rows_("bucket0.w", matrix)  # dense [rows, width], non-zero rows travel
    print(engine.bytes_sent, engine.last_stats["pull_bytes_recv"])
"""

import datetime
import hashlib

import torch
import torch.distributed as dist

import zen as _zen_pkg

__all__ = ["ProcessGroupEngine", "DEFAULT_SEED", "RowPermutation", "RowOwner",
           "element_block_bits"]

# The C++ scheme's default hash seed (zen/schemes/scheme.h, SchemeOptions::seed);
# like the C++ scheme, the engine uses rank 0's seed (broadcast on first use).
DEFAULT_SEED = 0x5EED2E7

_M64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MAX_ROWS = 1 << 62  # zen::kMaxPermutedRows
_ROUNDS = 8
# ZenScheme::kMaxElementBlockBits, kMinBlocksPerServer
_MAX_ELEMENT_BLOCK_BITS = 8
_MIN_BLOCKS_PER_SERVER = 2048
_COO32_DOMAIN = 1 << 32
# The engine's permutation tables at most (RowOwner.use_table): 2 x 32 MiB of int64.
_TABLE_BUDGET_UNITS = 1 << 22

_DTYPES = {torch.float32: 1, torch.float64: 2, torch.bfloat16: 3, torch.float16: 4}
_DTYPE_NAMES = {v: str(k).replace("torch.", "") for k, v in _DTYPES.items()}
_DTYPE_NAMES[0] = "unsupported"

# Error codes of the metadata record (0: fine).
(_E_IDS_RANGE, _E_DTYPE, _E_SHAPE, _E_ROWS, _E_WIRE, _E_ORDER, _E_IDS_DTYPE, _E_DIVISOR,
 _E_SIZE, _E_CALLER) = range(1, 11)
_ERROR_TEXT = {
    _E_IDS_RANGE: "ids outside [0, rows)",
    _E_DTYPE: "values of an unsupported dtype (float32, float64, bfloat16, float16 are)",
    _E_SHAPE: "ids and values do not match (ids [k], values [k, width], width >= 1)",
    _E_ROWS: "rows outside [1, 2^62] (the row permutation's range)",
    _E_WIRE: "a wire_dtype that is not a float dtype no wider than the values",
    _E_ORDER: "a sum_order that is neither 'rank' nor a list of (first element, start rank) steps "
              "starting at 0, ascending, with ranks inside the group",
    _E_IDS_DTYPE: "ids that are not an integer tensor",
    _E_DIVISOR: "a divisor that is not a finite non-zero number",
    _E_SIZE: "rows x width that overflows int64",
    _E_CALLER: "input the caller rejected",
}

# Pull / push index encodings.
_COO, _BITMAP, _COO32, _ELIAS_FANO = 1, 2, 3, 4
_ENCODING_NAMES = {_COO: "coo", _COO32: "coo32", _BITMAP: "bitmap", _ELIAS_FANO: "elias-fano"}


def _device_tensor(values, device):
    """An int64 tensor of host values on `device`; on CUDA copied from pinned
    memory without blocking (the host never waits for the stream)."""
    t = torch.tensor(values, dtype=torch.int64)
    if device.type == "cuda":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def _signed(v):
    """A uint64 value as the int64 with the same bits."""
    v &= _M64
    return v - (1 << 64) if v >= 1 << 63 else v


def _splitmix64(state):
    z = (state + _GOLDEN) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def derive_seed(base, i):
    """zen::DeriveSeed: splitmix64 of base + i x golden ratio (zen/core/hash.cc)."""
    return _splitmix64((base + i * _GOLDEN) & _M64)


class RowPermutation:
    """zen::RowPermutation (zen/core/row_permutation.h): a keyed bijection of
    [0, rows) by an 8-round generalized Feistel network on k bits with cycle
    walking, on int64 tensors (xor, wrapping multiply, masked shifts) and on
    Python ints (``scalar``/``scalar_inverse``, the reference of the tests)."""

    def __init__(self, seed, rows):
        if not 1 <= rows <= _MAX_ROWS:
            raise ValueError(f"zen: row permutation: rows {rows} is outside [1, 2^62]")
        self.seed = seed & _M64
        self.rows = rows
        k = max(2, (rows - 1).bit_length())
        self.hi_bits, self.lo_bits = (k + 1) // 2, k // 2
        self.hi_shift, self.lo_shift = 64 - self.hi_bits, 64 - self.lo_bits
        self.lo_mask = (1 << self.lo_bits) - 1
        self.keys = [derive_seed(self.seed ^ 0x9E3779B97F4A7C15, i) for i in range(_ROUNDS)]
        self.muls = [derive_seed(self.seed ^ 0xC2B2AE3D27D4EB4F, i) | 1 for i in range(_ROUNDS)]
        self._skeys = [_signed(v) for v in self.keys]
        self._smuls = [_signed(v) for v in self.muls]

    # Scalar reference (Python ints, exact uint64 arithmetic).
    def _f(self, i, v, shift):
        return (((v ^ self.keys[i]) * self.muls[i]) & _M64) >> shift

    def _network(self, x, inverse):
        hi, lo = x >> self.lo_bits, x & self.lo_mask
        if inverse:
            for i in range(_ROUNDS, 1, -2):
                lo ^= self._f(i - 1, hi, self.lo_shift)
                hi ^= self._f(i - 2, lo, self.hi_shift)
        else:
            for i in range(0, _ROUNDS, 2):
                hi ^= self._f(i, lo, self.hi_shift)
                lo ^= self._f(i + 1, hi, self.lo_shift)
        return (hi << self.lo_bits) | lo

    def scalar(self, x):
        x = self._network(x, False)
        while x >= self.rows:
            x = self._network(x, False)
        return x

    def scalar_inverse(self, x):
        x = self._network(x, True)
        while x >= self.rows:
            x = self._network(x, True)
        return x

    # Tensor form: in place on fresh tensors (one allocation per round).
    def _tf(self, i, v, shift):
        t = torch.bitwise_xor(v, self._skeys[i]).mul_(self._smuls[i])
        return t.bitwise_right_shift_(shift).bitwise_and_((1 << (64 - shift)) - 1)  # logical >>

    def _tnetwork(self, x, inverse):
        hi, lo = x >> self.lo_bits, x & self.lo_mask
        if inverse:
            for i in range(_ROUNDS, 1, -2):
                lo.bitwise_xor_(self._tf(i - 1, hi, self.lo_shift))
                hi.bitwise_xor_(self._tf(i - 2, lo, self.hi_shift))
        else:
            for i in range(0, _ROUNDS, 2):
                hi.bitwise_xor_(self._tf(i, lo, self.hi_shift))
                lo.bitwise_xor_(self._tf(i + 1, hi, self.lo_shift))
        return hi.bitwise_left_shift_(self.lo_bits).bitwise_or_(lo)

    def _walk(self, x, inverse):
        x = self._tnetwork(x, inverse)
        if (1 << (self.hi_bits + self.lo_bits)) == self.rows or x.numel() == 0:
            return x  # the network permutes [0, rows) itself: nothing walks
        out = (x >= self.rows).nonzero().view(-1)
        sub = x[out]
        while out.numel() > 0:  # the cycle walks, on the values still outside
            sub = self._tnetwork(sub, inverse)
            inside = sub < self.rows
            x[out[inside]] = sub[inside]
            keep = ~inside
            out, sub = out[keep], sub[keep]
        return x

    def __call__(self, ids):
        """pi of every element of int64 tensor ids (all in [0, rows))."""
        return self._walk(ids, False)

    def inverse(self, keys):
        return self._walk(keys, True)


def element_block_bits(rows, servers):
    """ZenScheme::ElementBlockBits: log2 of the ids per permuted block of a
    width-1 tensor (every server keeps at least 2048 blocks)."""
    b = _MAX_ELEMENT_BLOCK_BITS
    while b > 0 and (rows >> b) // _MIN_BLOCKS_PER_SERVER < servers:
        b -= 1
    return b


class RowOwner:
    """zen::RowOwner::Permuted (zen/core/row_owner.h): server j owns the keys
    [start_j, start_{j+1}), start_j = ceil(j units / n) << block_bits, key(id)
    = pi(id >> b) << b | (id mod 2^b) for the whole blocks (the partial last
    block's ids are their own keys).

    ``use_table()`` (the engine calls it for a tensor it sees again, when
    units <= TABLE_MAX_UNITS) replaces the arithmetic by two lookup tables
    of pi and pi^-1 over [0, units), built once per device from the same
    network: one gather per call instead of the network's 8 rounds of
    elementwise passes (and its cycle walk) in each direction."""

    TABLE_MAX_UNITS = 1 << 18  # 2 x 2 MiB of int64 tables per owner at most

    def __init__(self, seed, rows, servers, block_bits=0):
        self.rows, self.servers, self.block_bits = rows, servers, block_bits
        self.units = rows >> block_bits
        self.perm = RowPermutation(seed, self.units)
        self.unit_starts = [-(-s * self.units // servers) for s in range(servers + 1)]
        self.starts = [u << block_bits for u in self.unit_starts[:servers]] + [rows]
        self._cache = {}  # small constant tensors, per device
        self.tabled = False

    def use_table(self):
        """From now on pi and pi^-1 are table lookups (units <= TABLE_MAX_UNITS)."""
        if self.units > self.TABLE_MAX_UNITS:
            raise ValueError(f"zen: row owner: {self.units} units exceed the table's "
                             f"{self.TABLE_MAX_UNITS}")
        self.tabled = True

    def _tables(self, device):
        key = ("tables", str(device))
        t = self._cache.get(key)
        if t is None:
            every = torch.arange(self.units, dtype=torch.int64, device=device)
            forward = self.perm(every.clone())
            inverse = torch.empty_like(forward)
            inverse[forward] = every
            t = self._cache[key] = (forward, inverse)
        return t

    def _pi(self, units, inverse=False):
        """pi (or pi^-1) of int64 tensor `units` (all in [0, units))."""
        if self.tabled:
            return torch.index_select(self._tables(units.device)[1 if inverse else 0], 0, units)
        return self.perm.inverse(units) if inverse else self.perm(units)

    def start(self, s):
        return self.starts[s]

    def domain_size(self, s):
        return self.starts[s + 1] - self.starts[s]

    def keys(self, ids):
        b = self.block_bits
        if b == 0:
            return self._pi(ids)
        block = ids >> b
        whole = block < self.units
        mapped = (self._pi(torch.where(whole, block, 0)) << b) | (ids & ((1 << b) - 1))
        return torch.where(whole, mapped, ids)

    def ids_of_keys(self, keys):
        b = self.block_bits
        if b == 0:
            return self._pi(keys, inverse=True)
        block = keys >> b
        whole = block < self.units
        mapped = (self._pi(torch.where(whole, block, 0), inverse=True) << b) | \
            (keys & ((1 << b) - 1))
        return torch.where(whole, mapped, keys)

    def _on(self, device, what, values):
        key = (what, str(device))
        t = self._cache.get(key)
        if t is None:
            t = self._cache[key] = _device_tensor(values, device)
        return t

    def servers_of_keys(self, keys):
        unit = torch.clamp(keys >> self.block_bits, max=self.units - 1)
        bounds = self._on(keys.device, "unit_starts", self.unit_starts[1:self.servers])
        return torch.searchsorted(bounds, unit, right=True)

    def counts_of_sorted_keys(self, keys):
        """Rows per server of ascending keys (no host read)."""
        at = torch.searchsorted(keys, self._on(keys.device, "starts", self.starts))
        return at[1:] - at[:-1]

    # Scalar reference (tests).
    def scalar_place(self, id_):
        b = self.block_bits
        block = id_ >> b
        key = (self.perm.scalar(block) << b | (id_ & ((1 << b) - 1))) if block < self.units else id_
        unit = min(key >> b, self.units - 1)
        s = unit * self.servers // self.units
        return s, key - self.starts[s]


def _name_words(name):
    h = hashlib.blake2b(name.encode(), digest_size=8).digest()
    raw = name.encode()[:32].ljust(32, b"\0")
    words = [int.from_bytes(raw[i:i + 8], "little", signed=True) for i in range(0, 32, 8)]
    return int.from_bytes(h, "little", signed=True), words


def _text_words(text, words):
    """Up to 8 x words bytes of text as int64 words (a record's field)."""
    raw = text.encode()[:8 * words].ljust(8 * words, b"\0")
    return [int.from_bytes(raw[i:i + 8], "little", signed=True) for i in range(0, 8 * words, 8)]


def _words_name(words):
    raw = b"".join(int(w).to_bytes(8, "little", signed=True) for w in words)
    return raw.rstrip(b"\0").decode(errors="replace")


def _order_hash(order):
    if order == "rank":
        return 0
    text = ";".join(f"{a},{b}" for a, b in order).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=7).digest(), "little") + 1


def _ef_low_bits(count, domain):
    """Elias-Fano's low bits per position (zen/schemes/zen/row_codec.cc's)."""
    if count <= 0 or domain < count:
        return 0
    return (domain // count).bit_length() - 1


def _index_bytes(encoding, count, domain):
    if encoding == _COO:
        return 8 * count
    if encoding == _COO32:
        return 4 * count
    if encoding == _ELIAS_FANO:
        low = _ef_low_bits(count, domain)
        return (count * low + 7) // 8 + (count + ((domain - 1) >> low) + 1 + 7) // 8
    return (domain + 7) // 8


def _choose(count, domain, compact=True):
    """The index encoding of `count` positions of a domain of `domain`, as
    zen's kAuto chooses (zen/schemes/zen/row_codec.h): the fewest bytes of COO32 (COO
    above 2^32 positions), the bitmap and Elias-Fano (ties: COO, then the
    bitmap); without `compact`, COO (the C++ scheme's push of wide rows)."""
    if not compact:
        return _COO
    best = _COO32 if domain <= _COO32_DOMAIN else _COO
    size = _index_bytes(best, count, domain)
    for enc in (_BITMAP, _ELIAS_FANO):
        b = _index_bytes(enc, count, domain) if domain >= count else size
        if b < size:
            best, size = enc, b
    return best


def _pack_bits(bits):
    """uint8 0/1 values (any length) packed 8 to a byte, least significant first."""
    pad = (-bits.numel()) % 8
    if pad:
        bits = torch.cat([bits, bits.new_zeros(pad)])
    shifts = torch.arange(8, dtype=torch.uint8, device=bits.device)
    return (bits.view(-1, 8) << shifts).sum(dim=1, dtype=torch.uint8)


def _unpack_bits(raw):
    shifts = torch.arange(8, dtype=torch.uint8, device=raw.device)
    return ((raw.view(-1, 1) >> shifts) & 1).view(-1)


def _encode_index(pos, encoding, domain):
    """uint8 bytes of the positions (int64, ascending, in [0, domain))."""
    if encoding == _COO:
        return pos.contiguous().view(torch.uint8)
    if encoding == _COO32:
        wrapped = torch.where(pos >= 1 << 31, pos - (1 << 32), pos)
        return wrapped.to(torch.int32).view(torch.uint8)
    if encoding == _ELIAS_FANO:
        # L low bits per position, then the high parts in unary: bit
        # (pos >> L) + i set for the i-th position; both streams in one bit
        # tensor, packed at once (each stream starts at a byte).
        count = pos.numel()
        low = _ef_low_bits(count, domain)
        nlow = (count * low + 7) // 8
        nhigh = (count + ((domain - 1) >> low) + 1 + 7) // 8
        bits = torch.zeros(8 * (nlow + nhigh), dtype=torch.uint8, device=pos.device)
        if low:
            j = torch.arange(low, dtype=torch.int64, device=pos.device)
            bits[:count * low] = ((pos.unsqueeze(1) >> j) & 1).view(-1)
        ones = (pos >> low) + torch.arange(8 * nlow, 8 * nlow + count, device=pos.device)
        return _pack_bits(bits.index_fill_(0, ones, 1))
    bits = torch.zeros(domain, dtype=torch.uint8, device=pos.device)
    return _pack_bits(bits.index_fill_(0, pos, 1))


def _decode_index(raw, encoding, count, domain):
    if encoding == _COO:
        return raw.clone().view(torch.int64)
    if encoding == _COO32:
        return raw.clone().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    if encoding == _ELIAS_FANO:
        low = _ef_low_bits(count, domain)
        nlow = (count * low + 7) // 8
        bits = _unpack_bits(raw)
        ones = bits[8 * nlow:].nonzero().view(-1)
        highs = ones - torch.arange(count, device=raw.device)
        if not low:
            return highs
        j = torch.arange(low, dtype=torch.int64, device=raw.device)
        lows = (bits[:count * low].view(count, low).to(torch.int64) << j).sum(dim=1)
        return (highs << low) | lows
    return _unpack_bits(raw)[:domain].nonzero().view(-1)


def _values_at(raw, at, count, width, wire, sum_dtype):
    """The [count, width] values of dtype `wire` at byte `at` of the uint8
    tensor `raw` (its own offset 0), in sum_dtype: a view where `at` is
    aligned to the wire's width, else a copy (the index bytes before them
    need not fill whole values)."""
    piece = raw[at:at + count * width * wire.itemsize]
    if at % wire.itemsize:
        piece = piece.clone()
    return piece.view(wire).view(count, width).to(sum_dtype)


def _nonzero_rows(matrix):
    """Ascending indices of the rows of a [rows, width] float tensor with an
    element != 0 (NaN counts, -0.0 does not): (matrix != 0).any(dim=1), as
    max |x| per row != 0, one elementwise pass and a reduction along
    contiguous rows (the bool reduction is several times slower on CPU)."""
    if matrix.shape[1] == 0:
        return torch.empty(0, dtype=torch.int64, device=matrix.device)
    return (matrix.abs().amax(dim=1) != 0).nonzero().view(-1)


def _check_order(order, world):
    if order == "rank":
        return "rank"
    try:
        steps = [(int(a), int(b)) for a, b in order]
    except (TypeError, ValueError):
        return None
    if not steps or steps[0][0] != 0:
        return None
    for (a0, _), (a1, _) in zip(steps, steps[1:]):
        if a1 <= a0:
            return None
    if any(not 0 <= b < world for _, b in steps):
        return None
    return steps


class ProcessGroupEngine:
    """ZEN's sparse allreduce over the collectives of a torch.distributed
    group (see the module docstring). Not thread-safe; every rank of the
    group calls it in the same order, as any collective.

    group: a torch.distributed group (None: the default group). seed: the
    ownership seed (None: DEFAULT_SEED, the C++ scheme's default); rank 0's
    is used, broadcast on first use, as the C++ scheme does. timeout: seconds
    (or a timedelta) a collective on CPU tensors may take before
    zen.TransportError (None: the group's own timeout; on CUDA tensors the
    group's own timeout always applies, as waiting with one would block the
    host).
    """

    def __init__(self, group=None, *, seed=None, timeout=None):
        self.group = group
        self.seed = DEFAULT_SEED if seed is None else int(seed) & _M64
        if isinstance(timeout, (int, float)):
            timeout = datetime.timedelta(seconds=timeout)
        self.timeout = timeout
        self.bytes_sent = 0
        self.bytes_received = 0
        self.last_stats = {}
        self._agreed_seed = None
        self._owners = {}  # (rows, width == 1, n, seed) -> [RowOwner, calls]
        self._table_units = 0  # units of the owners' lookup tables

    # -- plumbing --------------------------------------------------------
    @property
    def rank(self):
        return dist.get_rank(self.group)

    @property
    def world_size(self):
        return dist.get_world_size(self.group)

    def _wait(self, work, what, name, device=None):
        try:
            # On CUDA, wait() only orders the current stream after the
            # collective; a wait with a timeout would block the host until
            # it completes, so there the group's own timeout (NCCL's
            # watchdog) applies.
            if self.timeout is not None and (device is None or device.type != "cuda"):
                ok = work.wait(self.timeout)
            else:
                ok = work.wait()
        except Exception as e:  # the backend's failure, as zen's transport error
            raise _zen_pkg.TransportError(
                f"zen: rank {self.rank}: tensor '{name}': {what} failed: {e}") from e
        if ok is False:
            raise _zen_pkg.TransportError(
                f"zen: rank {self.rank}: tensor '{name}': {what} did not finish within "
                f"{self.timeout}")

    def _all_gather(self, record, name, what):
        """Every rank's record, [n, len]: an all_gather done as one
        all_to_all_single of the record to every peer. The bytes are an
        all_gather's, but on Gloo it is one round of direct sends instead of
        n - 1 ring steps: half the time and CPU of all_gather_into_tensor for
        these small records at n = 8 (docs/sections/process-group.md)."""
        n = self.world_size
        out = torch.empty(n * record.numel(), dtype=record.dtype, device=record.device)
        try:
            work = dist.all_to_all_single(out, record.repeat(n), group=self.group,
                                          async_op=True)
        except Exception as e:
            raise _zen_pkg.TransportError(
                f"zen: rank {self.rank}: tensor '{name}': {what} failed: {e}") from e
        self._wait(work, what, name, record.device)
        return out.view(n, -1)

    def _all_to_all(self, send, send_sizes, recv_sizes, name, what):
        recv = torch.empty(sum(recv_sizes), dtype=torch.uint8, device=send.device)
        try:
            work = dist.all_to_all_single(recv, send, output_split_sizes=recv_sizes,
                                          input_split_sizes=send_sizes, group=self.group,
                                          async_op=True)
        except Exception as e:
            raise _zen_pkg.TransportError(
                f"zen: rank {self.rank}: tensor '{name}': {what} failed: {e}") from e
        self._wait(work, what, name, send.device)
        return recv

    def _seed_for(self, device, name):
        if self._agreed_seed is None:
            t = torch.tensor([_signed(self.seed)], dtype=torch.int64, device=device)
            try:
                work = dist.broadcast(t, src=dist.get_global_rank(self.group, 0)
                                      if self.group is not None else 0,
                                      group=self.group, async_op=True)
            except Exception as e:
                raise _zen_pkg.TransportError(
                    f"zen: rank {self.rank}: tensor '{name}': seed broadcast failed: {e}") from e
            self._wait(work, "the seed broadcast", name)
            self._agreed_seed = int(t.tolist()[0]) & _M64
            n = self.world_size
            self.bytes_sent += 8 if self.rank == 0 else 0
            self.bytes_received += 8 if self.rank != 0 and n > 1 else 0
        return self._agreed_seed

    def _owner(self, rows, width, n, seed):
        """The RowOwner of (rows, width 1 or not, n, seed), kept across calls;
        on its second call it switches to lookup tables when they are small
        (RowOwner.TABLE_MAX_UNITS) and the engine's tables stay within
        _TABLE_BUDGET_UNITS."""
        key = (rows, width == 1, n, seed)
        entry = self._owners.get(key)
        if entry is None:
            owner = RowOwner(seed, rows, n, element_block_bits(rows, n) if width == 1 else 0)
            if len(self._owners) > 64:
                self._owners.clear()
                self._table_units = 0
            entry = self._owners[key] = [owner, 0]
        owner = entry[0]
        entry[1] += 1
        if entry[1] == 2 and owner.units <= RowOwner.TABLE_MAX_UNITS and \
                self._table_units + owner.units <= _TABLE_BUDGET_UNITS:
            owner.use_table()
            self._table_units += owner.units
        return owner

    # -- the public calls ------------------------------------------------
    def allreduce_sparse(self, name, rows, ids, values, *, sum_order="rank", wire_dtype=None,
                         divisor=None, error=None):
        """The global sum of every rank's (ids, values): (ids_out, values_out),
        ids_out int64 sorted and unique, values_out [len, width] in the
        values' dtype, both on the values' device.

        ids: int64 [k] (any order; repeats are summed locally first),
        values: [k, width] float32/float64/bfloat16/float16. sum_order:
        "rank" (ascending rank order, the C++ scheme's) or a list of (first
        element, start rank) steps (see allreduce_rows_). wire_dtype: a
        narrower dtype for float32's wire (torch.bfloat16 / torch.float16).
        divisor: each rank's (coalesced) values are divided by it, in the sum
        dtype, before the sum (DDP's averaging). error: the caller's reason
        to refuse this rank's input (e.g. a COO index out of range in one of
        its dimensions), or None: it travels as the call's error code and
        every rank raises ValueError (this rank with the whole text, the
        others with its first 48 bytes).
        """
        return self._run(name, rows, ids, values, sum_order, wire_dtype, divisor, error=error)

    def allreduce_rows_(self, name, matrix, *, sum_order="rank", wire_dtype=None, divisor=None,
                        error=None):
        """The global sum of a dense [rows, width] tensor (e.g. a DDP bucket's
        view), in place: only its non-zero rows travel. sum_order "rank", or
        the (first element, start rank) steps of the C++ scheme's "sum_order"
        option (zen.torch's _ring_sum_order): from a step's first element
        (row-major index into the matrix) on, an element is summed starting
        at `start` and going down the ranks cyclically (start, start - 1,
        ...), each rank's value added to the sum so far: Gloo's ring
        allreduce order, so that float32 sums are the ring's bit for bit
        (ranks whose row is zero are skipped, as in the C++ scheme).
        divisor, error: as allreduce_sparse's."""
        if matrix.dim() != 2:
            matrix_view = matrix.view(matrix.shape[0] if matrix.dim() else 1, -1)
        else:
            matrix_view = matrix
        rows, width = matrix_view.shape
        ids = _nonzero_rows(matrix_view)
        values = torch.index_select(matrix_view, 0, ids)
        out_ids, out_values = self._run(name, rows, ids, values, sum_order, wire_dtype, divisor,
                                        coalesced=True, error=error)
        matrix_view.index_copy_(0, out_ids, out_values)
        return matrix

    # -- the algorithm ---------------------------------------------------
    def _run(self, name, rows, ids, values, sum_order, wire_dtype, divisor, coalesced=False,
             error=None):
        n = self.world_size
        r = self.rank
        device = values.device if isinstance(values, torch.Tensor) else torch.device("cpu")
        stats = {"world": n, "rows": rows, "local_rows": 0, "pushed_rows": 0, "served_rows": 0,
                 "result_rows": 0, "meta_bytes_sent": 0, "meta_bytes_recv": 0,
                 "push_bytes_sent": 0, "push_bytes_recv": 0, "pull_bytes_sent": 0,
                 "pull_bytes_recv": 0, "pull_encodings": {}}
        # Local validation: the error code travels in the record.
        caller_error, error, detail = error, 0, ""
        if caller_error is not None:
            error, detail = _E_CALLER, str(caller_error)
        dtype_code = _DTYPES.get(getattr(values, "dtype", None), 0)
        width = 0
        if error:
            pass
        elif not isinstance(values, torch.Tensor) or not isinstance(ids, torch.Tensor):
            error, detail = _E_SHAPE, "ids and values must be torch tensors"
        elif dtype_code == 0:
            error, detail = _E_DTYPE, f"values dtype {values.dtype}"
        elif ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
            error, detail = _E_IDS_DTYPE, f"ids dtype {ids.dtype}"
        elif values.dim() != 2 or ids.dim() != 1 or ids.shape[0] != values.shape[0] \
                or values.shape[1] < 1:
            error, detail = _E_SHAPE, f"ids {list(ids.shape)}, values {list(values.shape)}"
        if isinstance(values, torch.Tensor) and values.dim() == 2:
            width = values.shape[1]
        if not isinstance(rows, int) or not 1 <= rows <= _MAX_ROWS:
            if not error:
                error, detail = _E_ROWS, f"rows {rows}"
            rows_field = -1
        else:
            rows_field = rows
        if not error and rows_field > 0 and width > 0 and rows_field * width >= 1 << 63:
            error, detail = _E_SIZE, f"rows {rows} x width {width}"
        sum_dtype = torch.float64 if dtype_code == 2 else torch.float32
        in_dtype = values.dtype if dtype_code else torch.float32
        if wire_dtype is None:
            wire = in_dtype
        else:
            wire = wire_dtype
            if (wire not in _DTYPES or (dtype_code and wire.itemsize > in_dtype.itemsize)) \
                    and not error:
                error, detail = _E_WIRE, f"wire_dtype {wire_dtype} for {in_dtype} values"
        order = _check_order(sum_order, n)
        if order is None and not error:
            error, detail = _E_ORDER, f"sum_order {sum_order!r}"
        if divisor is not None and not error:
            try:
                d = float(divisor)
                if d == 0 or d != d or d in (float("inf"), float("-inf")):
                    raise ValueError
            except (TypeError, ValueError):
                error, detail = _E_DIVISOR, f"divisor {divisor!r}"
        name_hash, name_words = _name_words(name)
        seed = self._seed_for(device, name)

        good = not error
        owner = self._owner(rows, width, n, seed) if good else None
        k = ids.shape[0] if good else 0
        if good:
            ids = ids.to(device=device, dtype=torch.int64)
            if k:
                id_min, id_max = torch.aminmax(ids)
                bad = ((id_min < 0) | (id_max >= rows)).to(torch.int64) * _E_IDS_RANGE
            else:
                id_min = id_max = bad = torch.zeros((), dtype=torch.int64, device=device)
            # Keys of the local rows (clamped ids for a bad call: its
            # counts are never used, every rank raises).
            safe = ids.clamp(0, rows - 1) if k else ids
            # The local rows in key order, gathered once: `source` maps the
            # unique ids (ascending) to the values' rows, or is None where
            # the unique ids are the rows of `summed`.
            source, summed = None, values
            if coalesced or k == 0:
                uniq = safe
            else:
                uniq, inverse = torch.unique(safe, sorted=True, return_inverse=True)
                if uniq.shape[0] == k:
                    # No repeats: inverse is a permutation; its inverse
                    # gathers the values in id order (int64 work only).
                    source = torch.empty_like(inverse)
                    source[inverse] = torch.arange(k, dtype=torch.int64, device=device)
                else:
                    # Repeats summed in input order: index_add_ on CPU adds
                    # the rows one after another; on CUDA index_put_ with
                    # accumulate sorts the indices stably and adds each
                    # index's values in that order (no atomics).
                    summed = torch.zeros((uniq.shape[0], width), dtype=sum_dtype, device=device)
                    if device.type == "cpu":
                        summed.index_add_(0, inverse, values.to(sum_dtype))
                    else:
                        summed.index_put_((inverse,), values.to(sum_dtype), accumulate=True)
            keys = owner.keys(uniq)
            keys, order_idx = torch.sort(keys)
            if source is not None:
                order_idx = torch.index_select(source, 0, order_idx)
            local = torch.index_select(summed, 0, order_idx).to(sum_dtype)
            if divisor is not None:
                local = local / float(divisor)
            if wire != sum_dtype:
                # Each rank's contribution is rounded to the wire once, its
                # owner's own part too: every rank's result is then the same
                # function of the ranks' rounded rows, whoever owns them.
                local = local.to(wire).to(sum_dtype)
            counts = owner.counts_of_sorted_keys(keys)
        else:
            id_min = id_max = bad = torch.zeros((), dtype=torch.int64, device=device)
            counts = torch.zeros(n, dtype=torch.int64, device=device)
        # The record: the counts, then rows, width, name hash, sum order
        # hash and one packed word (dtype | wire dtype << 8 | error << 16 |
        # divisor given << 24). Only when something is wrong do the ranks
        # exchange the details (id range, name, error text): the common
        # call moves (n + 5) x 8 bytes per peer.
        packed = dtype_code | _DTYPES.get(wire, 0) << 8 | error << 16 | \
            (1 if divisor is not None else 0) << 24
        meta_host = torch.tensor([rows_field, width, name_hash,
                                  _order_hash(order) if order is not None else -1, packed],
                                 dtype=torch.int64)
        meta = (meta_host.pin_memory().to(device, non_blocking=True) if device.type == "cuda"
                else meta_host)
        if not error:
            meta[4] = meta[4] + (bad << 16)
        record = torch.cat([counts.to(torch.int64), meta])
        table = self._all_gather(record, name, "the counts exchange").tolist()  # host read 1 of 2
        rec_bytes = record.numel() * 8
        stats["meta_bytes_sent"] += rec_bytes * (n - 1)
        stats["meta_bytes_recv"] += rec_bytes * (n - 1)
        metas = [row[n:] for row in table]
        if any(m[4] >> 16 & 0xFF for m in metas) or any(m != metas[0] for m in metas):
            details = torch.cat([torch.stack([id_min, id_max]).to(torch.int64),
                                 _device_tensor(name_words + _text_words(detail, 6), device)])
            got = self._all_gather(details, name, "the error details").tolist()
            self.bytes_sent += details.numel() * 8 * (n - 1)
            self.bytes_received += details.numel() * 8 * (n - 1)
            full = []
            for m, d in zip(metas, got):
                # rows, width, dtype, name hash, error, wire, order, id min, id max,
                # name x4, divisor, text x6
                full.append([m[0], m[1], m[4] & 0xFF, m[2], m[4] >> 16 & 0xFF, m[4] >> 8 & 0xFF,
                             m[3], d[0], d[1]] + d[2:6] + [m[4] >> 24 & 0xFF] + d[6:12])
            self._check_records(full, name, detail)

        C = [row[:n] for row in table]  # C[q][j]: rows rank q sends server j
        mine = C[r]
        offsets = [0]
        for c in mine:
            offsets.append(offsets[-1] + c)
        stats["local_rows"] = offsets[-1]
        stats["pushed_rows"] = offsets[-1] - mine[r]
        wire_isz = wire.itemsize
        compact = width == 1 and order == "rank"

        # Push: per server, positions then values (wire width).
        def push_enc(q, j):
            return _choose(C[q][j], owner.domain_size(j), compact and
                           owner.domain_size(j) <= _COO32_DOMAIN)

        pieces, send_sizes = [], []
        positions_of = []
        for j in range(n):
            lo, hi = offsets[j], offsets[j + 1]
            pos = keys[lo:hi] - owner.start(j)
            positions_of.append(pos)
            if j == r or hi == lo:
                send_sizes.append(0)
                continue
            enc = push_enc(r, j)
            pieces.append(_encode_index(pos, enc, owner.domain_size(j)))
            pieces.append(local[lo:hi].to(wire).contiguous().view(torch.uint8).view(-1))
            send_sizes.append(_index_bytes(enc, hi - lo, owner.domain_size(j))
                              + (hi - lo) * width * wire_isz)
        recv_sizes = [0 if q == r or C[q][r] == 0 else
                      _index_bytes(push_enc(q, r), C[q][r], owner.domain_size(r))
                      + C[q][r] * width * wire_isz for q in range(n)]
        if sum(sum(row[c] for c in range(n) if c != q) for q, row in enumerate(C)) > 0:
            send = torch.cat(pieces) if pieces else torch.empty(0, dtype=torch.uint8,
                                                                  device=device)
            recv = self._all_to_all(send, send_sizes, recv_sizes, name, "the push")
        else:
            recv = torch.empty(0, dtype=torch.uint8, device=device)
        stats["push_bytes_sent"] = sum(send_sizes)
        stats["push_bytes_recv"] = sum(recv_sizes)

        # Aggregation on this server: parts in rank order.
        dom = owner.domain_size(r)
        part_pos, part_val = [], []
        at = 0
        for q in range(n):
            if q == r:
                part_pos.append(positions_of[r])
                part_val.append(local[offsets[r]:offsets[r + 1]])
                continue
            c = C[q][r]
            if c == 0:
                part_pos.append(torch.empty(0, dtype=torch.int64, device=device))
                part_val.append(torch.empty((0, width), dtype=sum_dtype, device=device))
                continue
            enc = push_enc(q, r)
            ib = _index_bytes(enc, c, dom)
            part_pos.append(_decode_index(recv[at:at + ib], enc, c, dom))
            part_val.append(_values_at(recv, at + ib, c, width, wire, sum_dtype))
            at += ib + c * width * wire_isz
        all_pos = torch.cat(part_pos)
        served_pos, inv = torch.unique(all_pos, sorted=True, return_inverse=True)
        U = served_pos.shape[0]
        sums = self._aggregate(part_pos, part_val, inv, U, width, sum_dtype, order, owner, r, n,
                               device)
        grouped = width > 1 and order == "rank"
        served_record = torch.zeros(n + 1, dtype=torch.int64, device=device)
        if grouped:
            # Contributors: rows only one rank contributed (their rank), else -1.
            part_rank = torch.repeat_interleave(
                torch.arange(n, dtype=torch.int64, device=device),
                _device_tensor([p.shape[0] for p in part_pos], device),
                output_size=inv.shape[0])
            ncontrib = torch.zeros(U, dtype=torch.int64, device=device)
            ncontrib.index_add_(0, inv, torch.ones_like(inv))
            sole_of = torch.full((U,), -1, dtype=torch.int64, device=device)
            sole_of[inv] = part_rank  # any writer will do where the count is 1
            sole_of = torch.where(ncontrib == 1, sole_of, -1)
            # Sole rows per rank (no host read of their own: they ride the
            # record; ungrouped pulls send every rank every row: zeros).
            served_record.index_add_(0, sole_of + 1, torch.ones_like(sole_of))
        served_record[0] = U
        # Every rank's sums as the wire carries them (the owner's own copy too).
        if wire != sum_dtype:
            sums = sums.to(wire).to(sum_dtype)
        S = self._all_gather(served_record, name, "the served counts").tolist()  # host read 2
        stats["meta_bytes_sent"] += served_record.numel() * 8 * (n - 1)
        stats["meta_bytes_recv"] += served_record.numel() * 8 * (n - 1)
        stats["served_rows"] = U

        def pull_count(j, q):  # rows server j sends rank q
            return S[j][0] - (S[j][1 + q] if grouped else 0)

        def pull_enc(j, q):
            return _choose(pull_count(j, q), owner.domain_size(j))

        pieces, send_sizes = [], []
        sums_wire = sums.to(wire)
        whole = {}  # encoding -> the bytes of every served row (the same for each such rank)
        for q in range(n):
            c = pull_count(r, q)
            if q == r or c == 0:
                send_sizes.append(0)
                continue
            enc = pull_enc(r, q)
            if grouped and S[r][1 + q] > 0:
                keep = (sole_of != q).nonzero().view(-1)
                pieces.append(_encode_index(torch.index_select(served_pos, 0, keep), enc, dom))
                pieces.append(torch.index_select(sums_wire, 0, keep).view(torch.uint8).view(-1))
            else:
                if enc not in whole:
                    whole[enc] = (_encode_index(served_pos, enc, dom),
                                  sums_wire.contiguous().view(torch.uint8).view(-1))
                pieces.extend(whole[enc])
            send_sizes.append(_index_bytes(enc, c, dom) + c * width * wire_isz)
            stats["pull_encodings"][_ENCODING_NAMES[enc]] = \
                stats["pull_encodings"].get(_ENCODING_NAMES[enc], 0) + 1
        recv_sizes = [0 if j == r or pull_count(j, r) == 0 else
                      _index_bytes(pull_enc(j, r), pull_count(j, r), owner.domain_size(j))
                      + pull_count(j, r) * width * wire_isz for j in range(n)]
        if any(pull_count(j, q) for j in range(n) for q in range(n) if j != q):
            send = torch.cat(pieces) if pieces else torch.empty(0, dtype=torch.uint8,
                                                                  device=device)
            recv = self._all_to_all(send, send_sizes, recv_sizes, name, "the pull")
        else:
            recv = torch.empty(0, dtype=torch.uint8, device=device)
        stats["pull_bytes_sent"] = sum(send_sizes)
        stats["pull_bytes_recv"] = sum(recv_sizes)

        # Decode: keys of every server's rows, then ids, sorted.
        out_keys, out_vals = [], []
        pulled = []  # the other servers' keys, ascending (server j's range precedes j + 1's)
        at = 0
        for j in range(n):
            if j == r:
                out_keys.append(served_pos + owner.start(j))
                out_vals.append(sums)
                continue
            c = pull_count(j, r)
            if c:
                d = owner.domain_size(j)
                enc = pull_enc(j, r)
                ib = _index_bytes(enc, c, d)
                pulled.append(_decode_index(recv[at:at + ib], enc, c, d) + owner.start(j))
                out_keys.append(pulled[-1])
                out_vals.append(_values_at(recv, at + ib, c, width, wire, sum_dtype))
                at += ib + c * width * wire_isz
        if grouped and any(S[j][1 + r] for j in range(n) if j != r):
            # This rank's sole rows: the keys it pushed that no pull brought
            # back; their values are its own. The pulled keys ascend, so one
            # search finds them at every server at once.
            lo, hi = offsets[r], offsets[r + 1]
            pushed = torch.cat([keys[:lo], keys[hi:]])
            if pulled:
                got = torch.cat(pulled)
                at_ = torch.searchsorted(got, pushed).clamp(max=got.numel() - 1)
                left_out = (torch.index_select(got, 0, at_) != pushed).nonzero().view(-1)
            else:
                left_out = torch.arange(pushed.numel(), device=device)
            out_keys.append(torch.index_select(pushed, 0, left_out))
            out_vals.append(torch.index_select(local, 0, left_out + (left_out >= lo) * (hi - lo)))
        keys_all = torch.cat(out_keys)
        vals_all = torch.cat(out_vals)
        ids_all = owner.ids_of_keys(keys_all)
        ids_sorted, perm = torch.sort(ids_all)
        vals_sorted = torch.index_select(vals_all, 0, perm).to(in_dtype)
        stats["result_rows"] = ids_sorted.shape[0]
        stats["bytes_sent"] = stats["meta_bytes_sent"] + stats["push_bytes_sent"] + \
            stats["pull_bytes_sent"]
        stats["bytes_recv"] = stats["meta_bytes_recv"] + stats["push_bytes_recv"] + \
            stats["pull_bytes_recv"]
        self.bytes_sent += stats["bytes_sent"]
        self.bytes_received += stats["bytes_recv"]
        self.last_stats = stats
        return ids_sorted, vals_sorted

    def _aggregate(self, part_pos, part_val, inv, U, width, sum_dtype, order, owner, r, n, device):
        """This server's sums of its parts (one per rank), in the sum order."""
        bounds, at = [], 0
        for p in part_pos:
            bounds.append((at, at + p.shape[0]))
            at += p.shape[0]
        if order == "rank" and device.type == "cpu":
            # index_add_ on CPU adds the rows one after another in index
            # order, and -0.0 is the identity of IEEE addition (-0.0 + x is
            # x bit for bit, +-0 included): from -0.0, the parts added in
            # rank order are the first contribution assigned, the next ones
            # added, in one pass per part (every served row has one).
            sums = torch.full((U, width), -0.0, dtype=sum_dtype, device=device)
            for q in range(n):
                lo, hi = bounds[q]
                if hi > lo:
                    sums.index_add_(0, inv[lo:hi], part_val[q])
            return sums
        sums = torch.zeros((U, width), dtype=sum_dtype, device=device)
        if order == "rank":
            seen = torch.zeros(U, dtype=torch.bool, device=device)
            # Ascending rank order, each rank's rows one step (unique
            # indices within a step: deterministic on every device); a
            # row's first contribution is assigned, the next ones added.
            for q in range(n):
                lo, hi = bounds[q]
                if hi == lo:
                    continue
                idx = inv[lo:hi]
                cur = sums[idx]
                sums[idx] = torch.where(seen[idx].unsqueeze(1), cur + part_val[q], part_val[q])
                seen[idx] = True
            return sums
        # A ring order: per element its own start rank; the contributions
        # laid out [n, U, width], then n steps down the ranks cyclically.
        contrib = torch.zeros((n, U, width), dtype=sum_dtype, device=device)
        present = torch.zeros((n, U), dtype=torch.bool, device=device)
        for q in range(n):
            lo, hi = bounds[q]
            if hi > lo:
                contrib[q, inv[lo:hi]] = part_val[q]
                present[q, inv[lo:hi]] = True
        served_pos = torch.empty(U, dtype=torch.int64, device=device)
        served_pos[inv] = torch.cat(part_pos)
        ids = owner.ids_of_keys(served_pos + owner.start(r))
        elems = ids.unsqueeze(1) * width + torch.arange(width, device=device)
        firsts = _device_tensor([a for a, _ in order], device)
        starts = _device_tensor([b for _, b in order], device)
        start = starts[torch.searchsorted(firsts, elems, right=True) - 1]
        present_e = present.unsqueeze(2).expand(n, U, width)
        seen_e = torch.zeros((U, width), dtype=torch.bool, device=device)
        for step in range(n):
            q = ((start - step) % n).unsqueeze(0)
            v = contrib.gather(0, q).squeeze(0)
            p = present_e.gather(0, q).squeeze(0)
            sums = torch.where(p, torch.where(seen_e, v + sums, v), sums)
            seen_e = seen_e | p
        return sums

    def _check_records(self, metas, name, own_detail=""):
        """Raises on every rank: a rank's bad input (ValueError), then any
        metadata disagreement (zen.MismatchError)."""
        if metas[0][3] != _name_words(name)[0]:
            name = _words_name(metas[0][9:13])  # rank 0's, so that every rank says the same
        for q, m in enumerate(metas):
            code = m[4]
            if code:
                text = _ERROR_TEXT.get(code, f"error {code}")
                if code == _E_IDS_RANGE:
                    text += f" (ids span [{m[7]}, {m[8]}], rows {m[0]})"
                sent = own_detail if q == self.rank else _words_name(m[14:20])
                own = f": {sent}" if sent else ""
                raise ValueError(f"zen: rank {q}: tensor '{name}': {text}{own} "
                                 f"(raised on every rank, here rank {self.rank})")
        fields = [(0, "rows"), (1, "width"), (2, "dtype"), (5, "wire dtype"), (6, "sum order"),
                  (3, "name"), (13, "divisor")]
        base = metas[0]
        for q, m in enumerate(metas[1:], start=1):
            for i, label in fields:
                if m[i] != base[i]:
                    a, b = base[i], m[i]
                    if i in (2, 5):
                        a, b = _DTYPE_NAMES.get(a, a), _DTYPE_NAMES.get(b, b)
                    if i == 3:
                        a, b = repr(_words_name(base[9:13])), repr(_words_name(m[9:13]))
                    if i == 6:
                        a = "rank" if a == 0 else f"ring steps #{a:x}"
                        b = "rank" if b == 0 else f"ring steps #{b:x}"
                    if i == 13:
                        a, b = ("given" if a else "none"), ("given" if b else "none")
                    raise _zen_pkg.MismatchError(
                        f"zen: tensor '{name}': ranks disagree on {label}: rank 0 has {a}, "
                        f"rank {q} has {b} (raised on every rank, here rank {self.rank})")
