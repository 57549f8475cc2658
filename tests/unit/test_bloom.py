"""BLOOM_FILTER skipping-index field: hashing, sizing, layout and adaptive choice as the reference.

Expected digests and sizes below were produced by the reference implementation itself for the same
inputs, so a match means the reference reads exactly the filter it would have written.
"""

from __future__ import annotations

import base64
import hashlib
import random
import struct
from collections.abc import Iterator, Mapping

import pytest

from flint_repl_job.indexes import bloom
from flint_repl_job.indexes.bloom import (
    AdaptiveBloomFilter,
    BloomFilterParams,
    ClassicBloomFilter,
    EncodedProbe,
    build_bloom_filter,
    deserialize,
    might_contain,
    murmur3_hash_long,
    optimal_num_of_bits,
    optimal_num_of_hash_functions,
    parse_params,
)

LONG_MIN = -(2**63)
LONG_MAX = 2**63 - 1
CLASSIC_DEFAULT = {"adaptive": "false"}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def header(serialized: bytes) -> tuple[int, int, int]:
    version, num_hash_functions, num_words = struct.unpack_from(">iii", serialized)
    return version, num_hash_functions, num_words


def lcg_longs(count: int) -> Iterator[int]:
    """A 64-bit LCG in signed two's complement, each value twice (duplicates must not matter)."""
    x = 1
    for _ in range(count):
        x = (x * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
        signed = x - 2**64 if x >= 2**63 else x
        yield signed
        yield signed


def random_longs(count: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(LONG_MIN, LONG_MAX) for _ in range(count)]


# -- hashing -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seed", "expected"),
    [
        # The murmur3 hashLong vectors of the reference's test suite for this hash.
        (0, 0, 1669671676),
        (-42, 0, -846261623),
        (42, 0, 1871679806),
        (LONG_MIN, 0, 1366273829),
        (LONG_MAX, 0, -2106506049),
        # Non-zero seeds, as the second hash uses (computed by the reference).
        (123, 42, -46242105),
        (-1, -7, -569005525),
    ],
)
def test_murmur3_hash_long_matches_reference_vectors(value: int, seed: int, expected: int) -> None:
    assert murmur3_hash_long(value, seed) == expected


def test_murmur3_takes_signed_and_unsigned_forms_of_the_same_long() -> None:
    assert murmur3_hash_long(-1) == murmur3_hash_long(2**64 - 1)
    assert murmur3_hash_long(LONG_MIN, 5) == murmur3_hash_long(2**63, 5)


def test_bulk_hashing_equals_item_by_item_hashing() -> None:
    # More than one chunk, extremes, and unsigned forms (which take the slower conversion path).
    values = [0, -1, 1, LONG_MIN, LONG_MAX, 2**64 - 1, 2**63, *random_longs(bloom._CHUNK + 123, seed=3)]
    pairs = bloom._hash_pairs(values)
    assert list(pairs) == [bloom._hash_pair(v) for v in values]
    for value, pair in zip(values[:50], pairs, strict=False):
        h1 = murmur3_hash_long(value, 0)
        assert pair >> 32 == h1 & 0xFFFFFFFF
        assert pair & 0xFFFFFFFF == murmur3_hash_long(value, h1) & 0xFFFFFFFF


@pytest.mark.parametrize("value", [2**64, LONG_MIN - 1])
def test_items_beyond_64_bits_are_rejected(value: int) -> None:
    with pytest.raises(ValueError, match="64-bit"):
        murmur3_hash_long(value)
    with pytest.raises(ValueError, match="64-bit"):
        build_bloom_filter([1, value], {})


# -- sizing ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "fpp", "bits", "hash_functions", "words"),
    [
        (1, 0.5, 1, 1, 1),
        (1, 0.001, 14, 10, 1),
        (100, 0.1, 479, 3, 8),
        (100, 0.01, 958, 7, 15),
        (1000, 0.03, 7298, 5, 115),
        (1024, 0.03, 7473, 5, 117),
        (1024, 0.001, 14722, 10, 231),
        (10000, 0.5, 14426, 1, 226),
        (10000, 0.03, 72984, 5, 1141),
        (65536, 0.01, 628166, 7, 9816),
        (1000000, 0.1, 4792529, 3, 74884),
        (1000000, 0.03, 7298440, 5, 114039),
    ],
)
def test_sizing_matches_reference(n: int, fpp: float, bits: int, hash_functions: int, words: int) -> None:
    assert optimal_num_of_bits(n, fpp) == bits
    assert optimal_num_of_hash_functions(n, bits) == hash_functions
    created = ClassicBloomFilter.create(n, fpp)
    assert (created.num_hash_functions, created.num_words, created.bit_size) == (hash_functions, words, 64 * words)


def test_hash_function_count_rounds_half_up_exactly() -> None:
    assert bloom._round_half_up(2.5) == 3
    assert bloom._round_half_up(1.4999999999999998) == 1
    assert bloom._round_half_up(0.49999999999999994) == 0
    assert optimal_num_of_hash_functions(1000, 1) == 1  # never below one


# -- exact bytes -------------------------------------------------------------------------------


def test_tiny_classic_filter_bytes() -> None:
    serialized = build_bloom_filter([1, 2, 3], {"adaptive": "false", "num_items": "1", "fpp": "0.5"})
    # version 1, one hash function, one word, the word with bits 19, 29 and 33 set.
    assert serialized.hex() == "0000000100000001000000010000000220080000"


@pytest.mark.parametrize(
    ("params", "values", "length", "digest"),
    [
        (
            {"adaptive": "false", "num_items": "100", "fpp": "0.01"},
            [i * 7919 - 100000 for i in range(50)],
            132,
            "092fab180f1e4e5642f3d8532be6823dbcea1a8ebaddd8253971792886ee4111",
        ),
        (
            CLASSIC_DEFAULT,
            [LONG_MIN, LONG_MAX, 0, -1],
            9140,
            "9be6c14f6fbad3534ea1474d85ebd69f942dc3c1dff632c6faaf4dfa14fd28dc",
        ),
        (
            {},
            list(range(500)),
            948,
            "87bd8b24c25903a8c798c46e6eef5d482ae0659a05ed6359ad6f1f782d5cc6ab",
        ),
        (
            {"num_candidates": "5"},
            list(range(5500)),
            7492,
            "7a1edb8ac8057f9d1c9884273c67fc0b4cf509bf3379cd3de67c42935bca97a7",
        ),
        (
            {"adaptive": "true", "num_candidates": "3", "fpp": "0.1"},
            list(lcg_longs(3000)),
            12 + 8 * ClassicBloomFilter.create(4096, 0.1).num_words,
            "503c2db6b2ad6e7be6d16feee457515ffae61bb3f154c8323888ead1cfd5df7c",
        ),
    ],
    ids=["classic-100", "classic-extremes", "adaptive-500", "adaptive-5500", "adaptive-lcg"],
)
def test_stored_bytes_match_reference(params: Mapping[str, str], values: list[int], length: int, digest: str) -> None:
    serialized = build_bloom_filter(values, params)
    assert len(serialized) == length
    assert sha256(serialized) == digest


@pytest.mark.parametrize(
    ("num_candidates", "fpp", "values", "digest"),
    [
        (5, 0.03, list(range(5500)), "eb11341e447411dce881c66e2b6b6f556e3ec84bc126a4871a91d543c3166b63"),
        (3, 0.1, list(lcg_longs(3000)), "5eb81e597a80ee6a3782d5ff7fa00d7df1a0b82820bace0665eae0b0fd8f14d0"),
    ],
)
def test_adaptive_intermediate_state_matches_reference(
    num_candidates: int, fpp: float, values: list[int], digest: str
) -> None:
    adaptive = AdaptiveBloomFilter(num_candidates, fpp)
    adaptive.put_all(values)
    serialized = adaptive.serialize()
    assert sha256(serialized) == digest
    assert AdaptiveBloomFilter.deserialize(serialized, num_candidates) == adaptive


# -- layout ------------------------------------------------------------------------------------


def test_layout_header_and_bit_positions() -> None:
    value = 987654321987654321
    serialized = build_bloom_filter([value], {"adaptive": "false", "num_items": "1000", "fpp": "0.01"})
    version, num_hash_functions, num_words = header(serialized)
    assert (version, num_hash_functions, num_words) == (1, 7, 150)
    assert serialized[:12] == bytes.fromhex("000000010000000700000096")
    assert len(serialized) == 12 + 8 * num_words

    # Recompute the probes from the format description alone and find exactly those bits set.
    h1 = murmur3_hash_long(value, 0)
    h2 = murmur3_hash_long(value, h1)
    expected: set[int] = set()
    for i in range(1, num_hash_functions + 1):
        combined = (h1 + i * h2) & 0xFFFFFFFF
        combined = combined - 2**32 if combined >= 2**31 else combined
        if combined < 0:
            combined = ~combined
        expected.add(combined % (64 * num_words))
    words = struct.unpack(f">{num_words}q", serialized[12:])
    set_bits = {w * 64 + b for w, word in enumerate(words) for b in range(64) if (word >> b) & 1}
    assert set_bits == expected


def test_round_trip_through_deserialize() -> None:
    values = random_longs(3000, seed=11)
    serialized = build_bloom_filter(values, CLASSIC_DEFAULT)
    parsed = deserialize(serialized)
    assert parsed.num_hash_functions == 5
    assert parsed.num_words == 1141
    assert parsed.serialize() == serialized
    assert parsed.set_bit_count() == sum(w.bit_count() for w in struct.unpack(">1141Q", serialized[12:]))
    direct = ClassicBloomFilter.create(10000, 0.03)
    direct.put_all(values)
    assert direct == parsed
    assert direct.words == list(struct.unpack(">1141q", serialized[12:]))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (struct.pack(">iii", 2, 3, 1) + bytes(8), "version"),
        (struct.pack(">iii", 1, 3, 2) + bytes(8), "truncated"),
        (struct.pack(">ii", 1, 3), "truncated"),
        (struct.pack(">iii", 1, 3, 0), "word count"),
        (struct.pack(">iii", 1, 3, 1) + bytes(9), "unexpected bytes"),
    ],
    ids=["version", "short-words", "short-header", "no-words", "trailing"],
)
def test_deserialize_rejects_malformed_bytes(data: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        deserialize(data)


def test_empty_input_stores_the_empty_smallest_filter() -> None:
    # The reference emits a filter even when every value is null: the empty smallest candidate.
    for values in ([], [None, None]):
        serialized = build_bloom_filter(values, {})
        assert header(serialized) == (1, 5, 117)
        assert serialized[12:] == bytes(8 * 117)
        assert not might_contain(serialized, 0)


# -- membership --------------------------------------------------------------------------------


@pytest.mark.parametrize("params", [CLASSIC_DEFAULT, {}, {"num_candidates": "2", "fpp": "0.01"}])
def test_no_false_negatives(params: Mapping[str, str]) -> None:
    values = [*random_longs(20000, seed=5), LONG_MIN, LONG_MAX, 0, -1]
    stored = deserialize(build_bloom_filter(values, params))
    assert all(stored.might_contain(v) for v in values)


@pytest.mark.parametrize(
    ("params", "num_values", "fpp"),
    [
        ({"adaptive": "false", "num_items": "10000", "fpp": "0.03"}, 10000, 0.03),
        ({"adaptive": "false", "num_items": "5000", "fpp": "0.01"}, 5000, 0.01),
        # 3000 distinct values pick the 4096 candidate, so the rate stays below the target.
        ({"fpp": "0.03"}, 3000, 0.03),
    ],
)
def test_false_positive_rate_is_near_fpp(params: Mapping[str, str], num_values: int, fpp: float) -> None:
    values = random_longs(num_values, seed=21)
    stored = deserialize(build_bloom_filter(values, params))
    inserted = set(values)
    probes = [v for v in random_longs(40000, seed=22) if v not in inserted]
    rate = sum(stored.might_contain(v) for v in probes) / len(probes)
    assert fpp / 5 < rate < fpp * 1.5


def test_might_contain_on_stored_bytes() -> None:
    serialized = build_bloom_filter([10, None, 20, 30], CLASSIC_DEFAULT)
    assert might_contain(serialized, 20)
    assert sum(might_contain(serialized, v) for v in range(1000, 2000)) < 10


# -- adaptive ----------------------------------------------------------------------------------


def test_adaptive_picks_larger_candidates_as_cardinality_grows() -> None:
    adaptive = AdaptiveBloomFilter(5, 0.03)
    assert adaptive.expected_num_items == [1024, 2048, 4096, 8192, 16384]
    steps = [(500, 1024), (1500, 2048), (5500, 8192), (20000, 16384)]
    inserted = 0
    for total, expected in steps:
        adaptive.put_all(range(inserted, total))
        inserted = total
        assert adaptive.expected_num_items[adaptive.best_candidate_index] == expected
        built = build_bloom_filter(range(total), {"num_candidates": "5", "fpp": "0.03"})
        assert built == adaptive.best_candidate().serialize()
        assert header(built)[2] == ClassicBloomFilter.create(expected, 0.03).num_words


def test_best_candidate_boundaries() -> None:
    adaptive = AdaptiveBloomFilter(3, 0.03)
    for cardinality, index in [(0, 0), (1024, 0), (1025, 1), (2048, 1), (2049, 2), (10**6, 2)]:
        adaptive.cardinality = cardinality
        assert adaptive.best_candidate_index == index


def test_cardinality_counts_insertions_that_changed_the_largest_candidate() -> None:
    adaptive = AdaptiveBloomFilter(2, 0.03)
    assert adaptive.put(7)
    assert not adaptive.put(7)
    adaptive.put_all([8, None, 8, 9])
    assert adaptive.cardinality == 3


@pytest.mark.parametrize(
    ("num_distinct", "num_candidates", "fpp"),
    [(0, 10, 0.03), (900, 3, 0.03), (1030, 3, 0.2), (2500, 3, 0.05), (9000, 3, 0.03), (3000, 1, 0.1)],
)
def test_bulk_build_equals_insertion_by_insertion(num_distinct: int, num_candidates: int, fpp: float) -> None:
    rng = random.Random(num_distinct)
    distinct = random_longs(num_distinct, seed=num_distinct)
    values: list[int | None] = [*distinct, *rng.choices(distinct, k=num_distinct // 3), None]
    rng.shuffle(values)
    adaptive = AdaptiveBloomFilter(num_candidates, fpp)
    adaptive.put_all(values)
    params = {"num_candidates": str(num_candidates), "fpp": str(fpp)}
    assert build_bloom_filter(values, params) == adaptive.best_candidate().serialize()


def test_nulls_and_duplicates_do_not_change_the_filter() -> None:
    distinct = random_longs(2000, seed=9)
    noisy: list[int | None] = [None, *distinct, *distinct[::-3], None, *distinct[:10]]
    for params in ({}, CLASSIC_DEFAULT):
        assert build_bloom_filter(noisy, params) == build_bloom_filter(distinct, params)


def test_unsigned_forms_build_the_same_filter() -> None:
    values = random_longs(500, seed=4)
    unsigned = [v & 0xFFFFFFFFFFFFFFFF for v in values]
    assert build_bloom_filter(unsigned, {}) == build_bloom_filter(values, {})


def test_classic_merge_is_the_union() -> None:
    values = random_longs(4000, seed=13)
    left, right, whole = (ClassicBloomFilter.create(2000, 0.03) for _ in range(3))
    left.put_all(values[:2000])
    right.put_all(values[2000:])
    whole.put_all(values)
    assert left.merge(right) == whole
    with pytest.raises(ValueError, match="different sizes"):
        left.merge(ClassicBloomFilter.create(100, 0.03))


def test_adaptive_merge_adds_cardinalities() -> None:
    first, second = AdaptiveBloomFilter(5, 0.03), AdaptiveBloomFilter(5, 0.03)
    first.put_all(range(1000))
    second.put_all(range(1000, 2000))
    first.merge(second)
    assert first.cardinality == 2000
    assert first.expected_num_items[first.best_candidate_index] == 2048
    assert all(first.might_contain(i) for i in range(2000))
    assert all(first.best_candidate().might_contain(i) for i in range(2000))


# -- parameters --------------------------------------------------------------------------------


def test_parameter_defaults_and_forms() -> None:
    assert parse_params({}) == BloomFilterParams(adaptive=True, num_candidates=10, fpp=0.03)
    assert parse_params({"adaptive": "FALSE", "num_items": "20000", "fpp": "0.02"}) == BloomFilterParams(
        adaptive=False, num_items=20000, fpp=0.02
    )
    assert parse_params({"adaptive": "false"}) == BloomFilterParams(adaptive=False, num_items=10000, fpp=0.03)
    # Only the keys of the chosen mode are read.
    assert parse_params({"num_candidates": "8", "num_items": "junk"}).num_candidates == 8
    assert parse_params({"adaptive": "false", "num_candidates": "junk"}).num_items == 10000
    assert build_bloom_filter([1], parse_params(CLASSIC_DEFAULT)) == build_bloom_filter([1], CLASSIC_DEFAULT)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"adaptive": "yes"}, "adaptive"),
        ({"adaptive": "false", "num_items": "abc"}, "num_items"),
        ({"adaptive": "false", "num_items": "1e3"}, "num_items"),
        ({"adaptive": "false", "num_items": "0"}, "num_items"),
        ({"adaptive": "false", "num_items": "-5"}, "num_items"),
        ({"adaptive": "false", "num_items": "3000000000"}, "num_items"),
        ({"adaptive": "false", "num_items": "1", "fpp": "0.9"}, "no bits"),
        ({"fpp": "0"}, "fpp"),
        ({"fpp": "1"}, "fpp"),
        ({"fpp": "1.5"}, "fpp"),
        ({"fpp": "nan"}, "fpp"),
        ({"fpp": "often"}, "fpp"),
        ({"num_candidates": "0"}, "num_candidates"),
        ({"num_candidates": "22"}, "num_candidates"),
        ({"num_candidates": "ten"}, "num_candidates"),
    ],
)
def test_invalid_parameters_are_rejected(params: Mapping[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_params(params)
    with pytest.raises(ValueError, match=message):
        build_bloom_filter([1, 2], params)


def test_a_probe_of_the_base64_text_answers_as_the_decoded_filter() -> None:
    rng = random.Random(7)
    for items, fpp in ((50, 0.03), (1000, 0.01), (10, 0.3)):
        added = [rng.getrandbits(63) for _ in range(items)]
        stored = build_bloom_filter(added, {"num_items": str(items * 2), "fpp": str(fpp), "adaptive": "false"})
        text = base64.b64encode(stored).decode()
        for value in added[:20] + [rng.getrandbits(63) - (1 << 62) for _ in range(300)]:
            assert EncodedProbe(value).might_contain(text) == might_contain(stored, value)
    probe = EncodedProbe(added[0])
    header_only = base64.b64encode(stored[:12]).decode()
    for broken in (text[:-4], text + "AAAA", header_only, "x" * 15, "*" * 16 + text[16:]):
        with pytest.raises(ValueError):  # binascii.Error is a ValueError
            probe.might_contain(broken)
