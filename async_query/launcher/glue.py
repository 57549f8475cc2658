"""A Glue-backed datasource's job settings, as the reference's
``S3GlueDataSourceSparkParameterComposer`` makes them (docs/datasources.md).

The Glue catalog reached with the datasource's role, Iceberg and Lake Formation when its properties
turn them on, and its index store as the job's index connection. This product's job is PySpark, so
the reference's JVM pieces are left out: the Flint jars and extensions, and the delegating catalog
under the datasource's name (the job rewrites that name to the session catalog; docs/flint.md).
"""

from __future__ import annotations

from async_query import datasource_dialect as dialect
from async_query.datasources import Datasource
from query_core.config import OpenSearchConfig

# The reference's keys and values (SparkConstants).
S3_CREDENTIALS_PROVIDER = "spark.hadoop.fs.s3.customAWSCredentialsProvider"
EMR_ASSUME_ROLE_PROVIDER = "com.amazonaws.emr.AssumeRoleAWSCredentialsProvider"
GLUE_CREDENTIALS_FACTORY = "spark.hadoop.aws.catalog.credentials.provider.factory.class"
GLUE_STS_FACTORY = "com.amazonaws.glue.catalog.metastore.STSAssumeRoleSessionCredentialsProviderFactory"
HIVE_CLIENT_FACTORY = "spark.hadoop.hive.metastore.client.factory.class"
GLUE_HIVE_FACTORY = "com.amazonaws.glue.catalog.metastore.AWSGlueDataCatalogHiveClientFactory"
DRIVER_ROLE = "spark.emr-serverless.driverEnv.ASSUME_ROLE_CREDENTIALS_ROLE_ARN"
EXECUTOR_ROLE = "spark.executorEnv.ASSUME_ROLE_CREDENTIALS_ROLE_ARN"
GLUE_ROLE = "spark.hive.metastore.glue.role.arn"
SPARK_CATALOG = "spark.sql.catalog.spark_catalog"
ICEBERG_JARS = "org.apache.iceberg:iceberg-spark-runtime-3.3_2.12:1.5.0,software.amazon.awssdk:bundle:2.26.30"
ICEBERG_SESSION_CATALOG = "org.apache.iceberg.spark.SparkSessionCatalog"
ICEBERG_GLUE_CATALOG = "org.apache.iceberg.aws.glue.GlueCatalog"
ICEBERG_EXTENSION = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
ICEBERG_ASSUME_ROLE_FACTORY = "org.apache.iceberg.aws.AssumeRoleAwsClientFactory"
ICEBERG_LF_FACTORY = "org.apache.iceberg.aws.lakeformation.LakeFormationAwsClientFactory"


def account_of(role_arn: str) -> str:
    """The account of an ARN (``arn:aws:iam::<account>:role/<name>``)."""
    parts = role_arn.split(":")
    return parts[4] if len(parts) > 5 else ""


def glue_conf(datasource: Datasource, region: str) -> dict[str, str]:
    """The Glue catalog, Iceberg and Lake Formation settings of ``datasource``'s jobs on EMR
    Serverless in ``region`` (the engine's region, as the reference reads it from its settings)."""
    props = datasource.properties
    role = props[dialect.GLUE_ROLE_ARN]
    conf = {
        "spark.sql.catalogImplementation": "hive",
        HIVE_CLIENT_FACTORY: GLUE_HIVE_FACTORY,
        GLUE_CREDENTIALS_FACTORY: GLUE_STS_FACTORY,
        S3_CREDENTIALS_PROVIDER: EMR_ASSUME_ROLE_PROVIDER,
        DRIVER_ROLE: role,
        EXECUTOR_ROLE: role,
        GLUE_ROLE: role,
    }
    if _on(props, dialect.GLUE_ICEBERG_ENABLED):
        conf.update(_iceberg(props, role, region))
    return conf


def _on(props: dict[str, str], key: str) -> bool:
    return (props.get(key) or "").strip().lower() in ("true", "yes", "on", "y", "t")


def _iceberg(props: dict[str, str], role: str, region: str) -> dict[str, str]:
    conf = {
        "spark.jars.packages": ICEBERG_JARS,
        SPARK_CATALOG: ICEBERG_SESSION_CATALOG,
        SPARK_CATALOG + ".catalog-impl": ICEBERG_GLUE_CATALOG,
        "spark.sql.extensions": ICEBERG_EXTENSION,
        SPARK_CATALOG + ".client.region": region,
        SPARK_CATALOG + ".glue.account-id": account_of(role),
        SPARK_CATALOG + ".client.assume-role.arn": role,
        SPARK_CATALOG + ".client.assume-role.region": region,
        "spark.sql.iceberg.handle-timestamp-without-timezone": "true",
    }
    if _on(props, dialect.GLUE_LAKEFORMATION_ENABLED):
        conf.update(
            {
                "spark.flint.optimizer.covering.enabled": "false",
                SPARK_CATALOG + ".glue.lakeformation-enabled": "true",
                SPARK_CATALOG + ".client.factory": ICEBERG_LF_FACTORY,
                SPARK_CATALOG + ".client.assume-role.tags.LakeFormationAuthorizedCaller": props[
                    dialect.GLUE_LAKEFORMATION_SESSION_TAG
                ],
            }
        )
    else:
        conf[SPARK_CATALOG + ".client.factory"] = ICEBERG_ASSUME_ROLE_FACTORY
    return conf


def index_store_connection(datasource: Datasource, base: OpenSearchConfig) -> OpenSearchConfig:
    """The job's index connection: the datasource's index store (its URI and authentication), with
    ``base``'s TLS and retry settings."""
    props = datasource.properties
    scheme, host, port = dialect.index_store(props)
    netloc = f"[{host}]" if ":" in host else host
    auth = dialect.AUTH_TYPES[props[dialect.GLUE_INDEX_STORE_AUTH].strip().lower()]
    basic = auth == "basic"
    return base.model_copy(
        update={
            "url": f"{scheme}://{netloc}" + (f":{port}" if port is not None else ""),
            "auth": auth,
            "username": props.get(dialect.GLUE_INDEX_STORE_USERNAME, "") if basic else "",
            "password": props.get(dialect.GLUE_INDEX_STORE_PASSWORD, "") if basic else "",
            "region": props.get(dialect.GLUE_INDEX_STORE_REGION, base.region) if auth == "sigv4" else base.region,
        }
    )
