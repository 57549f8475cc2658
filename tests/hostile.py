"""One corpus of hostile statements (and of the statements that must keep working), shared by the
plugin's check, the job's check and the end-to-end tests (docs/validation.md).

Each case is written with placeholders filled in per test:

* ``{wh}``: the warehouse root (a local directory); ``{cp}``: the checkpoint root;
* ``{outside}``: a directory outside both, holding ``secret.txt`` and ``keep/keep.txt``;
* ``{link}``: a symbolic link inside the warehouse that points at ``{outside}``;
* ``{port}``: a listening socket that must never see a connection.

``refused`` is the element whose description the job's refusal names (None: the statement is
allowed and must keep working); ``catalog`` marks a case only the job can decide, because it
depends on what the catalog holds (a table stored with a refused provider), not on the text.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from query_core.validation import GrammarElement as E

#: ``refused`` of a statement past the size or depth limits (refused before any parser reads it).
LIMIT = "limit"


@dataclass(frozen=True)
class Case:
    text: str
    #: The element the refusal names (either of a tuple's), LIMIT, or None: allowed.
    refused: E | tuple[E, ...] | str | None
    lang: str = "sql"
    #: Decided by what the catalog holds: the plugin cannot see it.
    catalog: bool = False
    #: Spark itself refuses the text (a parse or analysis error): the job never runs it either.
    spark_refuses: bool = False

    def fill(self, **places: object) -> str:
        return self.text.format(**places)

    @property
    def id(self) -> str:
        return self.text[:70]

    @property
    def flint(self) -> bool:
        """A Flint index statement (run by the Flint engine, checked by its own check)."""
        from query_core.flint import is_flint_statement

        return self.lang == "sql" and is_flint_statement(self.text)


def _case(text: str, refused: E | tuple[E, ...] | str | None, **kw: bool | str) -> Case:
    return Case(text, refused, **kw)  # type: ignore[arg-type]


HIVE2 = "url 'jdbc:hive2://127.0.0.1:{port}/default', dbtable 't', driver 'org.apache.hive.jdbc.HiveDriver'"
DERBY = "url 'jdbc:derby:memory:x;create=true', dbtable 'SYS.SYSTABLES'"

#: JDBC in every form a statement can name it.
JDBC = [
    _case(f"CREATE TEMPORARY VIEW j USING jdbc OPTIONS ({HIVE2})", E.DATA_SOURCE),
    _case(f"CREATE TEMPORARY VIEW j USING JDBC OPTIONS ({HIVE2})", E.DATA_SOURCE),
    _case(f"CREATE TEMPORARY VIEW j USING `jdbc` OPTIONS ({HIVE2})", E.DATA_SOURCE),
    _case(f"CREATE TEMPORARY VIEW j USING org.apache.spark.sql.jdbc OPTIONS ({HIVE2})", E.DATA_SOURCE),
    _case(
        f"CREATE TEMPORARY VIEW j USING org.apache.spark.sql.execution.datasources.jdbc OPTIONS ({HIVE2})",
        E.DATA_SOURCE,
    ),
    _case(
        "CREATE TEMPORARY VIEW j USING org.apache.spark.sql.execution.datasources.jdbc.JdbcRelationProvider "
        f"OPTIONS ({HIVE2})",
        E.DATA_SOURCE,
    ),
    _case(
        f"CREATE TEMPORARY VIEW j USING org.apache.spark.sql.execution.datasources.jdbc.DefaultSource OPTIONS ({DERBY})",
        E.DATA_SOURCE,
    ),
    _case(
        f"CREATE OR REPLACE TEMPORARY VIEW j USING jdbc OPTIONS ({DERBY}, sessionInitStatement 'CALL 1')", E.DATA_SOURCE
    ),
    _case(f"CREATE TABLE jt USING jdbc OPTIONS ({HIVE2})", E.DATA_SOURCE),
    _case(f"CREATE TABLE jt (a INT) USING jdbc OPTIONS ({DERBY})", E.DATA_SOURCE),
    _case(f"CREATE TABLE IF NOT EXISTS jt USING jdbc OPTIONS ({DERBY}) AS SELECT 1 AS a", E.DATA_SOURCE),
    _case(f"REPLACE TABLE jt USING jdbc OPTIONS ({DERBY}) AS SELECT 1 AS a", E.DATA_SOURCE),
    _case(f"EXPLAIN CREATE TABLE jt USING jdbc OPTIONS ({HIVE2})", E.DATA_SOURCE),
    _case(f'EXECUTE IMMEDIATE "CREATE TEMPORARY VIEW j USING jdbc OPTIONS ({HIVE2})"', E.DATA_SOURCE),
    _case(f"BEGIN CREATE TABLE jt USING jdbc OPTIONS ({DERBY}); END", E.DATA_SOURCE),
    _case("SELECT * FROM jdbc.`jdbc:derby:memory:x`", E.FILE),
    # A table stored with the jdbc provider (by another datasource, or before this check) is not read.
    _case("SELECT * FROM default.stored_jdbc", E.DATA_SOURCE, catalog=True),
    _case("SELECT count(*) FROM stored_jdbc", E.DATA_SOURCE, catalog=True),
    _case("SELECT * FROM default.over_stored_jdbc", E.DATA_SOURCE, catalog=True),
    _case("INSERT INTO stored_jdbc SELECT 'a', 'b', 'c', 'd', 'e'", E.DATA_SOURCE, catalog=True),
    _case("CREATE TABLE copy_of_jdbc LIKE stored_jdbc", E.DATA_SOURCE, catalog=True),
    _case("CACHE TABLE stored_jdbc", E.DATA_SOURCE, catalog=True),
]

#: What the catalog holds, written there without any check (by anyone who reaches the metastore,
#: another datasource's writer, an older version): tables, a view and a partition located at data
#: outside the warehouse (``{outside}/keep`` stands for another datasource's table) and at a file
#: outside every root. Only the job sees them, on Spark's resolution of each statement.
PLANTED = [
    _case("SELECT * FROM default.planted_lake", E.LOCATION, catalog=True),
    _case("SELECT count(*) FROM planted_file", E.LOCATION, catalog=True),
    _case("SELECT * FROM default.planted_view", E.LOCATION, catalog=True),
    _case("SELECT * FROM planted_view_file", E.FILE, catalog=True),
    _case("SELECT * FROM planted_view_reflect", E.MISC_FUNCTIONS, catalog=True),
    _case("SELECT * FROM wh_planted_part", E.LOCATION, catalog=True),
    _case("SELECT a FROM wh_planted_part WHERE k = 9", E.LOCATION, catalog=True),
    _case("SELECT a FROM wh_ok WHERE a IN (SELECT length(value) FROM planted_lake)", E.LOCATION, catalog=True),
    _case("EXECUTE IMMEDIATE 'SELECT * FROM planted_lake'", E.LOCATION, catalog=True),
    _case("INSERT INTO planted_lake SELECT 'written'", E.LOCATION, catalog=True),
    _case("INSERT OVERWRITE wh_planted_part PARTITION (k = 9) SELECT 1", E.LOCATION, catalog=True),
    _case("TRUNCATE TABLE planted_lake", E.LOCATION, catalog=True),
    _case("CREATE TABLE wh_copy USING parquet AS SELECT * FROM planted_lake", E.LOCATION, catalog=True),
    _case("CREATE TABLE planted_db.t USING parquet AS SELECT 1 AS a", E.LOCATION, catalog=True),
    _case("source = default.planted_lake", E.LOCATION, lang="ppl", catalog=True),
    _case("source = default.planted_view | fields value", E.LOCATION, lang="ppl", catalog=True),
    _case("source = default.wh_planted_part | where k = 9 | fields a", E.LOCATION, lang="ppl", catalog=True),
    # A table holding a partition outside is not read at all, whatever a filter keeps.
    _case("SELECT a FROM wh_planted_part WHERE k = 1", E.LOCATION, catalog=True),
    # What the catalog holds is shown.
    _case("DESCRIBE TABLE EXTENDED planted_lake", None, catalog=True),
    _case("SHOW PARTITIONS wh_planted_part", None, catalog=True),
]

#: Other providers: none of them is on the list.
PROVIDERS = [
    _case("CREATE TEMPORARY VIEW x USING xml OPTIONS (path '{wh}/x', rowTag 'r')", E.DATA_SOURCE),
    _case("CREATE TEMPORARY VIEW x USING noop", E.DATA_SOURCE),
    _case("CREATE TEMPORARY VIEW x USING socket OPTIONS (host '127.0.0.1', port '{port}')", E.DATA_SOURCE),
    _case("CREATE TEMPORARY VIEW x USING rate", E.DATA_SOURCE),
    _case("CREATE TEMPORARY VIEW x USING statestore OPTIONS (path '{cp}/x')", E.DATA_SOURCE),
    _case("CREATE TEMPORARY VIEW x USING opensearch OPTIONS (index '.query_execution_request_local')", E.DATA_SOURCE),
    _case("CREATE TEMPORARY VIEW x USING libsvm OPTIONS (path '{wh}/x')", E.DATA_SOURCE),
    _case("CREATE TABLE x (a INT) USING java.lang.String", E.DATA_SOURCE),
    _case("CREATE TABLE x (a INT) USING org.example.Missing", E.DATA_SOURCE),
    _case("CREATE TABLE x (a INT) ROW FORMAT SERDE 'org.example.EvilSerDe'", E.DATA_SOURCE),
    _case(
        "CREATE TABLE x (a INT) STORED AS INPUTFORMAT 'org.example.In' OUTPUTFORMAT 'org.example.Out'", E.DATA_SOURCE
    ),
    _case("CREATE TABLE x (a INT) USING hive OPTIONS (fileFormat 'org.example.Format')", E.DATA_SOURCE),
    _case("ALTER TABLE wh_ok SET SERDE 'org.example.EvilSerDe'", E.DATA_SOURCE),
]

#: Option keys as Spark reads them (case-insensitive) and values as it joins them (adjacent literals).
OPTIONS = [
    _case("CREATE TEMPORARY VIEW t USING text OPTIONS (PATH '{outside}/' 'secret.txt')", E.LOCATION),
    _case("CREATE TEMPORARY VIEW t USING text OPTIONS (Path '{outside}/secret.txt')", E.LOCATION),
    _case("CREATE TEMPORARY VIEW t USING text OPTIONS ('path' '{outside}/secret.txt')", E.LOCATION),
    _case("CREATE TEMPORARY VIEW t USING text OPTIONS (`path` = '{outside}/secret.txt')", E.LOCATION),
    _case("CREATE TEMPORARY VIEW t USING text OPTIONS (path '{wh}/' '../' 'outside/secret.txt')", E.LOCATION),
    _case("CREATE TEMPORARY VIEW t USING text OPTIONS (path r'{outside}/secret.txt')", E.LOCATION),
    _case("CREATE TEMPORARY VIEW t USING text OPTIONS (paths '[\"{outside}/secret.txt\"]')", E.DATA_SOURCE_OPTION),
    _case("CREATE TEMPORARY VIEW t USING text OPTIONS (path '{wh}/t', basePath '{outside}')", E.DATA_SOURCE_OPTION),
    _case("CREATE TABLE o (a INT) USING parquet OPTIONS ('fs.defaultFS' 'file:///')", E.DATA_SOURCE_OPTION),
    _case("CREATE TABLE o (a INT) USING parquet OPTIONS (fs.file.impl 'org.example.Fs')", E.DATA_SOURCE_OPTION),
    _case(
        "CREATE TABLE o (a INT) USING csv OPTIONS ('fs.s3a.endpoint' 'http://127.0.0.1:{port}')", E.DATA_SOURCE_OPTION
    ),
    # Where Spark's avro module is not enabled, the provider itself is refused.
    _case(
        "CREATE TABLE o (a STRING) USING avro OPTIONS (avroSchemaUrl 'file://{outside}/secret.txt')",
        (E.DATA_SOURCE_OPTION, E.DATA_SOURCE),
    ),
    _case("CREATE TABLE o (a INT) USING csv OPTIONS (header 'true', URL 'x')", E.DATA_SOURCE_OPTION),
    _case(
        "CREATE TABLE o (a INT) USING parquet TBLPROPERTIES ('avro.schema.url' = 'file://{outside}/secret.txt')",
        E.TABLE_PROPERTY,
    ),
    _case(
        "CREATE TABLE o (a INT) STORED AS TEXTFILE TBLPROPERTIES ('hive.exec.scratchdir' = '{outside}')",
        E.TABLE_PROPERTY,
    ),
    _case("ALTER TABLE wh_ok SET TBLPROPERTIES ('path' = '{outside}/x')", E.LOCATION),
    _case("ALTER TABLE wh_ok SET SERDEPROPERTIES ('path' = '{outside}')", E.LOCATION),
    _case("ALTER TABLE wh_ok SET SERDEPROPERTIES ('PATH' = '{wh}/x?/../../../outside')", E.LOCATION),
    _case("ALTER DATABASE default SET DBPROPERTIES ('location' = '{outside}')", E.TABLE_PROPERTY, spark_refuses=True),
    # Options of a table reference reach its data source (its path, Hadoop settings): none allowed.
    _case("SELECT * FROM default.wh_ok WITH ('PATH' = '{outside}/secret.txt')", E.DATA_SOURCE_OPTION),
    _case("SELECT * FROM wh_ok WITH ('basePath' = '{outside}', 'recursiveFileLookup' = 'true')", E.DATA_SOURCE_OPTION),
    _case("SELECT * FROM wh_ok WITH /* options */ (`fs.file.impl` = 'org.example.Fs')", E.DATA_SOURCE_OPTION),
    _case("INSERT INTO wh_ok WITH ('path' = '{outside}/w') SELECT 1", E.DATA_SOURCE_OPTION),
    _case("EXECUTE IMMEDIATE \"SELECT * FROM wh_ok WITH ('path' = '{outside}')\"", E.DATA_SOURCE_OPTION),
    _case("WITH w AS (SELECT 1 AS a) SELECT * FROM w", None),
]

#: Every path trick, at every place a path appears.
TRICKS = [
    "{outside}",
    "{outside}/t",
    "{wh}/x?/../../outside",
    "{wh}/x#/../../outside",
    "{wh}/x?y=/../../../outside",
    "{wh}/../outside",
    "{wh}/t/../../outside",
    "{wh}/%2e%2e/outside",
    "{wh}/%2E%2E/%2e%2e/outside",
    "file://{wh}/x?/../../outside",
    "file:{wh}/../outside",
    "{link}/t",
    "{link}",
    "outside/t",
    "{wh}",
    "file://otherhost{wh}/t",
    # Globs Spark expands: ``\..`` (SQL ``'\\..'``) becomes ``..`` there, whatever a path reading says.
    "{wh}/\\\\../\\\\../outside",
    "{wh}/[.][.]/outside",
    "{wh}/.{{.}}/outside",
    "{wh}/x*/../../outside",
    # A control character (Spark reads ``\u0000`` as a NUL), raw or %-escaped: no path holds one.
    "{wh}/t\\u0000x",
    "{wh}/t%00x",
]
PLACES = [
    "CREATE TABLE p (a INT) USING parquet LOCATION '{path}'",
    "CREATE TABLE p USING parquet LOCATION '{path}' AS SELECT 1 AS a",
    "CREATE TABLE p (a INT) USING parquet OPTIONS (path '{path}')",
    "CREATE TABLE p (a INT) STORED AS PARQUET LOCATION '{path}'",
    "CREATE TABLE p LIKE wh_ok LOCATION '{path}'",
    "CREATE TEMPORARY VIEW p USING csv OPTIONS (path '{path}')",
    "CREATE DATABASE p LOCATION '{path}'",
    "ALTER DATABASE default SET LOCATION '{path}'",
    "ALTER TABLE wh_ok SET LOCATION '{path}'",
    "ALTER TABLE wh_part ADD PARTITION (k = 9) LOCATION '{path}'",
    "ALTER TABLE wh_part PARTITION (k = 1) SET LOCATION '{path}'",
]
LOCATIONS = [_case(place.replace("{path}", trick), E.LOCATION) for place in PLACES for trick in TRICKS]

#: Flint checkpoints (written by streams, deleted by VACUUM) and extra_options.
FLINT = [
    *[
        _case(
            "CREATE INDEX by_k ON default.wh_ok (a) WITH (auto_refresh = true, checkpoint_location = '"
            + trick.replace("{wh}", "{cp}")
            + "')",
            E.CHECKPOINT_LOCATION,
        )
        for trick in TRICKS
        if trick != "{link}/t"
    ],
    _case(
        "CREATE SKIPPING INDEX ON default.wh_ok (a VALUE_SET) WITH (auto_refresh = true, checkpoint_location = '{cp}/x?/../..')",
        E.CHECKPOINT_LOCATION,
    ),
    _case(
        "CREATE MATERIALIZED VIEW default.mv_bad AS SELECT a FROM default.wh_ok "
        "WITH (auto_refresh = true, checkpoint_location = '{cp}/../outside')",
        E.CHECKPOINT_LOCATION,
    ),
    _case(
        "ALTER INDEX by_k ON default.wh_ok WITH (auto_refresh = true, checkpoint_location = '{cp}/a#/../../outside')",
        E.CHECKPOINT_LOCATION,
    ),
    _case(
        "CREATE INDEX by_k ON default.wh_ok (a) WITH (extra_options = "
        '\'{{"sink": {{"host": "127.0.0.1", "port": "{port}"}}}}\')',
        E.FLINT_OPTION,
    ),
    _case(
        'CREATE INDEX by_k ON default.wh_ok (a) WITH (extra_options = \'{{"sink": {{"HOST": "127.0.0.1"}}}}\')',
        E.FLINT_OPTION,
    ),
    _case(
        "CREATE INDEX by_k ON default.wh_ok (a) WITH (extra_options = "
        '\'{{"flint_spark_catalog_default_wh_ok_by_k_index": {{"auth.password": "x"}}}}\')',
        E.FLINT_OPTION,
    ),
    _case(
        "CREATE INDEX by_k ON default.wh_ok (a) WITH (extra_options = "
        '\'{{"default.wh_ok": {{"cleanSource": "delete", "sourceArchiveDir": "{outside}"}}}}\')',
        E.FLINT_OPTION,
    ),
    _case(
        'CREATE INDEX by_k ON default.wh_ok (a) WITH (extra_options = \'{{"default.wh_ok": {{"path": "{outside}"}}}}\')',
        E.FLINT_OPTION,
    ),
    # The index's settings and mappings: what the allow lists name, nothing that runs or reads,
    # and no more shards or replicas than the index cluster can give everyone.
    _case('CREATE INDEX by_k ON default.wh_ok (a) WITH (index_settings = \'{{"number_of_shards": 900}}\')', E.FLINT_OPTION),
    _case(
        'CREATE INDEX by_k ON default.wh_ok (a) WITH (index_settings = \'{{"index": {{"number_of_replicas": 900}}}}\')',
        E.FLINT_OPTION,
    ),
    _case('CREATE INDEX by_k ON default.wh_ok (a) WITH (index_settings = \'{{"refresh_interval": "1ms"}}\')', E.FLINT_OPTION),
    _case(
        'CREATE INDEX by_k ON default.wh_ok (a) WITH (index_settings = \'{{"index.default_pipeline": "p"}}\')',
        E.FLINT_OPTION,
    ),
    _case(
        "CREATE INDEX by_k ON default.wh_ok (a) WITH (index_settings = "
        '\'{{"index": {{"analysis": {{"filter": {{"f": {{"type": "synonym", "synonyms_path": "{outside}"}}}}}}}}}}\')',
        E.FLINT_OPTION,
    ),
    _case(
        "CREATE SKIPPING INDEX ON default.wh_ok (a VALUE_SET) WITH (index_mappings = "
        '\'{{"properties": {{"a": {{"type": "keyword", "script": {{"source": "1"}}}}}}}}\')',
        E.FLINT_OPTION,
    ),
    _case(
        'CREATE INDEX by_k ON default.wh_ok (a) WITH (index_mappings = \'{{"a": {{"type": "derived"}}}}\')',
        E.FLINT_OPTION,
    ),
    # The source table of a skipping or covering index is read as a query reads it.
    _case("CREATE SKIPPING INDEX ON text.`{outside}/secret.txt` (value VALUE_SET)", E.FILE),
    _case(
        "CREATE INDEX leak ON text.`{outside}` (value) WITH (auto_refresh = true, checkpoint_location = '{cp}/leak')",
        E.FILE,
    ),
    _case("REFRESH INDEX leak ON `text`.`{outside}`", E.FILE),
    _case("CREATE SKIPPING INDEX ON default.stored_jdbc (TABLEID VALUE_SET)", E.DATA_SOURCE, catalog=True),
    _case("CREATE INDEX leak ON stored_jdbc (TABLEID) WITH (auto_refresh = false)", E.DATA_SOURCE, catalog=True),
]

#: SET: only the settable keys, compared as Spark compares them.
SETTINGS = [
    _case("SET spark.sql.warehouse.dir={outside}", E.PROTECTED_CONFIG),
    _case("SET `spark.sql.warehouse.dir` = {outside}", E.PROTECTED_CONFIG),
    _case("SET spark.sql.sources.default=jdbc", E.PROTECTED_CONFIG),
    _case("SET spark.sql.sources.disabledJdbcConnProviderList=", E.PROTECTED_CONFIG),
    _case("SET spark.sql.runSQLOnFiles=true", E.PROTECTED_CONFIG),
    _case("SET spark.sql.ansi.doubleQuotedIdentifiers=true", E.PROTECTED_CONFIG),
    _case("SET spark.sql.legacy.createHiveTableByDefault=true", E.PROTECTED_CONFIG),
    _case("SET spark.hadoop.fs.defaultFS=file:///", E.PROTECTED_CONFIG),
    _case("SET spark.datasource.flint.host=127.0.0.1", E.PROTECTED_CONFIG),
    _case("SET spark.datasource.flint.host", E.PROTECTED_CONFIG),
    _case("SET spark.flint.validation.warehouseRoot=/", E.PROTECTED_CONFIG),
    _case("SET Spark.SQL.Shuffle.Partitions=3", E.PROTECTED_CONFIG),
    _case("RESET spark.sql.runSQLOnFiles", E.PROTECTED_CONFIG),
    _case("SET spark.sql.shuffle.partitions=3", None),
    _case("SET spark.sql.ansi.enabled=false", None),
    _case("SET spark.sql.session.timeZone=UTC", None),
    _case("SET TIME ZONE 'UTC'", None),
    _case("SET spark.flint.optimizer.enabled=true", None),
    _case("SET spark.flint.optimizer.covering.enabled=true", None),
    _case("SET spark.flint.index.hybridscan.enabled=false", None),
    _case("SET spark.sql.shuffle.partitions", None),
    _case("SET", None),
    _case("SET -v", None),
    # Every key: a warm pool job sets the second wall's keys (runSQLOnFiles, variable.substitute)
    # when a session claims it, and a RESET would put Spark's defaults back.
    _case("RESET", E.PROTECTED_CONFIG),
    _case("EXECUTE IMMEDIATE 'RESET'", E.PROTECTED_CONFIG),
    _case("BEGIN RESET; END", E.PROTECTED_CONFIG, spark_refuses=True),
    _case("RESET spark.sql.shuffle.partitions", None),
]

#: How deeply a statement may nest, before any parser reads it.
DEPTH = [
    _case("SELECT " + "(" * 20_000 + "1" + ")" * 20_000, LIMIT),
    _case("SELECT " + " + ".join(["1"] * 20_000), LIMIT),
    _case("SELECT * FROM " + "(SELECT * FROM " * 400 + "range(1)" + ")" * 400, LIMIT),
    _case("source = t | eval a = " + " + ".join(["1"] * 20_000), LIMIT, lang="ppl"),
    # Wide, not deep: past the size PPL's parser may read.
    _case("source = t | eval " + ", ".join(f"c{i} = a + {i}" for i in range(20_000)), LIMIT, lang="ppl"),
    # Comments nest as brackets do, and Spark's lexer spends more on each the deeper it opens: 8 KB
    # of them held a job's core for its whole prepare limit.
    _case("SELECT 1 " + "/*" * 2000 + " x " + "*/" * 2000, LIMIT),
    _case("SELECT 1 " + "/*" * 200 + " x " + "*/" * 200, LIMIT),
    _case("SELECT 1 " + "/*" * 1000, LIMIT),
    _case("SELECT 1 " + "/*/*/**/*/*/ " * 70_000, LIMIT),
    # Too costly to read: 880 KB of IN list, and what a string holds for Spark to read.
    _case("SELECT * FROM range(1) WHERE id IN (" + ",".join(["1"] * 440_000) + ")", LIMIT),
    _case("EXECUTE IMMEDIATE 'SELECT * FROM range(1) WHERE id IN (" + ",".join(["1"] * 60_000) + ")'", LIMIT),
    _case("SELECT from_json('[]', '" + "array<" * 200 + "int" + ">" * 200 + "')", LIMIT),
    _case("SELECT a" + ".a" * 2000 + " FROM (SELECT 1 AS a)", LIMIT),
    # A hint's start opens no comment inside one, as in Spark: what follows the first */ is read.
    _case("SELECT 1 /* /*+ */ , * FROM text.`{outside}/secret.txt` -- */", E.FILE),
]

#: What keeps working: warehouse tables, INSERT, the Dashboards statements, options, SET.
ALLOWED = [
    _case("SELECT 1 AS one", None),
    _case("CREATE TABLE IF NOT EXISTS default.wh_new (id INT, item STRING) USING parquet PARTITIONED BY (item)", None),
    _case("INSERT INTO default.wh_ok VALUES (1)", None),
    _case("SELECT a, count(*) FROM default.wh_ok GROUP BY a", None),
    _case("CREATE TABLE default.wh_loc (a INT) USING parquet LOCATION '{wh}/elsewhere/wh_loc'", None),
    _case(
        "CREATE TABLE default.wh_csv (a INT) USING csv OPTIONS (header 'true', Sep ',') LOCATION '{wh}/wh_csv'", None
    ),
    _case("CREATE TEMPORARY VIEW wh_view USING parquet OPTIONS (PATH '{wh}/' 'wh_ok')", None),
    _case("CREATE TABLE default.wh_ctas USING parquet AS SELECT 1 AS a", None),
    _case("SHOW SCHEMAS IN spark_catalog", None),
    _case("SHOW TABLE EXTENDED IN spark_catalog.default LIKE '*'", None),
    _case("DESC spark_catalog.default.wh_ok", None),
    _case("SELECT * FROM range(10) r(x) WHERE x IN (1, 2)", None),
    _case("SELECT CAST(1 AS DECIMAL(10, 2)), date_format(current_date(), 'yyyy'), explode(array(1, 2))", None),
    _case("SELECT * FROM default.wh_ok a JOIN default.wh_ok b ON a.a = b.a", None),
    _case(
        "CREATE TABLE default.wh_tbl (a INT) USING parquet TBLPROPERTIES ('purpose' = 'reports', 'parquet.compression' = 'zstd')",
        None,
    ),
    _case("source = default.wh_ok | where a > 0 | stats count() by a", None, lang="ppl"),
    _case(
        "CREATE INDEX by_k ON default.wh_ok (a) WITH (auto_refresh = false, extra_options = "
        '\'{{"default.wh_ok": {{"maxFilesPerTrigger": "10"}}, "sink": {{"batch_size": "50"}}}}\')',
        None,
    ),
    _case("CREATE INDEX by_k ON default.wh_ok (a) WITH (auto_refresh = true, checkpoint_location = '{cp}/by_k')", None),
    _case("VACUUM INDEX by_k ON default.wh_ok", None),
]

#: The whole corpus.
#: Functions given an options map: the options each format may hold, never a file or URL to read.
XSD = "map('rowValidationXSDPath', 'http://127.0.0.1:{port}/s.xsd')"
FUNCTIONS = [
    _case(f"SELECT from_xml('<a><b>1</b></a>', 'b STRING', {XSD})", E.DATA_SOURCE_OPTION),
    _case(
        "SELECT FROM_XML('<a><b>1</b></a>', 'b STRING', MAP('ROWVALIDATIONXSDPATH', '{outside}/secret.txt'))",
        E.DATA_SOURCE_OPTION,
    ),
    _case(f"SELECT schema_of_xml('<a><b>1</b></a>', {XSD})", E.DATA_SOURCE_OPTION),
    _case(f"SELECT to_xml(named_struct('b', 1), {XSD})", E.DATA_SOURCE_OPTION),
    _case(
        "SELECT from_xml(a, 'b STRING', str_to_map('rowValidationXSDPath:{outside}/secret.txt')) FROM wh_ok",
        E.DATA_SOURCE_OPTION,
    ),
    _case(
        "SELECT from_xml('<a/>', 'b STRING', map('rowTag', 'a', 'rowValidationXSDPath', '{outside}/x.xsd'))",
        E.DATA_SOURCE_OPTION,
    ),
    _case(
        "SELECT from_avro(X'00', '{{\"type\": \"int\"}}', map('avroSchemaUrl', 'file://{outside}/secret.txt'))",
        E.DATA_SOURCE_OPTION,
    ),
    _case(f"SELECT a FROM wh_ok WHERE from_xml('<a/>', 'b STRING', {XSD}).b IS NULL", E.DATA_SOURCE_OPTION),
    _case(
        f"CREATE INDEX by_x ON default.wh_ok (a) WHERE from_xml('<a/>', 'b STRING', {XSD}).b IS NULL",
        E.DATA_SOURCE_OPTION,
    ),
    _case(
        f"CREATE MATERIALIZED VIEW default.mv_xml AS SELECT from_xml('<a/>', 'b STRING', {XSD}) AS x FROM default.wh_ok",
        E.DATA_SOURCE_OPTION,
    ),
    _case("SELECT from_json('{{\"a\": 1}}', 'a INT', map('mode', 'FAILFAST', 'allowComments', 'true'))", None),
    _case("SELECT from_xml('<a><b>1</b></a>', 'b STRING', map('rowTag', 'a'))", None),
]

ALL: list[Case] = [*JDBC, *PLANTED, *PROVIDERS, *OPTIONS, *LOCATIONS, *FLINT, *SETTINGS, *DEPTH, *FUNCTIONS, *ALLOWED]


# -- the places and the catalog the corpus names ----------------------------------------------------


def make_places(wh: Path, cp: Path, outside: Path) -> Path:
    """The checkpoint root, what lies outside the roots (``secret.txt``, ``keep/keep.txt``) and a
    link in the warehouse to it (returned)."""
    cp.mkdir(parents=True, exist_ok=True)
    (outside / "keep").mkdir(parents=True, exist_ok=True)
    (outside / "secret.txt").write_text("the secret")
    (outside / "keep" / "keep.txt").write_text("keep me")
    link = wh / "hostile_link"
    if not link.exists():
        wh.mkdir(parents=True, exist_ok=True)
        os.symlink(outside, link)
    return link


def make_catalog(spark: Any, outside: Path) -> None:
    """The tables the corpus names, in ``spark``'s catalog, written by Spark straight, with no
    check: warehouse tables, a ``jdbc`` table (as another datasource or an older version could
    have stored it), and the :data:`PLANTED` tables, views, partition and database."""
    sql = spark.sql
    sql("CREATE TABLE IF NOT EXISTS default.wh_ok (a INT) USING parquet")
    sql("CREATE TABLE IF NOT EXISTS default.wh_part (a INT, k INT) USING parquet PARTITIONED BY (k)")
    sql("INSERT INTO default.wh_part VALUES (1, 1)")
    sql(
        "CREATE TABLE IF NOT EXISTS default.stored_jdbc USING jdbc "
        "OPTIONS (url 'jdbc:derby:memory:hostile;create=true', dbtable 'SYS.SYSTABLES')"
    )
    sql("CREATE OR REPLACE VIEW default.over_stored_jdbc AS SELECT * FROM default.stored_jdbc")
    sql(f"CREATE TABLE IF NOT EXISTS default.planted_lake (value STRING) USING text LOCATION '{outside / 'keep'}'")
    sql(
        f"CREATE TABLE IF NOT EXISTS default.planted_file (value STRING) USING text LOCATION '{outside / 'secret.txt'}'"
    )
    sql("CREATE OR REPLACE VIEW default.planted_view AS SELECT value FROM default.planted_lake")
    sql(f"CREATE OR REPLACE VIEW default.planted_view_file AS SELECT * FROM text.`{outside / 'secret.txt'}`")
    sql("CREATE OR REPLACE VIEW default.planted_view_reflect AS SELECT reflect('java.lang.System', 'getenv') AS env")
    sql("CREATE TABLE IF NOT EXISTS default.wh_planted_part (a INT, k INT) USING parquet PARTITIONED BY (k)")
    sql("INSERT OVERWRITE default.wh_planted_part PARTITION (k = 1) SELECT 1")
    sql(f"ALTER TABLE default.wh_planted_part ADD IF NOT EXISTS PARTITION (k = 9) LOCATION '{outside}'")
    sql(f"CREATE DATABASE IF NOT EXISTS planted_db LOCATION '{outside / 'planted_db'}'")


def drop_catalog(spark: Any) -> None:
    """What :func:`make_catalog` and the corpus's allowed statements made."""
    sql = spark.sql
    for view in ("over_stored_jdbc", "planted_view", "planted_view_file", "planted_view_reflect"):
        sql(f"DROP VIEW IF EXISTS default.{view}")
    for table in (
        "wh_ok", "wh_part", "wh_new", "wh_loc", "wh_csv", "wh_ctas", "wh_tbl", "stored_jdbc", "planted_lake",
        "planted_file", "wh_planted_part",
    ):  # fmt: skip
        sql(f"DROP TABLE IF EXISTS default.{table}")
    sql("DROP DATABASE IF EXISTS planted_db CASCADE")
    spark.catalog.dropTempView("wh_view")
