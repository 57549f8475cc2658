"""BLOOM_FILTER field of a skipping index, byte compatible with the reference Flint format.

For every source file the index stores one *classic* bloom filter over the ``xxhash64`` values of
the indexed column (nulls skipped). The stored bytes (before the index's base64) are:

=======  ================  ==================================================================
offset   size              field (all integers big-endian, two's complement)
=======  ================  ==================================================================
0        4                 version, always 1
4        4                 number of hash functions ``k``
8        4                 number of 64-bit words ``w``
12       8 * w             the words; filter bit ``i`` is bit ``i % 64`` of word ``i // 64``
=======  ================  ==================================================================

Hashing an item (a signed 64-bit integer): ``h1 = murmur3_32(item, seed=0)`` and
``h2 = murmur3_32(item, seed=h1)``, where murmur3_32 is the x86 32-bit MurmurHash3 of the item's
eight little-endian bytes. Probe ``i`` (1..k) is the 32-bit wrapped sum ``h1 + i * h2``, bit-inverted
when negative, modulo ``64 * w``. The modulus is the *allocated* bit count, not the requested one,
so a reader needs nothing but the bytes above.

Sizing for ``n`` expected items and false-positive probability ``p``:
``bits = floor(-n ln p / (ln 2)^2)``, ``w = ceil(bits / 64)``,
``k = max(1, round_half_up(bits / n * ln 2))``.

Adaptive mode (the default) keeps ``num_candidates`` filters of the same ``p`` sized for
1024, 2048, 4096, ... items, and counts the cardinality as the number of insertions that changed
at least one bit of the largest candidate. The *best* candidate is the first one sized for at least
that many items (the largest if none is). Each insertion only goes into the best candidate and the
larger ones, and only the best candidate is stored, in exactly the classic layout above: there is
no adaptive header in the index. (The cardinality-plus-all-candidates layout of
:meth:`AdaptiveBloomFilter.serialize` is the reference's intermediate aggregation state only.)

Since the best candidate only moves towards larger filters, the final best one has seen every
insertion; :func:`build_bloom_filter` uses that to fill just the largest candidate (to count) and the
best one, instead of up to ``num_candidates`` filters per value.
"""

from __future__ import annotations

import base64
import math
import re
import struct
import sys
from array import array
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final

__all__ = [
    "ADAPTIVE_KEY",
    "DEFAULT_ADAPTIVE",
    "DEFAULT_FPP",
    "DEFAULT_NUM_CANDIDATES",
    "DEFAULT_NUM_ITEMS",
    "FPP_KEY",
    "INITIAL_EXPECTED_NUM_ITEMS",
    "MAX_NUM_CANDIDATES",
    "NUM_CANDIDATES_KEY",
    "NUM_ITEMS_KEY",
    "VERSION",
    "AdaptiveBloomFilter",
    "BloomFilterParams",
    "ClassicBloomFilter",
    "EncodedProbe",
    "build_bloom_filter",
    "deserialize",
    "might_contain",
    "murmur3_hash_long",
    "optimal_num_of_bits",
    "optimal_num_of_hash_functions",
    "parse_params",
]

VERSION: Final = 1
"""The only serialization version of the classic filter."""

ADAPTIVE_KEY: Final = "adaptive"
NUM_ITEMS_KEY: Final = "num_items"
FPP_KEY: Final = "fpp"
NUM_CANDIDATES_KEY: Final = "num_candidates"

DEFAULT_ADAPTIVE: Final = True
DEFAULT_NUM_ITEMS: Final = 10000
DEFAULT_FPP: Final = 0.03
DEFAULT_NUM_CANDIDATES: Final = 10
INITIAL_EXPECTED_NUM_ITEMS: Final = 1024
"""Expected items of the smallest adaptive candidate; each next candidate doubles it."""

_INT32_MAX: Final = 2**31 - 1
# Candidate ``i`` is sized for 1024 * 2**i items, a 32-bit int in the reference: 21 candidates are
# the most that do not overflow it.
MAX_NUM_CANDIDATES: Final = 21

_M32: Final = 0xFFFFFFFF
_M64: Final = 0xFFFFFFFFFFFFFFFF
_SIGN32: Final = 0x80000000
_C1: Final = 0xCC9E2D51
_C2: Final = 0x1B873593
_HEADER: Final = struct.Struct(">iii")
_INT: Final = struct.Struct(">i")
_LN2: Final = math.log(2)
_JAVA_INT_RE: Final = re.compile(r"[+-]?[0-9]+")


# -- hashing -----------------------------------------------------------------------------------


def _mix_k1(k1: int) -> int:
    k1 = (k1 * _C1) & _M32
    k1 = ((k1 << 15) | (k1 >> 17)) & _M32
    return (k1 * _C2) & _M32


def _mix_h1(h1: int, k1: int) -> int:
    h1 ^= k1
    h1 = ((h1 << 13) | (h1 >> 19)) & _M32
    return (h1 * 5 + 0xE6546B64) & _M32


def _fmix(h1: int, length: int) -> int:
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _M32
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _M32
    return h1 ^ (h1 >> 16)


def _to_signed32(value: int) -> int:
    return value - (1 << 32) if value & _SIGN32 else value


def _check_long(value: int) -> int:
    """The item as an unsigned 64-bit pattern; signed and unsigned 64-bit inputs are both accepted."""
    if not -(1 << 63) <= value <= _M64:
        raise ValueError(f"bloom filter items are 64-bit integers, got {value}")
    return value & _M64


def murmur3_hash_long(value: int, seed: int = 0) -> int:
    """x86 32-bit MurmurHash3 of a 64-bit integer (low half first), as a signed 32-bit int."""
    bits = _check_long(value)
    h1 = _mix_h1(seed & _M32, _mix_k1(bits & _M32))
    h1 = _mix_h1(h1, _mix_k1(bits >> 32))
    return _to_signed32(_fmix(h1, 8))


def _hash_pair(value: int) -> int:
    """``h1`` and ``h2`` of an item (unsigned 32-bit each) packed as ``h1 << 32 | h2``."""
    bits = _check_long(value)
    # The mixed input words do not depend on the seed, so both hashes share them.
    k_low = _mix_k1(bits & _M32)
    k_high = _mix_k1(bits >> 32)
    h1 = _fmix(_mix_h1(_mix_h1(0, k_low), k_high), 8)
    h2 = _fmix(_mix_h1(_mix_h1(h1, k_low), k_high), 8)
    return (h1 << 32) | h2


def _probe_indexes(pair: int, num_hash_functions: int, bit_size: int) -> list[int]:
    """Bit indexes of one item: ``h1 + i * h2`` wrapped to 32 bits, inverted when negative, mod size."""
    h2 = pair & _M32
    combined = pair >> 32
    indexes = []
    for _ in range(num_hash_functions):
        combined = (combined + h2) & _M32
        indexes.append((combined ^ _M32 if combined & _SIGN32 else combined) % bit_size)
    return indexes


# Bulk hashing works on many items at once ("SIMD within a register"): a chunk of items becomes one
# big int with a 64-bit lane per item, each lane holding a 32-bit value. A 32-bit value times a 32-bit
# constant fits its lane, left shifts stay inside it, and masking every lane back to 32 bits after
# each step drops what multiplications or right shifts carried in or out, so every murmur step is a
# handful of big-int operations per chunk instead of per item. This is about ten times faster than
# hashing item by item, which matters for a file with a million distinct values.

_CHUNK: Final = 1 << 14
_LANE_MASK_BYTES: Final = b"\xff\xff\xff\xff\x00\x00\x00\x00"
assert array("Q").itemsize == 8


def _lanes_of(words: array[int]) -> int:
    if sys.byteorder == "big":
        words = array(words.typecode, words)
        words.byteswap()
    return int.from_bytes(words.tobytes(), "little")


def _words_of(lanes: int, count: int) -> array[int]:
    words: array[int] = array("Q")
    words.frombytes(lanes.to_bytes(8 * count, "little"))
    if sys.byteorder == "big":
        words.byteswap()
    return words


def _lane_masks(count: int) -> tuple[int, int]:
    """Per lane ``0xFFFFFFFF`` and per lane ``1``, for ``count`` lanes."""
    mask = int.from_bytes(_LANE_MASK_BYTES * count, "little")
    return mask, mask // _M32


def _hash_chunk(items: list[int]) -> array[int]:
    try:
        words: array[int] = array("q", items)
    except OverflowError:
        words = array("Q", [_check_long(v) for v in items])
    count = len(words)
    lanes = _lanes_of(words)
    mask, ones = _lane_masks(count)

    def mix_k1(k1: int) -> int:
        k1 = (k1 * _C1) & mask
        k1 = ((k1 << 15) | (k1 >> 17)) & mask
        return (k1 * _C2) & mask

    def mix_h1(h1: int, k1: int) -> int:
        h1 ^= k1
        h1 = ((h1 << 13) | (h1 >> 19)) & mask
        return (h1 * 5 + 0xE6546B64 * ones) & mask

    def fmix(h1: int) -> int:
        h1 ^= 8 * ones
        h1 ^= (h1 >> 16) & mask
        h1 = (h1 * 0x85EBCA6B) & mask
        h1 ^= (h1 >> 13) & mask
        h1 = (h1 * 0xC2B2AE35) & mask
        return h1 ^ ((h1 >> 16) & mask)

    k_low = mix_k1(lanes & mask)
    k_high = mix_k1((lanes >> 32) & mask)
    h1 = fmix(mix_h1(mix_h1(0, k_low), k_high))
    h2 = fmix(mix_h1(mix_h1(h1, k_low), k_high))
    return _words_of((h1 << 32) | h2, count)


def _hash_pairs(items: list[int]) -> array[int]:
    """Packed hash pairs (as :func:`_hash_pair`) of many items."""
    pairs: array[int] = array("Q")
    for start in range(0, len(items), _CHUNK):
        pairs.extend(_hash_chunk(items[start : start + _CHUNK]))
    return pairs


def _distinct_pairs(values: Iterable[int | None]) -> array[int]:
    """Hash pairs of the distinct non-null items in first-seen order.

    Re-inserting an item never changes a bit of a filter that already holds it, so dropping
    duplicates changes neither the bits nor the adaptive cardinality count.
    """
    return _hash_pairs(list(dict.fromkeys(v for v in values if v is not None)))


def _probe_chunks(pairs: array[int], num_hash_functions: int) -> Iterator[list[array[int]]]:
    """Per chunk of items, one array per probe of the non-negative combined hashes (before the modulus)."""
    for start in range(0, len(pairs), _CHUNK):
        chunk = pairs[start : start + _CHUNK]
        count = len(chunk)
        lanes = _lanes_of(chunk)
        mask, ones = _lane_masks(count)
        h2 = lanes & mask
        combined = (lanes >> 32) & mask
        probes = []
        for _ in range(num_hash_functions):
            combined = (combined + h2) & mask
            negative = (combined >> 31) & ones
            probes.append(_words_of(combined ^ (negative * _M32), count))
        yield probes


def _fill(data: bytearray, pairs: array[int], num_hash_functions: int) -> None:
    """Set every item's bits (order does not matter when nothing is counted)."""
    bit_size = len(data) * 8
    for probes in _probe_chunks(pairs, num_hash_functions):
        for probe in probes:
            for combined in probe:
                index = combined % bit_size
                data[(index >> 3) ^ 7] |= 1 << (index & 7)


def _fill_counting(data: bytearray, pairs: array[int], num_hash_functions: int) -> int:
    """Insert the items in order; returns how many of them set at least one new bit."""
    bit_size = len(data) * 8
    changed_count = 0
    for probes in _probe_chunks(pairs, num_hash_functions):
        for item_probes in zip(*probes, strict=True):
            changed = False
            for combined in item_probes:
                index = combined % bit_size
                pos = (index >> 3) ^ 7
                mask = 1 << (index & 7)
                byte = data[pos]
                if not byte & mask:
                    data[pos] = byte | mask
                    changed = True
            if changed:
                changed_count += 1
    return changed_count


# -- sizing ------------------------------------------------------------------------------------


def _round_half_up(x: float) -> int:
    """Round to nearest, ties towards +infinity, without the ``floor(x + 0.5)`` rounding slip."""
    floor = math.floor(x)
    return floor + 1 if x - floor >= 0.5 else floor


def optimal_num_of_bits(n: int, p: float) -> int:
    """Requested bit count for ``n`` items at false-positive probability ``p`` (truncated)."""
    return int(-n * math.log(p) / (_LN2 * _LN2))


def optimal_num_of_hash_functions(n: int, m: int) -> int:
    """Hash function count for ``n`` items in ``m`` requested bits."""
    return max(1, _round_half_up(m / n * _LN2))


def _num_words(num_bits: int) -> int:
    if num_bits <= 0:
        raise ValueError(f"bloom filter needs a positive number of bits, got {num_bits}")
    num_words = -(-num_bits // 64)
    if num_words > _INT32_MAX:
        raise ValueError(f"bloom filter of {num_bits} bits is too large")
    return num_words


# -- parameters --------------------------------------------------------------------------------


@dataclass(frozen=True)
class BloomFilterParams:
    """The filter's parameters; ``num_items`` only matters when not adaptive, ``num_candidates`` when adaptive."""

    adaptive: bool = DEFAULT_ADAPTIVE
    num_items: int = DEFAULT_NUM_ITEMS
    fpp: float = DEFAULT_FPP
    num_candidates: int = DEFAULT_NUM_CANDIDATES

    def __post_init__(self) -> None:
        if not (math.isfinite(self.fpp) and 0.0 < self.fpp < 1.0):
            raise ValueError(f"bloom filter {FPP_KEY} must be between 0 and 1 (exclusive), got {self.fpp}")
        if self.adaptive:
            if not 1 <= self.num_candidates <= MAX_NUM_CANDIDATES:
                raise ValueError(
                    f"bloom filter {NUM_CANDIDATES_KEY} must be between 1 and {MAX_NUM_CANDIDATES}, "
                    f"got {self.num_candidates}"
                )
            for i in range(self.num_candidates):
                _num_words(optimal_num_of_bits(INITIAL_EXPECTED_NUM_ITEMS << i, self.fpp))
        else:
            if not 1 <= self.num_items <= _INT32_MAX:
                raise ValueError(f"bloom filter {NUM_ITEMS_KEY} must be a positive 32-bit int, got {self.num_items}")
            num_bits = optimal_num_of_bits(self.num_items, self.fpp)
            if num_bits <= 0:
                raise ValueError(
                    f"bloom filter {NUM_ITEMS_KEY}={self.num_items} with {FPP_KEY}={self.fpp} gives no bits"
                )
            _num_words(num_bits)

    def create(self) -> ClassicBloomFilter | AdaptiveBloomFilter:
        """An empty filter of these parameters."""
        if self.adaptive:
            return AdaptiveBloomFilter(self.num_candidates, self.fpp)
        return ClassicBloomFilter.create(self.num_items, self.fpp)


def _parse_int(params: Mapping[str, str], key: str, default: int) -> int:
    text = params.get(key)
    if text is None:
        return default
    if not isinstance(text, str) or not _JAVA_INT_RE.fullmatch(text):
        raise ValueError(f"bloom filter parameter {key} must be an integer, got {text!r}")
    value = int(text)
    if not -(2**31) <= value <= _INT32_MAX:
        raise ValueError(f"bloom filter parameter {key} is out of the 32-bit int range: {text!r}")
    return value


def parse_params(params: Mapping[str, str]) -> BloomFilterParams:
    """Parameters from the index metadata's string map; missing keys take the defaults.

    Unlike the reference, which reads any ``adaptive`` value but ``true`` as false, anything but
    ``true``/``false`` (any case) is rejected.
    """
    adaptive_text = params.get(ADAPTIVE_KEY)
    if adaptive_text is None:
        adaptive = DEFAULT_ADAPTIVE
    elif isinstance(adaptive_text, str) and adaptive_text.lower() in ("true", "false"):
        adaptive = adaptive_text.lower() == "true"
    else:
        raise ValueError(f"bloom filter parameter {ADAPTIVE_KEY} must be true or false, got {adaptive_text!r}")

    fpp_text = params.get(FPP_KEY)
    if fpp_text is None:
        fpp = DEFAULT_FPP
    else:
        try:
            fpp = float(fpp_text)
        except (TypeError, ValueError):
            raise ValueError(f"bloom filter parameter {FPP_KEY} must be a number, got {fpp_text!r}") from None

    return BloomFilterParams(
        adaptive=adaptive,
        num_items=_parse_int(params, NUM_ITEMS_KEY, DEFAULT_NUM_ITEMS) if not adaptive else DEFAULT_NUM_ITEMS,
        fpp=fpp,
        num_candidates=(
            _parse_int(params, NUM_CANDIDATES_KEY, DEFAULT_NUM_CANDIDATES) if adaptive else DEFAULT_NUM_CANDIDATES
        ),
    )


# -- classic filter ----------------------------------------------------------------------------


class ClassicBloomFilter:
    """A bloom filter whose bits are kept as the serialized big-endian words.

    Keeping the bytes in their stored order makes serialization a plain copy: filter bit ``i`` lives
    in byte ``(i >> 3) ^ 7`` of the word area (the word's bytes are most significant first), at bit
    ``i & 7`` of that byte.
    """

    __slots__ = ("_data", "num_hash_functions")

    def __init__(
        self, num_hash_functions: int, num_words: int, data: bytes | bytearray | memoryview | None = None
    ) -> None:
        if num_words < 1:
            raise ValueError(f"bloom filter needs at least one word, got {num_words}")
        if num_hash_functions < 0:
            raise ValueError(f"bloom filter hash function count must not be negative, got {num_hash_functions}")
        if data is not None and len(data) != num_words * 8:
            raise ValueError(f"bloom filter of {num_words} words needs {num_words * 8} bytes, got {len(data)}")
        self.num_hash_functions = num_hash_functions
        self._data = bytearray(data) if data is not None else bytearray(num_words * 8)

    @classmethod
    def create(cls, expected_num_items: int, fpp: float) -> ClassicBloomFilter:
        """An empty filter sized for ``expected_num_items`` at false-positive probability ``fpp``."""
        if expected_num_items < 1:
            raise ValueError(f"bloom filter expected item count must be positive, got {expected_num_items}")
        if not (math.isfinite(fpp) and 0.0 < fpp < 1.0):
            raise ValueError(f"bloom filter fpp must be between 0 and 1 (exclusive), got {fpp}")
        num_bits = optimal_num_of_bits(expected_num_items, fpp)
        num_words = _num_words(num_bits)
        return cls(optimal_num_of_hash_functions(expected_num_items, num_bits), num_words)

    @property
    def num_words(self) -> int:
        return len(self._data) // 8

    @property
    def bit_size(self) -> int:
        """Allocated bits (a multiple of 64): the probe modulus."""
        return len(self._data) * 8

    @property
    def words(self) -> list[int]:
        """The words as signed 64-bit ints, as the reference holds them."""
        return [w for (w,) in struct.iter_unpack(">q", self._data)]

    def set_bit_count(self) -> int:
        return sum(b.bit_count() for b in self._data)

    def put(self, value: int) -> bool:
        """Add an item (a 64-bit int); true when that set any new bit."""
        data = self._data
        changed = False
        for index in _probe_indexes(_hash_pair(value), self.num_hash_functions, len(data) * 8):
            pos = (index >> 3) ^ 7
            mask = 1 << (index & 7)
            if not data[pos] & mask:
                data[pos] |= mask
                changed = True
        return changed

    def put_all(self, values: Iterable[int | None]) -> int:
        """Add the non-null items in order; returns how many insertions set a new bit."""
        return _fill_counting(self._data, _distinct_pairs(values), self.num_hash_functions)

    def might_contain(self, value: int) -> bool:
        """False only when the item was surely never added."""
        data = self._data
        return all(
            data[(index >> 3) ^ 7] & (1 << (index & 7))
            for index in _probe_indexes(_hash_pair(value), self.num_hash_functions, len(data) * 8)
        )

    def merge(self, other: ClassicBloomFilter) -> ClassicBloomFilter:
        """OR ``other`` into this filter (same size required; the hash count is not checked, as in the reference)."""
        if not isinstance(other, ClassicBloomFilter):
            raise TypeError(f"cannot merge {type(other).__name__} into a classic bloom filter")
        if len(other._data) != len(self._data):
            raise ValueError("cannot merge bloom filters of different sizes")
        merged = int.from_bytes(self._data, "big") | int.from_bytes(other._data, "big")
        self._data[:] = merged.to_bytes(len(self._data), "big")
        return self

    def serialize(self) -> bytes:
        """The stored layout: version, hash function count, word count, words (big-endian)."""
        return _HEADER.pack(VERSION, self.num_hash_functions, self.num_words) + bytes(self._data)

    @classmethod
    def read_from(cls, data: bytes | bytearray | memoryview, offset: int = 0) -> tuple[ClassicBloomFilter, int]:
        """Parse one serialized filter at ``offset``; returns it and the offset just after it."""
        view = memoryview(data)
        if len(view) - offset < _HEADER.size:
            raise ValueError("truncated bloom filter: header incomplete")
        version, num_hash_functions, num_words = _HEADER.unpack_from(view, offset)
        if version != VERSION:
            raise ValueError(f"unexpected bloom filter version {version}")
        if num_words < 1:
            raise ValueError(f"bloom filter word count must be positive, got {num_words}")
        start = offset + _HEADER.size
        end = start + num_words * 8
        if end > len(view):
            raise ValueError(f"truncated bloom filter: {num_words} words need {end - offset} bytes")
        return cls(num_hash_functions, num_words, view[start:end]), end

    @classmethod
    def deserialize(cls, data: bytes | bytearray | memoryview) -> ClassicBloomFilter:
        """Parse exactly one serialized filter (trailing bytes are an error)."""
        bloom, end = cls.read_from(data)
        if end != len(data):
            raise ValueError(f"{len(data) - end} unexpected bytes after the bloom filter")
        return bloom

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ClassicBloomFilter):
            return NotImplemented
        return self.num_hash_functions == other.num_hash_functions and self._data == other._data

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return (
            f"ClassicBloomFilter(num_hash_functions={self.num_hash_functions}, num_words={self.num_words}, "
            f"set_bits={self.set_bit_count()})"
        )


# -- adaptive filter ---------------------------------------------------------------------------


class AdaptiveBloomFilter:
    """Candidates sized for 1024, 2048, ... items; insertion by insertion as the reference does it.

    Use :func:`build_bloom_filter` to build a stored value from many items: it gives the same bytes
    as :meth:`best_candidate` here after inserting them in the same order, much faster.
    """

    __slots__ = ("candidates", "cardinality", "expected_num_items")

    def __init__(self, num_candidates: int, fpp: float, *, _empty: bool = False) -> None:
        if not 1 <= num_candidates <= MAX_NUM_CANDIDATES:
            raise ValueError(f"bloom filter candidate count must be between 1 and {MAX_NUM_CANDIDATES}")
        self.expected_num_items = [INITIAL_EXPECTED_NUM_ITEMS << i for i in range(num_candidates)]
        self.cardinality = 0
        """Insertions that changed a bit of the largest candidate: an estimate of the distinct count."""
        self.candidates: list[ClassicBloomFilter] = (
            [] if _empty else [ClassicBloomFilter.create(n, fpp) for n in self.expected_num_items]
        )

    @property
    def best_candidate_index(self) -> int:
        return _best_candidate_index(self.expected_num_items, self.cardinality)

    def best_candidate(self) -> ClassicBloomFilter:
        """The filter that gets stored."""
        return self.candidates[self.best_candidate_index]

    def put(self, value: int) -> bool:
        """Add an item to the best candidate and the larger ones; counts it when the largest changed."""
        changed = False
        for candidate in self.candidates[self.best_candidate_index :]:
            changed = candidate.put(value)
        if changed:
            self.cardinality += 1
        return changed

    def put_all(self, values: Iterable[int | None]) -> None:
        for value in values:
            if value is not None:
                self.put(value)

    def merge(self, other: AdaptiveBloomFilter) -> AdaptiveBloomFilter:
        """Combine partial states as the reference does: cardinalities add up (an overestimate when
        the parts share items) and only candidates from the new best one upwards are merged."""
        if not isinstance(other, AdaptiveBloomFilter) or len(other.candidates) != len(self.candidates):
            raise ValueError("cannot merge adaptive bloom filters with different candidates")
        self.cardinality += other.cardinality
        for i in range(self.best_candidate_index, len(self.candidates)):
            self.candidates[i].merge(other.candidates[i])
        return self

    def might_contain(self, value: int) -> bool:
        """Membership in the largest candidate, which has seen every item."""
        return self.candidates[-1].might_contain(value)

    def serialize(self) -> bytes:
        """The reference's intermediate state (not what the index stores): cardinality, then every candidate."""
        return _INT.pack(self.cardinality) + b"".join(c.serialize() for c in self.candidates)

    @classmethod
    def deserialize(cls, data: bytes | bytearray | memoryview, num_candidates: int) -> AdaptiveBloomFilter:
        if len(data) < _INT.size:
            raise ValueError("truncated adaptive bloom filter: cardinality missing")
        bloom = cls(num_candidates, DEFAULT_FPP, _empty=True)
        (bloom.cardinality,) = _INT.unpack_from(data, 0)
        offset = _INT.size
        for _ in range(num_candidates):
            candidate, offset = ClassicBloomFilter.read_from(data, offset)
            bloom.candidates.append(candidate)
        if offset != len(data):
            raise ValueError(f"{len(data) - offset} unexpected bytes after the adaptive bloom filter")
        return bloom

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AdaptiveBloomFilter):
            return NotImplemented
        return self.cardinality == other.cardinality and self.candidates == other.candidates

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return (
            f"AdaptiveBloomFilter(cardinality={self.cardinality}, "
            f"best_expected_num_items={self.expected_num_items[self.best_candidate_index]})"
        )


def _best_candidate_index(expected_num_items: list[int], cardinality: int) -> int:
    """First candidate sized for at least ``cardinality`` items, else the last one."""
    for i, expected in enumerate(expected_num_items):
        if expected >= cardinality:
            return i
    return len(expected_num_items) - 1


# -- stored values -----------------------------------------------------------------------------


def build_bloom_filter(values: Iterable[int | None], params: Mapping[str, str] | BloomFilterParams) -> bytes:
    """The stored bloom filter of one file's ``xxhash64`` values (nulls skipped), before base64.

    Items are inserted in the given order; in adaptive mode the order can (rarely) change the
    cardinality count and so the chosen candidate, exactly as it would in the reference.
    """
    settings = params if isinstance(params, BloomFilterParams) else parse_params(params)
    pairs = _distinct_pairs(values)
    if not settings.adaptive:
        bloom = ClassicBloomFilter.create(settings.num_items, settings.fpp)
        _fill(bloom._data, pairs, bloom.num_hash_functions)
        return bloom.serialize()

    expected = [INITIAL_EXPECTED_NUM_ITEMS << i for i in range(settings.num_candidates)]
    largest = ClassicBloomFilter.create(expected[-1], settings.fpp)
    cardinality = _fill_counting(largest._data, pairs, largest.num_hash_functions)
    best_index = _best_candidate_index(expected, cardinality)
    if best_index == len(expected) - 1:
        return largest.serialize()
    best = ClassicBloomFilter.create(expected[best_index], settings.fpp)
    _fill(best._data, pairs, best.num_hash_functions)
    return best.serialize()


def deserialize(serialized: bytes | bytearray | memoryview) -> ClassicBloomFilter:
    """A stored bloom filter value (after base64 decoding)."""
    return ClassicBloomFilter.deserialize(serialized)


def might_contain(serialized: bytes | bytearray | memoryview, value: int) -> bool:
    """Whether a stored bloom filter may contain the ``xxhash64`` value ``value``."""
    return ClassicBloomFilter.deserialize(serialized).might_contain(value)


class EncodedProbe:
    """One item tested against stored filters in the base64 text an index document holds them in,
    reading only the header and the few bytes the item's probes fall in: a query that asks
    1,000 files' filters (kilobytes each) about one value decodes a few bytes of each, not all of
    them. The answer is :func:`might_contain`'s for the decoded text; a text that is not exactly
    one filter in canonical base64 raises ``ValueError`` (``binascii.Error`` is one)."""

    def __init__(self, value: int) -> None:
        self._pair = _hash_pair(value)
        #: The (byte offset, bit mask) of each probe, by (hash function count, word count).
        self._probes: dict[tuple[int, int], list[tuple[int, int]]] = {}

    def might_contain(self, encoded: str) -> bool:
        if len(encoded) % 4 or len(encoded) < 16:
            raise ValueError("not the base64 text of a bloom filter")
        version, num_hash_functions, num_words = _HEADER.unpack(base64.b64decode(encoded[:16], validate=True))
        if version != VERSION:
            raise ValueError(f"unexpected bloom filter version {version}")
        if num_words < 1:
            raise ValueError(f"bloom filter word count must be positive, got {num_words}")
        padding = 2 if encoded.endswith("==") else 1 if encoded.endswith("=") else 0
        if len(encoded) // 4 * 3 - padding != _HEADER.size + num_words * 8:
            raise ValueError("the bloom filter's size does not match its word count")
        for offset, mask in self._probes_of(num_hash_functions, num_words):
            group = offset // 3
            if not base64.b64decode(encoded[4 * group : 4 * group + 4], validate=True)[offset % 3] & mask:
                return False
        return True

    def _probes_of(self, num_hash_functions: int, num_words: int) -> list[tuple[int, int]]:
        key = (num_hash_functions, num_words)
        probes = self._probes.get(key)
        if probes is None:
            indexes = _probe_indexes(self._pair, num_hash_functions, num_words * 64)
            probes = [(_HEADER.size + ((index >> 3) ^ 7), 1 << (index & 7)) for index in indexes]
            self._probes[key] = probes
        return probes
