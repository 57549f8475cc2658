"""The reference's datasource dialect (docs/datasources.md): connector names, the Glue checks and
their messages, credentials masked in replies and sealed in the index, the Spark conf allow list,
the Glue composition of a job's conf, and PATCH as the reference applies it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from async_query import datasource_dialect as dialect
from async_query.datasources import Datasource, DatasourceRegistry, parse_datasource, parse_patch
from async_query.launcher.base import JobRequest, job_conf
from async_query.launcher.glue import ICEBERG_LF_FACTORY, glue_conf
from async_query.security.sealing import SEALED, Sealer
from async_query.settings import Settings
from query_core.config import OpenSearchConfig
from query_core.errors import DataSourceNotFoundError, InvalidRequestError
from query_core.ids import DATASOURCE_INDEX
from query_core.states import SessionType
from query_core.store import Store

ROLE = "arn:aws:iam::123456789012:role/glue-access"
PASSWORD = "s3cr3t-Pa$$ w0rd"


def s3_connection(**properties: str) -> dict[str, Any]:
    """What Dashboards' "Connect to Amazon S3" page POSTs (configure_datasource.tsx), basic auth."""
    return {
        "name": "my_glue",
        "allowedRoles": ["analyst"],
        "connector": "s3glue",
        "properties": {
            "glue.auth.type": "iam_role",
            "glue.auth.role_arn": ROLE,
            "glue.indexstore.opensearch.uri": "https://search-domain.us-west-2.es.amazonaws.com:443",
            "glue.indexstore.opensearch.auth": "basicauth",
            "glue.indexstore.opensearch.auth.username": "flint",
            "glue.indexstore.opensearch.auth.password": PASSWORD,
            **properties,
        },
    }


def refusal(body: dict[str, Any]) -> str:
    with pytest.raises(InvalidRequestError) as caught:
        parse_datasource(body)
    return caught.value.message


# -- connector names ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "connector", "engine"),
    [
        ("s3glue", "S3GLUE", ""),
        ("S3GLUE", "S3GLUE", ""),
        ("Security_Lake", "SECURITY_LAKE", ""),
        ("local", "S3GLUE", "local"),
        ("EMR_SERVERLESS", "S3GLUE", "emr-serverless"),
    ],
)
def test_connectors_are_read_in_any_case(given: str, connector: str, engine: str) -> None:
    assert dialect.connector_and_engine(given) == (connector, engine)


def test_this_product_s_connectors_become_an_engine_property() -> None:
    ds = parse_datasource({"name": "here", "connector": "local"})
    assert (ds.connector, ds.engine, ds.properties) == ("S3GLUE", "local", {"engine": "local"})
    assert ds.to_reply()["connector"] == "S3GLUE"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"name": "x", "connector": "prometheus"}, "connector PROMETHEUS is not served here"),
        ({"name": "x", "connector": "hive"}, "No DataSourceType with name hive found"),
        ({"name": "x"}, "Datasource configuration error: connector cannot be null or empty."),
        ({"connector": "s3glue"}, "Datasource configuration error: name cannot be null or empty."),
        ({"name": "x", "connector": "local", "extra": 1}, "Unknown field: extra"),
        ({"name": "bad name!", "connector": "local"}, "DataSource Name: bad name! contains illegal characters."),
        ({"name": "x", "connector": "local", "status": "paused"}, "No DataSourceStatus with text paused found"),
        (
            {"name": "x", "connector": "local", "resultIndex": "My_results"},
            "Result index name has invalid character. Valid characters are a-z, 0-9, -(hyphen) and "
            "_(underscore).Result index must start with query_execution_result",
        ),
    ],
)
def test_the_reference_s_messages(body: dict[str, Any], message: str) -> None:
    assert refusal(body).startswith(message)


# -- the Glue checks -----------------------------------------------------------------------------


def test_the_dashboards_s3_connection_is_accepted() -> None:
    ds = parse_datasource(s3_connection())
    assert (ds.connector, ds.engine, ds.glue_backed) == ("S3GLUE", "", True)
    assert ds.allowed_roles == ["analyst"]
    noauth = s3_connection()
    for key in ("glue.indexstore.opensearch.auth.username", "glue.indexstore.opensearch.auth.password"):
        del noauth["properties"][key]
    noauth["properties"]["glue.indexstore.opensearch.auth"] = "noauth"
    assert parse_datasource(noauth).glue_backed


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"glue.auth.role_arn": None, "glue.indexstore.opensearch.uri": None},
            "Missing [glue.auth.role_arn, glue.indexstore.opensearch.uri] fields in the connector properties.",
        ),
        (
            {"glue.indexstore.opensearch.auth.password": None},
            "Missing [glue.indexstore.opensearch.auth.password] fields in the connector properties.",
        ),
        (
            {"glue.indexstore.opensearch.auth": "awssigv4"},
            "Missing [glue.indexstore.opensearch.region] fields in the connector properties.",
        ),
        ({"glue.auth.role_arn": "a" * 1001}, "Fields [glue.auth.role_arn] exceeds more than 1000 characters."),
        ({"glue.indexstore.opensearch.uri": "not a uri"}, "Invalid flint host in properties."),
        ({"glue.indexstore.opensearch.auth": "kerberos"}, "glue.indexstore.opensearch.auth must be one of"),
        ({"glue.lakeformation.enabled": "true"}, "Lake Formation can only be enabled when Iceberg is enabled."),
        (
            {"glue.lakeformation.enabled": "true", "glue.iceberg.enabled": "true"},
            "Lake Formation session tag must be specified when enabling Lake Formation",
        ),
    ],
)
def test_glue_properties_are_checked_as_the_reference_checks_them(change: dict[str, str | None], message: str) -> None:
    body = s3_connection()
    for key, value in change.items():
        if value is None:
            del body["properties"][key]
        else:
            body["properties"][key] = value
    assert refusal(body).startswith(message)
    assert PASSWORD not in refusal(body)


def test_security_lake_turns_iceberg_and_lake_formation_on() -> None:
    body = {**s3_connection(), "connector": "SECURITY_LAKE"}
    assert refusal(body) == "glue.lakeformation.session_tag must be specified when using Security Lake data source"
    body["properties"]["glue.iceberg.enabled"] = "false"
    body["properties"]["glue.lakeformation.session_tag"] = "tag"
    assert refusal(body) == "glue.iceberg.enabled cannot be false when using Security Lake data source."
    del body["properties"]["glue.iceberg.enabled"]
    ds = parse_datasource(body)
    assert ds.properties["glue.iceberg.enabled"] == ds.properties["glue.lakeformation.enabled"] == "true"


def test_a_datasource_naming_its_engine_needs_no_glue_properties() -> None:
    assert parse_datasource({"name": "x", "connector": "S3GLUE", "properties": {"engine": "local"}}).engine == "local"
    assert refusal({"name": "x", "connector": "S3GLUE"}).startswith("Missing [")


# -- what a datasource may not set ---------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "spark.jars",
        "spark.jars.packages",
        "spark.driver.extraJavaOptions",
        "spark.executor.extraJavaOptions",
        "spark.driver.extraClassPath",
        "spark.extraListeners",
        "spark.sql.queryExecutionListeners",
        "spark.datasource.flint.host",
        "spark.datasource.flint.auth.password",
        "spark.flint.job.sessionId",
        "spark.flint.index.checkpointLocation.rootDir",
        "spark.flint.validation.deniedElements",
        "spark.executorEnv.PYTHONPATH",
        "spark.python.daemon.module",
        "spark.python.worker.module",
        "spark.emr-serverless.driverEnv.PYSPARK_PYTHON",
        "spark.plugins",
        "spark.sql.extensions",
        "spark.submit.pyFiles",
        "spark.archives",
        "spark.sql.catalog.x.extraJavaOptions",
        "spark.sql.catalog.x key",
    ],
)
def test_a_hostile_spark_conf_is_refused(key: str) -> None:
    message = refusal({"name": "x", "connector": "local", "sparkConf": {key: "v"}})
    assert message.startswith("sparkConf: ") and repr(key) in message


@pytest.mark.parametrize(
    "key",
    [
        "spark.sql.catalog.glue",
        "spark.sql.catalog.glue.warehouse",
        "spark.sql.catalogImplementation",
        "spark.sql.warehouse.dir",
        "spark.hadoop.hive.metastore.uris",
        "spark.hadoop.hive.metastore.client.factory.class",
        "spark.hive.metastore.glue.role.arn",
        "spark.executor.memory",
        "spark.executor.instances",
        "spark.dynamicAllocation.maxExecutors",
        "spark.emr-serverless.driver.disk",
    ],
)
def test_catalog_warehouse_resource_and_metastore_keys_are_allowed(key: str) -> None:
    assert parse_datasource({"name": "x", "connector": "local", "sparkConf": {key: "v"}}).spark_conf == {key: "v"}


def test_values_no_command_line_carries_are_refused() -> None:
    body = {"name": "x", "connector": "local", "sparkConf": {"spark.executor.memory": "4g\n--conf x=y"}}
    assert "control characters" in refusal(body)


@pytest.mark.parametrize("key", dialect.SERVICE_PROPERTIES)
def test_the_service_s_emr_settings_are_not_a_datasource_s(key: str) -> None:
    body = {"name": "x", "connector": "emr-serverless", "properties": {key: "s3://elsewhere/main.py"}}
    assert "come from the service's settings" in refusal(body)


# -- the job's conf ------------------------------------------------------------------------------


def test_the_job_s_own_settings_win_over_a_stored_spark_conf() -> None:
    # A datasource stored before the allow list: its refused keys never reach the job.
    ds = Datasource(
        name="old",
        connector="local",
        spark_conf={
            "spark.datasource.flint.host": "evil.example.com",
            "spark.jars": "http://evil/x.jar",
            "spark.sql.session.timeZone": "PST",
            "spark.executor.memory": "2g",
        },
    )
    conf, _ = job_conf(Settings(), ds, OpenSearchConfig(url="http://10.0.0.1:9200"), "sid", SessionType.INTERACTIVE)
    assert conf["spark.datasource.flint.host"] == "10.0.0.1"
    assert "spark.jars" not in conf
    assert conf["spark.sql.session.timeZone"] == "UTC"
    assert conf["spark.executor.memory"] == "2g"


def test_a_glue_datasource_on_emr_gets_the_reference_s_settings_and_its_index_store() -> None:
    ds = parse_datasource(s3_connection())
    own = OpenSearchConfig(url="http://127.0.0.1:9200", verify_certs=False)
    conf, secret = job_conf(Settings(), ds, own, "sid", SessionType.INTERACTIVE, glue_region="us-west-2")
    assert conf["spark.emr-serverless.driverEnv.ASSUME_ROLE_CREDENTIALS_ROLE_ARN"] == ROLE
    assert conf["spark.executorEnv.ASSUME_ROLE_CREDENTIALS_ROLE_ARN"] == ROLE
    assert conf["spark.hive.metastore.glue.role.arn"] == ROLE
    assert conf["spark.hadoop.hive.metastore.client.factory.class"].endswith("AWSGlueDataCatalogHiveClientFactory")
    assert conf["spark.flint.datasource.name"] == "my_glue"
    assert (conf["spark.datasource.flint.host"], conf["spark.datasource.flint.port"]) == (
        "search-domain.us-west-2.es.amazonaws.com",
        "443",
    )
    assert (conf["spark.datasource.flint.scheme"], conf["spark.datasource.flint.auth"]) == ("https", "basic")
    assert conf["spark.datasource.flint.auth.username"] == "flint"
    assert conf["spark.datasource.flint.verifyCerts"] == "false"  # the service's TLS setting stays
    assert secret == {"spark.datasource.flint.auth.password": PASSWORD}
    assert PASSWORD not in conf.values()
    assert "spark.sql.catalog.spark_catalog" not in conf  # no Iceberg unless asked
    # Run by local Spark, the same datasource uses the local catalog and the service's own index.
    local, _ = job_conf(Settings(), ds, own, "sid", SessionType.INTERACTIVE)
    assert local["spark.datasource.flint.host"] == "127.0.0.1"
    assert not any(key.startswith("spark.hive.") for key in local)


def test_iceberg_and_lake_formation_settings() -> None:
    props = {"glue.iceberg.enabled": "true", "glue.lakeformation.enabled": "true"}
    ds = parse_datasource(s3_connection(**props, **{"glue.lakeformation.session_tag": "team-a"}))
    conf = glue_conf(ds, "us-west-2")
    catalog = "spark.sql.catalog.spark_catalog"
    assert conf[catalog] == "org.apache.iceberg.spark.SparkSessionCatalog"
    assert conf[catalog + ".catalog-impl"] == "org.apache.iceberg.aws.glue.GlueCatalog"
    assert conf[catalog + ".glue.account-id"] == "123456789012"
    assert conf[catalog + ".client.region"] == conf[catalog + ".client.assume-role.region"] == "us-west-2"
    assert conf[catalog + ".client.factory"] == ICEBERG_LF_FACTORY
    assert conf[catalog + ".client.assume-role.tags.LakeFormationAuthorizedCaller"] == "team-a"
    assert conf["spark.flint.optimizer.covering.enabled"] == "false"
    assert conf["spark.jars.packages"].startswith("org.apache.iceberg:iceberg-spark-runtime")
    plain = glue_conf(parse_datasource(s3_connection(**{"glue.iceberg.enabled": "true"})), "us-west-2")
    assert plain[catalog + ".client.factory"] == "org.apache.iceberg.aws.AssumeRoleAwsClientFactory"


def test_a_sigv4_index_store_signs_in_its_region() -> None:
    body = s3_connection()
    body["properties"].update(
        {"glue.indexstore.opensearch.auth": "awssigv4", "glue.indexstore.opensearch.region": "eu-west-1"}
    )
    conf, secret = job_conf(
        Settings(), parse_datasource(body), OpenSearchConfig(), "sid", SessionType.INTERACTIVE, glue_region="us-west-2"
    )
    assert (conf["spark.datasource.flint.auth"], conf["spark.datasource.flint.region"]) == ("sigv4", "eu-west-1")
    assert secret == {} and "spark.datasource.flint.auth.username" not in conf


# -- replies, PATCH, the index -------------------------------------------------------------------


def test_replies_leave_credentials_out_as_the_reference_does() -> None:
    ds = parse_datasource(s3_connection(**{"x.auth.access_key": "AKIA", "x.auth.secret_key": "shh"}))
    reply = ds.to_reply()
    assert not [key for key in reply["properties"] if key.endswith(dialect.CONFIDENTIAL_SUFFIXES)]
    assert reply["properties"]["glue.indexstore.opensearch.auth"] == "basicauth"
    assert reply["resultIndex"] == "query_execution_result_my_glue"
    assert PASSWORD not in str(reply)
    # Nor in what a log line may show of the datasource, or of a job's request.
    assert PASSWORD not in repr(ds) and PASSWORD not in str(ds)
    conf, secret = job_conf(Settings(), ds, OpenSearchConfig(), "sid", SessionType.INTERACTIVE, glue_region="us-east-1")
    assert PASSWORD not in repr(JobRequest("sid", ds, SessionType.INTERACTIVE, conf, secret))


def test_patch_merges_properties_and_replaces_the_rest() -> None:
    current = parse_datasource(s3_connection())
    patched = parse_patch(
        current,
        {"name": "my_glue", "connector": "prometheus", "status": "disabled", "properties": {"glue.iceberg.enabled": "true"}},
    )
    assert (patched.connector, patched.status) == ("S3GLUE", "DISABLED")
    assert patched.properties["glue.indexstore.opensearch.auth.password"] == PASSWORD
    assert patched.properties["glue.iceberg.enabled"] == "true"
    assert parse_patch(patched, {"name": "my_glue", "status": "active"}).status == "ACTIVE"
    with pytest.raises(InvalidRequestError, match="Unknown field: colour"):
        parse_patch(current, {"name": "my_glue", "colour": "red"})


def test_credentials_are_sealed_in_the_index(store: Store) -> None:
    registry = DatasourceRegistry([], store)
    registry.create(parse_datasource(s3_connection()))
    raw = store.index.get(DATASOURCE_INDEX, "my_glue")
    assert raw is not None
    stored = raw.source["properties"]
    assert PASSWORD not in str(raw.source) and "flint" not in stored["glue.indexstore.opensearch.auth.username"]
    assert stored["glue.indexstore.opensearch.auth.password"].startswith(SEALED)
    found = registry.find("my_glue")
    assert found is not None and found.properties["glue.indexstore.opensearch.auth.password"] == PASSWORD
    # Under another key the credentials are unusable, and left out rather than passed on sealed.
    other = DatasourceRegistry([], store, sealer=Sealer.ephemeral()).find("my_glue")
    assert other is not None and "glue.indexstore.opensearch.auth.password" not in other.properties


@pytest.mark.parametrize(
    "key",
    [
        "x.auth.PASSWORD", "Password", "db.passwordFile", "x.Secret.value", "api_TOKEN", "sessionToken", "KEY",
        "x.private_key_id", "db.passwd", "x.PWD", "gcs.credentials",
    ],
)  # fmt: skip
def test_a_key_naming_a_credential_in_any_case_and_place_is_masked_and_sealed(store: Store, key: str) -> None:
    """Not only the reference's exact lower-case suffixes: ``password``, ``secret``, ``token`` and
    ``key`` anywhere in a property's or a Spark conf key, in any case."""
    assert dialect.is_confidential(key)
    conf_key = "spark.hadoop.fs.s3a." + key
    body = {"name": "odd", "connector": "local", "properties": {key: PASSWORD}, "sparkConf": {conf_key: PASSWORD}}
    ds = parse_datasource(body)
    reply = ds.to_reply()
    assert key not in reply["properties"] and conf_key not in reply["sparkConf"]
    assert PASSWORD not in str(reply) and PASSWORD not in repr(ds)
    registry = DatasourceRegistry([], store)
    registry.create(ds)
    raw = store.index.get(DATASOURCE_INDEX, "odd")
    assert raw is not None and PASSWORD not in str(raw.source)
    assert raw.source["properties"][key].startswith(SEALED) and raw.source["sparkConf"][conf_key].startswith(SEALED)
    found = registry.find("odd")
    assert found is not None and found.properties[key] == PASSWORD and found.spark_conf[conf_key] == PASSWORD


@pytest.mark.parametrize(
    "value",
    ["jdbc:mysql://db:3306/metastore?user=hive&password=" + PASSWORD, "thrift://hive:" + PASSWORD + "@metastore:9083"],
)
def test_a_value_holding_a_credential_is_left_out_of_replies(value: str) -> None:
    """A connection URL with a password in it, whatever its key is called."""
    body = {"name": "odd", "connector": "local", "properties": {"metastore": value}}
    reply = parse_datasource(body).to_reply()
    assert "metastore" not in reply["properties"] and PASSWORD not in str(reply)
    assert dialect.holds_credential("metastore", value) and not dialect.holds_credential("uri", "thrift://metastore:9083")


def test_keys_naming_no_credential_stay_in_replies() -> None:
    ds = parse_datasource(s3_connection(**{"glue.iceberg.enabled": "true"}))
    shown = set(ds.to_reply()["properties"])
    assert {"glue.auth.type", "glue.auth.role_arn", "glue.indexstore.opensearch.uri", "glue.iceberg.enabled"} <= shown
    assert not any(dialect.is_confidential(key) for key in ("engine", "master", "validation.allow", "executionRoleARN"))


def test_an_update_replaces_the_whole_document(store: Store) -> None:
    registry = DatasourceRegistry([], store)
    registry.create(parse_datasource(s3_connection(**{"glue.iceberg.enabled": "true"})))
    registry.update(parse_datasource(s3_connection()))
    found = registry.find("my_glue")
    assert found is not None and "glue.iceberg.enabled" not in found.properties
    with pytest.raises(DataSourceNotFoundError, match="Datasource with name: nope doesn't exist"):
        registry.update(parse_datasource({**s3_connection(), "name": "nope"}))


def test_the_number_of_datasources_is_bounded(store: Store) -> None:
    registry = DatasourceRegistry([], store)
    registry.limit = 2
    for name in ("a", "b"):
        registry.create(parse_datasource({"name": name, "connector": "local"}))
    with pytest.raises(InvalidRequestError, match="domain concurrent datasources can not exceed 2"):
        registry.create(parse_datasource({"name": "c", "connector": "local"}))


def test_the_key_file_is_made_once_and_private(tmp_path: Path) -> None:
    sealed = Sealer.from_settings("", tmp_path).seal("pw")
    key = tmp_path / "datasources.key"
    assert key.stat().st_mode & 0o777 == 0o600
    assert Sealer.from_settings("", tmp_path).unseal(sealed) == "pw"
    assert Sealer.from_settings("a master key", tmp_path).unseal(sealed) is None
    assert Sealer.from_settings("a master key", tmp_path / "x").unseal(
        Sealer.from_settings("a master key", tmp_path).seal("pw")
    ) == "pw"
