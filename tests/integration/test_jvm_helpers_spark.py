"""The job's JVM helpers (flint_repl_job/jvm/), compiled in this process's Spark session:

* the plan writer writes exactly the JSON ``TreeNode.toJSON`` writes, for parsed, analysed and
  optimized plans and expressions: every statement of the hostile corpus and of the validation
  bench, and queries over real tables (file scans, joins, aggregates, subqueries, literals of
  every type);
* where the helper cannot be had, Spark's own writer answers; the constructor names it reads from
  class files are Scala reflection's;
* the loader the job makes its session with hides the service files of unused session extensions
  and nothing else;
* the file filter the acceleration puts on a table's relation reads the same files and rows as
  the one built through DataFrames, for the files kept and for the files left out, on a
  partitioned and an unpartitioned table;
* after :func:`reply_at_once`, every py4j connection of the JVM sends at once (``TCP_NODELAY``),
  those open before and those opened after.
"""

from __future__ import annotations

import json
import threading
import zipfile
from pathlib import Path
from typing import Any

import pytest

from bench.validation import WAREHOUSE_TOKEN, corpus
from flint_repl_job import jvm
from flint_repl_job.acceleration.listings import Listings
from flint_repl_job.acceleration.plans import Plans, files_read
from flint_repl_job.jvm import PlanJson, reply_at_once
from tests import hostile
from tests.support import java_instance

pytestmark = pytest.mark.spark

QUERIES = [
    "SELECT * FROM default.jh_t WHERE a > 3 AND b = 'x' ORDER BY a LIMIT 5",
    "SELECT b, count(*) AS n, sum(a) FROM default.jh_t GROUP BY b HAVING n > 1",
    "SELECT t.a, u.a FROM default.jh_t t JOIN default.jh_t u ON t.a = u.a WHERE t.b IN ('x', 'y')",
    "SELECT a FROM default.jh_t WHERE a IN (SELECT max(a) FROM default.jh_t) OR b IS NULL",
    "SELECT k, a FROM default.jh_part WHERE k = 1 UNION ALL SELECT a, a FROM default.jh_t",
    "SELECT cast(1.5 AS float), 1.5D, 1e300, 12345678901234567890.5BD, array(1, 2), map('k', 1), "
    "struct(1 AS a), date'2020-01-01', timestamp'2020-01-01 00:00:00', timestamp_ntz'2020-01-01 00:00:00', "
    "X'0aff', interval 3 days, 'quote \" back \\\\ nl \\n tab \\t'",
    "SELECT a, row_number() OVER (PARTITION BY b ORDER BY a) FROM default.jh_t",
    "SELECT explode(array(1, 2)) AS e, * FROM default.jh_t LATERAL VIEW explode(array(a)) x AS y",
    "WITH c AS (SELECT a FROM default.jh_t) SELECT * FROM c JOIN c AS d USING (a)",
    "SELECT * FROM default.jh_view WHERE a BETWEEN 1 AND 2",
    "SELECT /*+ BROADCAST(t) */ * FROM default.jh_t t CROSS JOIN range(3)",
]


@pytest.fixture(scope="module")
def tables(spark: Any) -> Any:
    spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
    spark.sql("CREATE TABLE IF NOT EXISTS default.jh_t (a INT, b STRING) USING parquet")
    spark.sql("INSERT INTO default.jh_t VALUES (1, 'x'), (2, 'y'), (3, NULL)")
    spark.sql("CREATE TABLE IF NOT EXISTS default.jh_part (a INT, k INT) USING parquet PARTITIONED BY (k)")
    spark.sql("INSERT INTO default.jh_part VALUES (1, 1)")
    spark.sql("CREATE OR REPLACE VIEW default.jh_view AS SELECT a FROM default.jh_t")
    yield spark
    spark.sql("DROP VIEW IF EXISTS default.jh_view")
    spark.sql("DROP TABLE IF EXISTS default.jh_t")
    spark.sql("DROP TABLE IF EXISTS default.jh_part")


def _same(write: PlanJson, plan: Any) -> None:
    assert json.loads(write(plan)) == json.loads(plan.toJSON())


def _parsed(spark: Any, texts: list[str]) -> list[Any]:
    parser = spark._jsparkSession.sessionState().sqlParser()
    plans = []
    for text in texts:
        try:
            plans.append(parser.parsePlan(text))
        except Exception:  # noqa: BLE001 - text Spark cannot parse has no plan to write
            continue
    return plans


def test_parsed_plans_of_the_hostile_corpus_and_the_bench_are_written_as_spark_writes_them(
    spark: Any, tmp_path: Path
) -> None:
    places = {"wh": tmp_path / "wh", "cp": tmp_path / "cp", "outside": tmp_path / "o", "link": tmp_path / "l", "port": 9}
    # (not the statements past the depth limit: the job never parses them, and Spark takes minutes)
    texts = [
        case.fill(**places)
        for case in hostile.ALL
        if case.lang == "sql" and not case.flint and case.refused != hostile.LIMIT
    ]
    texts += [text.replace(WAREHOUSE_TOKEN, str(tmp_path)) for text in corpus(60)]
    plans = _parsed(spark, texts)
    assert len(plans) > 100
    write = PlanJson(spark)
    for plan in plans:
        _same(write, plan)


@pytest.mark.parametrize("sql", QUERIES)
def test_analysed_and_optimized_plans_are_written_as_spark_writes_them(tables: Any, sql: str) -> None:
    frame = tables.sql(sql)
    execution = frame._jdf.queryExecution()
    write = PlanJson(tables)
    _same(write, execution.logical())
    _same(write, execution.analyzed())
    _same(write, execution.optimizedPlan())


def test_expressions_are_written_as_spark_writes_them(spark: Any) -> None:
    parser = spark._jsparkSession.sessionState().sqlParser()
    write = PlanJson(spark)
    for text in ("a > 1 AND b LIKE 'x%'", "CASE WHEN a = 1 THEN 'one' ELSE NULL END", "coalesce(a, 0) + 1.5"):
        _same(write, parser.parseExpression(text))


NAME_CHECK = """
public class NameCheck {
    /** For each class named (comma-separated) that is a concrete Scala product: its constructor's
     * names as the plan writer reads them from the class file, against Scala reflection's. */
    public String check(String joined, Class writer) throws Exception {
        java.lang.reflect.Method declared = writer.getMethod("declaredNames", new Class[] {Class.class});
        int read = 0;
        int unsure = 0;
        StringBuilder wrong = new StringBuilder();
        String[] names = joined.split(",");
        for (int i = 0; i < names.length; i++) {
            Class type;
            try {  // classes that need what is not on the class path are left out
                type = Class.forName(names[i], false, writer.getClassLoader());
                if (!scala.Product.class.isAssignableFrom(type) || type.isInterface()
                    || java.lang.reflect.Modifier.isAbstract(type.getModifiers())) continue;
                type.getDeclaredConstructors();
                type.getDeclaredMethods();
            } catch (LinkageError e) {
                continue;
            } catch (ClassNotFoundException e) {
                continue;
            }
            String spark;
            try {
                scala.collection.immutable.Seq seq =
                    org.apache.spark.sql.catalyst.ScalaReflection$.MODULE$.getConstructorParameterNames(type);
                StringBuilder all = new StringBuilder();
                for (int j = 0; j < seq.length(); j++) all.append(j == 0 ? "" : ",").append(seq.apply(j));
                spark = all.toString();
            } catch (Throwable e) {
                continue;  // no name Spark's own writer could write
            }
            String[] ours = (String[]) declared.invoke(null, new Object[] {type});
            if (ours == null) {
                unsure++;
                continue;
            }
            read++;
            StringBuilder mine = new StringBuilder();
            for (int j = 0; j < ours.length; j++) mine.append(j == 0 ? "" : ",").append(ours[j]);
            if (!mine.toString().equals(spark)) {
                wrong.append(type.getName()).append(": ").append(mine).append(" / ").append(spark).append("\\n");
            }
        }
        return read + " " + unsure + "\\n" + wrong;
    }
}
"""


def _product_class_names(spark: Any) -> list[str]:
    """The named classes of Spark's plans, expressions and catalog (its two SQL jars)."""
    jars = Path(spark._jvm.org.apache.spark.sql.catalyst.trees.TreeNode._java_lang_class.getProtectionDomain().getCodeSource().getLocation().getPath()).parent
    names = []
    for prefix in ("spark-catalyst_", "spark-sql_"):
        [jar] = jars.glob(f"{prefix}*.jar")
        with zipfile.ZipFile(jar) as archive:
            for entry in archive.namelist():
                name = entry[: -len(".class")].replace("/", ".")
                wanted = entry.startswith(("org/apache/spark/sql/catalyst/", "org/apache/spark/sql/execution/"))
                if wanted and entry.endswith(".class") and not name.endswith("$") and "$$" not in name and "$anon" not in name:
                    names.append(name)
    return names


def test_the_writer_reads_constructor_names_from_class_files_as_scala_reflection_reads_them(spark: Any) -> None:
    """The names the writer reads without Scala reflection (whose first use costs a JVM about a
    CPU-second) are Scala reflection's, for every case class of Spark's SQL jars it reads."""
    writer = jvm.helper(spark, "PlanJson")
    assert writer is not None
    checker = java_instance(spark, NAME_CHECK, "NameCheck", parent=writer.getClass().getClassLoader())
    counts, *wrong = str(checker.check(",".join(_product_class_names(spark)), writer.getClass())).split("\n")
    read, unsure = map(int, counts.split())
    print(f"names read from class files: {read}; left to Scala reflection: {unsure}")
    assert [line for line in wrong if line] == []
    assert read > 1000 and unsure < read / 10, (read, unsure)


SERVICES = "META-INF/services/org.apache.spark.sql.SparkSessionExtensionsProvider"


def _urls(found: Any) -> list[str]:
    urls = []
    while found.hasMoreElements():
        urls.append(str(found.nextElement().toString()))
    return urls


def test_the_job_s_session_loader_hides_service_files_of_hidden_providers_only(spark: Any, tmp_path: Path) -> None:
    """docs/job.md, "Start-up of local jobs": a service file that lists hidden providers only is
    not seen (MLlib's, on this class path); one that lists another provider too is, and so is
    every other resource."""
    jars = []
    for name, listed in (("hidden.jar", "# only hidden\nx.Hidden # one\n\n"), ("mixed.jar", "x.Hidden\nx.Kept\n")):
        with zipfile.ZipFile(tmp_path / name, "w") as out:
            out.writestr(SERVICES, listed)
        jars.append(tmp_path / name)
    jvm_ = spark._jvm
    urls = spark.sparkContext._gateway.new_array(jvm_.java.net.URL, len(jars))
    for i, path in enumerate(jars):
        urls[i] = jvm_.java.io.File(str(path)).toURI().toURL()
    parent = jvm_.java.net.URLClassLoader(urls, jvm_.java.lang.Thread.currentThread().getContextClassLoader())
    providers = jvm.helper(spark, "SessionProviders")
    assert providers is not None
    hiding = providers.hiding(parent, ",".join(["x.Hidden", *jvm.UNUSED_EXTENSIONS]))

    everything = _urls(parent.getResources(SERVICES))
    assert any("spark-mllib" in url for url in everything) and len(everything) == 3
    assert _urls(hiding.getResources(SERVICES)) == [url for url in everything if url.endswith("mixed.jar!/" + SERVICES)]
    manifests = _urls(parent.getResources("META-INF/MANIFEST.MF"))
    assert len(manifests) > 100 and _urls(hiding.getResources("META-INF/MANIFEST.MF")) == manifests
    assert hiding.loadClass("org.apache.spark.sql.SparkSession").equals(parent.loadClass("org.apache.spark.sql.SparkSession"))


def test_without_the_helper_spark_writes_the_plan(spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jvm, "_instances", {})
    monkeypatch.setattr(jvm, "_compile", lambda spark, name: None)
    plan = _parsed(spark, ["SELECT 1 AS one"])[0]
    assert PlanJson(spark)(plan) == plan.toJSON()


def test_a_helper_compiled_once_is_kept_and_the_next_jvm_defines_it_from_its_classes(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/job.md, "The JVM's helpers": beside a class archive, the compiled classes are kept; a
    later job (here: the same JVM with its helpers forgotten) defines them from there, and a
    damaged file is compiled again and replaced. (The instances made here are looked at through
    reflection alone: py4j keeps a method per class name, and the session's other tests call the
    session's own instance.)"""
    kept = tmp_path / "helpers"
    monkeypatch.setattr(jvm, "cache_dir", lambda spark: kept)
    loaded: list[bool] = []
    load_kept = jvm.load_kept

    def recorded(*args: Any) -> Any:
        found = load_kept(*args)
        loaded.append(found is not None)
        return found

    monkeypatch.setattr(jvm, "load_kept", recorded)

    def made() -> Any:
        monkeypatch.setattr(jvm, "_instances", {})
        instance = jvm.helper(spark, "PlanJson")
        assert instance is not None
        return instance.getClass()

    def methods(cls: Any) -> list[str]:
        return sorted(str(method.toString()) for method in cls.getDeclaredMethods())

    compiled = made()
    [file] = kept.iterdir()
    assert file.name.startswith("PlanJson-") and file.suffix == ".jar"
    defined = made()
    assert loaded == [False, True]  # none kept yet, then kept
    assert str(defined.getName()) == "asyncquery.jvm.PlanJson" and methods(defined) == methods(compiled)
    assert not defined.equals(compiled)  # another definition: from the kept classes, not the compiler's

    file.write_bytes(b"not a jar")
    assert methods(made()) == methods(compiled)
    assert loaded[-1] is False and zipfile.ZipFile(file).testzip() is None  # compiled again, replaced
    assert methods(made()) == methods(compiled) and loaded[-1] is True


class _Conf:
    def __init__(self, options: str | None) -> None:
        self.options = options

    def get(self, key: str, default: str) -> str | None:
        return self.options if key == "spark.driver.extraJavaOptions" and self.options is not None else default


class _Session:
    def __init__(self, options: str | None) -> None:
        conf = _Conf(options)
        self.sparkContext = type("Context", (), {"getConf": lambda _self: conf})()


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ('-XX:+UseSerialGC "-XX:SharedArchiveFile=/a dir/x.jsa"', Path("/a dir/helpers")),
        ("-XX:SharedArchiveFile=/cache/jvm/spark-3.5.jsa -Xss4m", Path("/cache/jvm/helpers")),
        ("-XX:ArchiveClassesAtExit=/cache/jvm/x.jsa.recording", None),
        (None, None),
    ],
)
def test_helpers_are_kept_beside_the_class_archive_the_driver_maps(options: str | None, expected: Path | None) -> None:
    assert jvm.cache_dir(_Session(options)) == expected


@pytest.fixture(scope="module")
def spread(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Three tables of several files each: one partitioned, one not, and one whose directory's
    name wants escaping in a URI (a space, a percent sign, a non-ASCII letter)."""
    spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
    frame = spark.range(0, 60, 1, 6).selectExpr("id", "cast(id % 2 AS int) AS k")
    frame.write.format("parquet").mode("overwrite").saveAsTable("default.jh_files")
    frame.write.format("parquet").mode("overwrite").partitionBy("k").saveAsTable("default.jh_files_part")
    odd = tmp_path_factory.mktemp("files") / "a dir 100% é"
    frame.write.format("parquet").option("path", str(odd)).saveAsTable("default.jh_files_odd")
    yield spark
    for table in ("jh_files", "jh_files_part", "jh_files_odd"):
        spark.sql(f"DROP TABLE IF EXISTS default.{table}")


@pytest.mark.parametrize("table", ["default.jh_files", "default.jh_files_part", "default.jh_files_odd"])
@pytest.mark.parametrize("keep", [True, False])
def test_the_file_filter_reads_what_the_filter_built_through_dataframes_reads(
    spread: Any, table: str, keep: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    spark = spread
    plans = Plans(spark)
    relation = plans.optimized(spark.table(table))
    assert relation.getClass().getSimpleName() == "LogicalRelation"
    listed = Listings(plans).files(relation)  # as the acceleration reads it: _metadata.file_path's form
    chosen = sorted(listed)[:2]
    assert len(listed) > 3

    def run() -> tuple[list[tuple[Any, ...]], int]:
        frame = plans.frame(plans.restrict(relation, chosen, keep))
        return sorted(tuple(r) for r in frame.collect()), files_read(frame)

    assert jvm.helper(spark, "FileFilter") is not None
    restricted = plans.restrict(relation, chosen, keep)
    assert restricted.relation().location().getClass().getSimpleName() == "KeptFiles"
    assert restricted.output().toString() == relation.output().toString()  # the same attributes: name#id
    # The same files of the same table: the same scan to Spark (so an exchange over it is reused).
    assert restricted.sameResult(plans.restrict(relation, list(reversed(chosen)), keep))
    assert not restricted.sameResult(plans.restrict(relation, chosen[:1], keep))
    assert not restricted.sameResult(plans.restrict(relation, chosen, not keep))
    by_helper = run()
    monkeypatch.setattr(Plans, "_file_filter", lambda self, relation, paths, keep: None)
    by_frames = run()
    assert by_helper == by_frames
    rows, read = by_helper
    assert read == (len(chosen) if keep else len(listed) - len(chosen))
    expected = {tuple(r) for r in spark.table(table).where(("" if keep else "NOT ") + _path_in(chosen)).collect()}
    assert set(rows) == expected and rows


def _path_in(paths: list[str]) -> str:
    return "_metadata.file_path IN (" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + ")"


def _no_delay_flags(spark: Any) -> list[bool]:
    server = spark.sparkContext._gateway.java_gateway_server
    field = spark._jvm.java.lang.Class.forName("py4j.GatewayServer").getDeclaredField("connections")
    field.setAccessible(True)
    connections = field.get(server)
    return [bool(connections.get(i).getSocket().getTcpNoDelay()) for i in range(connections.size())]


def test_replies_leave_at_once_on_every_connection(spark: Any) -> None:
    assert reply_at_once(spark)
    flags = _no_delay_flags(spark)
    assert flags and all(flags)
    # A thread of its own gets a connection of its own (py4j's pinned threads), opened after:
    # read from that thread, the flags include its connection's.
    seen: list[list[bool]] = []
    thread = threading.Thread(target=lambda: seen.append(_no_delay_flags(spark)))
    thread.start()
    thread.join()
    assert len(seen[0]) > len(flags) and all(seen[0])
