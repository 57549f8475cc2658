"""The hostile-statement corpus (tests/hostile.py) against the job's check on Spark's own parse, in
this process's Spark session, and against the plugin's check on the same statements:

* the job refuses each hostile statement with the element the corpus names, and lets each
  statement that must keep working through;
* the plugin may refuse more, never allow more: a statement the plugin decided is allowed is
  allowed by the job (a statement the plugin could not read is the job's to decide);
* run by the job's executor, a refused statement has no effect: no Spark job ran for it (nothing
  read), nothing outside the roots was written or deleted, no table appeared, and the listening
  socket the JDBC and socket statements name saw no connection;
* locations are resolved by Hadoop itself in the job: the port the plugin uses agrees with it.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from flint_repl_job.executor import SparkExecutor
from flint_repl_job.flint_statements import flint_statement
from flint_repl_job.guard import StatementGuard
from query_core.flint import parse
from query_core.ppl import to_spark_sql
from query_core.validation import (
    Profile,
    QueryRefusedError,
    StatementLimitError,
    ValidationPolicy,
    Verdict,
    policy_for,
    validate_query,
)
from query_core.validation.paths import hadoop_path
from tests import hostile
from tests.hostile import LIMIT, Case
from tests.support import Listener, java_instance

pytestmark = pytest.mark.spark


@dataclass
class Places:
    wh: Path
    cp: Path
    outside: Path
    link: Path
    port: int

    def fill(self, case: Case) -> str:
        return case.fill(wh=self.wh, cp=self.cp, outside=self.outside, link=self.link, port=self.port)

    def outside_state(self) -> dict[str, str]:
        """Every file below ``outside`` and the hash of its content."""
        return {
            str(path.relative_to(self.outside)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(self.outside.rglob("*"))
            if path.is_file()
        }


@pytest.fixture(scope="module")
def listener() -> Iterator[Listener]:
    found = Listener()
    yield found
    found.close()


@pytest.fixture(scope="module")
def places(spark: Any, tmp_path_factory: pytest.TempPathFactory, listener: Listener) -> Iterator[Places]:
    """The roots, what lies outside them, and the tables the corpus names (``stored_jdbc`` made
    without any check, as another datasource or an older version could have made it)."""
    wh = Path(spark.conf.get("spark.sql.warehouse.dir").removeprefix("file:"))
    base = tmp_path_factory.mktemp("hostile")
    cp, outside = base / "checkpoints", base / "outside"
    link = hostile.make_places(wh, cp, outside)
    hostile.make_catalog(spark, outside)
    yield Places(wh, cp, outside, link, listener.port)
    hostile.drop_catalog(spark)
    link.unlink()


def local_policy(places: Places) -> ValidationPolicy:
    return policy_for({}, Profile.LOCAL, places.wh.as_uri(), str(places.cp))


# -- the verdicts of the two checks ------------------------------------------------------------------


def plugin_verdict(policy: ValidationPolicy, text: str, lang: str) -> tuple[str, str]:
    """("refused", message), ("allowed", "") or ("left", "") as the plugin's check concludes."""
    try:
        verdict = validate_query(policy, lang, text, parse(text) if lang == "sql" else None, hostile_limits())
    except (QueryRefusedError, StatementLimitError) as exc:
        return "refused", exc.message
    except Exception as exc:  # noqa: BLE001 - a syntax error the plugin reports: not an allowance
        return "refused", f"{type(exc).__name__}: {exc}"
    return ("allowed", "") if verdict is Verdict.ALLOWED else ("left", "")


def job_verdict(guard: StatementGuard, text: str, lang: str) -> tuple[str, str]:
    """("refused", message), ("limit", message), ("spark", error) or ("allowed", "") as the job's
    check concludes (on Spark's parse, then on its analysis), without running the statement."""
    try:
        if lang == "ppl":  # checked on its syntax tree, then as the SQL it translates to
            guard.check_ppl(text)
            sql = to_spark_sql(text, lambda query: list(guard.spark.sql(query).columns))
            guard.resolve(sql, guard.check_sql(sql))
        elif (statement := flint_statement(text)) is not None:
            guard.check_flint(statement)
        else:
            guard.resolve(text, guard.check_sql(text))
    except QueryRefusedError as exc:
        return "refused", exc.message
    except StatementLimitError as exc:
        return "limit", exc.message
    except Exception as exc:  # noqa: BLE001 - Spark's own ParseException: it does not run either
        return "spark", f"{type(exc).__name__}: {str(exc)[:300]}"
    return "allowed", ""


def hostile_limits() -> Any:
    from query_core.validation import StatementLimits

    return StatementLimits()


def _expect(case: Case, outcome: tuple[str, str]) -> None:
    kind, message = outcome
    if case.refused is None:
        assert kind == "allowed", message
    elif case.refused == LIMIT:
        assert kind == "limit", (kind, message)
    else:
        if case.spark_refuses and kind == "spark":
            return
        elements = case.refused if isinstance(case.refused, tuple) else (case.refused,)
        assert kind == "refused", (kind, message)
        assert any(isinstance(e, hostile.E) and message.startswith(e.description) for e in elements), message


@pytest.mark.parametrize("case", hostile.ALL, ids=lambda c: c.id)
def test_the_job_decides_each_statement_and_the_plugin_never_allows_more(
    spark: Any, places: Places, case: Case
) -> None:
    policy = local_policy(places)
    text = places.fill(case)
    job = job_verdict(StatementGuard(spark, policy), text, case.lang)
    _expect(case, job)
    if case.catalog:
        return  # what a stored table was made with is known only where the catalog is
    plugin = plugin_verdict(policy, text, case.lang)
    if plugin[0] == "allowed":
        assert job[0] == "allowed", f"the plugin allowed what the job refuses: {job}"
    if case.refused is None:
        assert plugin[0] != "refused", plugin[1]


# -- effects: nothing read, written, deleted or connected ------------------------------------------


REFUSED_SQL = [c for c in hostile.ALL if c.refused is not None and c.lang == "sql" and not c.flint]


def test_refused_statements_run_by_the_executor_have_no_effect(spark: Any, places: Places, listener: Listener) -> None:
    executor = SparkExecutor(spark, "", None, local_policy(places))
    tables = {t.name for t in spark.catalog.listTables("default")}
    before = places.outside_state()
    try:
        for i, case in enumerate(REFUSED_SQL):
            query_id = f"hostile-{i}"
            running = executor.start(query_id, places.fill(case))
            error = running.future.exception(timeout=120)
            assert error is not None, case.text[:200]
            assert not spark.sparkContext.statusTracker().getJobIdsForGroup(query_id), case.text[:200]
    finally:
        executor.close()
    assert places.outside_state() == before
    assert (places.outside / "keep" / "keep.txt").read_text() == "keep me"
    assert {t.name for t in spark.catalog.listTables("default")} == tables
    assert listener.connections == 0


def test_what_keeps_working_runs(spark: Any, places: Places, listener: Listener) -> None:
    executor = SparkExecutor(spark, "", None, local_policy(places))
    before = places.outside_state()
    try:
        for i, case in enumerate(c for c in hostile.ALLOWED if c.lang == "sql" and not c.flint):
            running = executor.start(f"allowed-{i}", places.fill(case))
            assert running.future.exception(timeout=120) is None, case.text
    finally:
        executor.close()
    assert places.outside_state() == before
    assert listener.connections == 0


def test_a_setting_listing_shows_only_the_settable_keys(spark: Any, places: Places) -> None:
    spark.conf.set("spark.datasource.flint.host", "10.1.2.3")
    spark.conf.set("spark.hadoop.hive.metastore.uris", "thrift://10.1.2.3:9083")
    executor = SparkExecutor(spark, "", None, local_policy(places))
    try:
        for i, sql in enumerate(("SET", "SET -v", "EXECUTE IMMEDIATE 'SET'")):
            output = executor.start(f"set-{i}", sql).future.result(timeout=60)
            assert "10.1.2.3" not in output.lossless.datarows
            assert "spark.sql.warehouse.dir" not in output.lossless.datarows
            assert "spark.sql.shuffle.partitions" in output.lossless.datarows
        read = executor.start("set-read", "SET spark.sql.shuffle.partitions").future.result(timeout=60)
        assert "spark.sql.shuffle.partitions" in read.lossless.datarows
        # Without a policy (a job started by another plugin), the listing is filtered all the same.
        open_executor = SparkExecutor(spark)
        try:
            output = open_executor.start("set-open", "SET").future.result(timeout=60)
            hidden = open_executor.start("set-key", "SET spark.datasource.flint.host").future.result(timeout=60)
            indirect = open_executor.start("set-exec", "EXECUTE IMMEDIATE 'SET -v'").future.result(timeout=60)
            compound = open_executor.start("set-compound", "BEGIN SET; END").future
            compound_rows = (
                compound.result(timeout=60).lossless.datarows if compound.exception(timeout=60) is None else ""
            )
        finally:
            open_executor.close()
        assert "10.1.2.3" not in output.lossless.datarows
        assert "10.1.2.3" not in indirect.lossless.datarows and "10.1.2.3" not in compound_rows
        assert "10.1.2.3" not in hidden.lossless.datarows and "<hidden>" in hidden.lossless.datarows
    finally:
        executor.close()
        spark.conf.unset("spark.datasource.flint.host")
        spark.conf.unset("spark.hadoop.hive.metastore.uris")


def test_a_statement_stuck_in_the_parser_is_abandoned_and_the_next_one_runs(spark: Any, places: Places) -> None:
    from query_core.validation import StatementLimits

    executor = SparkExecutor(
        spark, "", None, local_policy(places), limits=StatementLimits(10_000_000, 10_000, max_tokens=10_000_000), prepare_timeout_s=0.2
    )
    # Seconds of parsing and analysis (a 100,000-value IN list), and no Spark job of its own.
    slow = "SELECT * FROM range(1) WHERE id IN (" + ", ".join(map(str, range(100_000))) + ")"
    try:
        running = executor.start("slow", slow)
        assert not running.future.done()
        import time

        started = time.monotonic()
        while not executor.prepare_overdue(running, time.monotonic() - started):
            assert not running.future.done(), "the statement was prepared before its limit: make it slower"
            time.sleep(0.05)
        executor.abandon(running)
        assert running.future.done(), "the stuck statement's thread was stopped"
        assert executor.start("next", "SELECT 1 AS one").future.result(timeout=60).lossless.datarows == "[[1]]"
    finally:
        executor.close()


def test_an_abandoned_statement_s_check_ends_at_its_next_step(spark: Any, places: Places) -> None:
    """Stopping the JVM thread does not end the check's own reading in Python, which takes seconds
    for a giant statement: the abandoned statement's event ends it."""
    import threading

    from flint_repl_job.result_stream import QueryCancelledError
    from query_core.validation import StatementLimits

    guard = StatementGuard(spark, local_policy(places), StatementLimits(10_000_000, 10_000, max_tokens=10_000_000))
    stop = threading.Event()
    stop.set()
    with pytest.raises(QueryCancelledError):
        guard.check_sql("SELECT * FROM range(1) WHERE id IN (" + ", ".join(map(str, range(20_000))) + ")", stop)
    assert guard.check_sql("SELECT 1 AS one", threading.Event()) is not None  # not abandoned: checked


# -- locations: the port and Hadoop agree ------------------------------------------------------------


def _generated(count: int) -> list[str]:
    rng = random.Random(20261127)
    alphabet = ["/", "/", "a", "b", ".", "..", "?", "#", "%2e", "%2F", ":", "//", "x:", "file:", " ", "~", "%"]
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) for _ in range(count)]


#: Hadoop's reading of many locations in one call from Python: per location, a round trip for
#: each of ``Path``, ``toUri`` and the URI's three parts, and PySpark's translation of each
#: refusal, took some 30 s for the strings below. Fields are split by \x02, locations by \x01;
#: \x03 is null, \x04 a location Hadoop refuses.
HADOOP_READER = """
public class HadoopPathReader {
    public String read(String joined) {
        String[] texts = joined.split("\\u0001", -1);
        StringBuilder out = new StringBuilder();
        for (int i = 0; i < texts.length; i++) {
            if (i > 0) out.append('\\u0001');
            try {
                java.net.URI uri = new org.apache.hadoop.fs.Path(texts[i]).toUri();
                out.append(part(uri.getScheme())).append('\\u0002').append(part(uri.getAuthority()))
                    .append('\\u0002').append(part(uri.getPath()));
            } catch (Exception refused) {
                out.append('\\u0004');
            }
        }
        return out.toString();
    }

    private static String part(String value) {
        return value == null ? "\\u0003" : value;
    }
}
"""


def _hadoop_reads(spark: Any, texts: list[str]) -> list[tuple[str | None, ...] | None]:
    """Hadoop's ``new Path(text).toUri()`` of each text (scheme, authority, path), None where it
    refuses the text: one call into the JVM for all of them."""
    assert not any(mark in text for text in texts for mark in "\x01\x02\x03\x04")
    reader = java_instance(spark, HADOOP_READER, "HadoopPathReader")
    joined = str(reader.read("\x01".join(texts)))
    return [
        None if read == "\x04" else tuple(None if part == "\x03" else part for part in read.split("\x02"))
        for read in joined.split("\x01")
    ]


def test_the_port_of_hadoops_path_reads_locations_as_hadoop_does(spark: Any) -> None:
    """On the known vectors, exactly; on generated strings, the port reads each as Hadoop does,
    or refuses it (a string Hadoop reads oddly, such as ``#x:`` whose "scheme" becomes a
    fragment: the plugin then refuses the location, which is the safe side)."""
    from tests.unit.test_hadoop_paths import HADOOP_VECTORS

    known = {text for text, _ in HADOOP_VECTORS if text}
    texts = [*known, *_generated(2_000)]
    hadoop = _hadoop_reads(spark, texts)
    assert len(hadoop) == len(texts)
    assert hadoop[texts.index("hdfs://nn:8020/wh/./t")] == ("hdfs", "nn:8020", "/wh/t")  # the reader reads,
    assert None in hadoop  # and tells refusals
    for text, expected in zip(texts, hadoop, strict=True):
        try:
            found = hadoop_path(text)
            got: tuple[Any, ...] | None = (found.scheme, found.authority, found.path)
        except ValueError:
            got = None
        if text in known or expected is None:
            assert got == expected, text
        else:
            assert got in (None, expected), text


def test_spark_keywords_and_the_scanners_list_agree(spark: Any) -> None:
    """query_core/validation/spark_keywords.json is Spark's keyword list; a Spark upgrade that
    changes it must regenerate the file (the plugin tells calls from keywords by it)."""
    from query_core.validation.tokens import _keywords

    live = {row[0] for row in spark.sql("SELECT keyword FROM sql_keywords()").collect()}
    assert _keywords() == live
