"""The reference's datasource dialect, and what a datasource may not do (docs/datasources.md).

- Connector names: the reference's ``S3GLUE`` and ``SECURITY_LAKE`` (any case, as Dashboards sends
  ``s3glue``); this product's ``local`` and ``emr-serverless`` are accepted as input and become an
  ``S3GLUE`` datasource whose ``engine`` property names what runs it.
- The ``glue.*`` properties, checked as the reference's ``GlueDataSourceFactory`` and
  ``SecurityLakeDataSourceFactory`` check them, with their messages.
- Credentials: properties and Spark conf keys that name a credential (the reference's confidential
  keys, and any key holding ``password``, ``secret``, ``token`` or ``key`` in any case) never leave
  in a reply, and are sealed in the index.
- The Spark conf a datasource may set (an allow list) and the properties it may not set at all
  (the EMR Serverless application, entry point and parameters are the service's).

Every check raises :class:`InvalidRequestError` (a 400) whose message never holds a property's value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import urlsplit

from query_core.errors import InvalidRequestError

S3GLUE = "S3GLUE"
SECURITY_LAKE = "SECURITY_LAKE"
CONNECTORS = (S3GLUE, SECURITY_LAKE)
#: The reference's other connector types: known names, not served here.
OTHER_REFERENCE_CONNECTORS = ("PROMETHEUS", "OPENSEARCH")

#: The property naming what runs a datasource's queries.
ENGINE = "engine"
LOCAL = "local"
EMR_SERVERLESS = "emr-serverless"
ENGINES = (LOCAL, EMR_SERVERLESS)

# -- the reference's Glue properties (GlueDataSourceFactory) ------------------------------------
GLUE_AUTH_TYPE = "glue.auth.type"
GLUE_ROLE_ARN = "glue.auth.role_arn"
GLUE_INDEX_STORE_URI = "glue.indexstore.opensearch.uri"
GLUE_INDEX_STORE_AUTH = "glue.indexstore.opensearch.auth"
GLUE_INDEX_STORE_USERNAME = "glue.indexstore.opensearch.auth.username"
GLUE_INDEX_STORE_PASSWORD = "glue.indexstore.opensearch.auth.password"
GLUE_INDEX_STORE_REGION = "glue.indexstore.opensearch.region"
GLUE_ICEBERG_ENABLED = "glue.iceberg.enabled"
GLUE_LAKEFORMATION_ENABLED = "glue.lakeformation.enabled"
GLUE_LAKEFORMATION_SESSION_TAG = "glue.lakeformation.session_tag"
GLUE_PREFIX = "glue."
MAX_PROPERTY_LENGTH = 1000

#: The index store's authentication types, as the reference names them (``AuthenticationType``),
#: and the job's ``spark.datasource.flint.auth`` for each. ``awssigv4auth`` is taken for ``awssigv4``.
AUTH_TYPES = {"noauth": "noauth", "basicauth": "basic", "awssigv4": "sigv4", "awssigv4auth": "sigv4"}

#: The reference's confidential keys (``DataSourceServiceImpl.CONFIDENTIAL_AUTH_KEYS``): a
#: property whose key ends with one is removed from every reply, and sealed in the index.
CONFIDENTIAL_SUFFIXES = ("auth.username", "auth.password", "auth.access_key", "auth.secret_key")
#: Beyond the reference's list, any key naming a credential, wherever the word stands and in any
#: case (``x.auth.PASSWORD``, ``fs.s3a.secret.key``, ``SessionToken``): a key that is not a
#: credential but matches loses nothing but its place in replies (its value is still used).
CONFIDENTIAL_WORDS = re.compile(r"passw|pwd|secret|token|key|credential", re.IGNORECASE)
#: A value that holds a credential whatever its key is named: a URL's ``user:password@`` or a
#: ``password=`` parameter (``jdbc:mysql://db/metastore?user=hive&password=...``).
CREDENTIAL_IN_VALUE = re.compile(r"://[^/?#@]*:[^/?#@]*@|(?:passw\w*|pwd)=", re.IGNORECASE)

#: Properties that belong to the service's settings, never to a datasource.
SERVICE_PROPERTIES = ("applicationId", "region", "entryPoint", "pyFiles", "packageS3Uri", "sparkSubmitParameters")
#: A datasource may name one of the execution roles the service's settings list.
EXECUTION_ROLE = "executionRoleARN"
#: Idle jobs kept started for its sessions (docs/datasources.md; the deployment's
#: ``warm_pool_size`` when absent).
WARM_POOL_SIZE = "warmPoolSize"
MAX_WARM_POOL_SIZE = 64


def connector_and_engine(raw: object) -> tuple[str, str]:
    """The connector a client named, as the reference names it, and the engine it implies ("":
    the deployment's). ``local`` and ``emr-serverless`` (any case, ``_`` for ``-``) are this
    product's own names: an ``S3GLUE`` datasource on that engine."""
    if raw is None or raw == "":
        raise InvalidRequestError("Datasource configuration error: connector cannot be null or empty.")
    if not isinstance(raw, str):
        raise InvalidRequestError("connector must be a string")
    upper = raw.strip().upper()
    if upper in CONNECTORS:
        return upper, ""
    engine = raw.strip().lower().replace("_", "-")
    if engine in ENGINES:
        return S3GLUE, engine
    if upper in OTHER_REFERENCE_CONNECTORS:
        raise InvalidRequestError(
            f"connector {upper} is not served here: this service runs Spark queries ({', '.join(CONNECTORS)})"
        )
    raise InvalidRequestError(f"No DataSourceType with name {raw} found")


def is_confidential(key: str) -> bool:
    """Whether a property or Spark conf key names a credential (left out of replies, sealed)."""
    return key.lower().endswith(CONFIDENTIAL_SUFFIXES) or CONFIDENTIAL_WORDS.search(key) is not None


def holds_credential(key: str, value: str) -> bool:
    """Whether a property or Spark conf entry holds a credential: by its key, or by its value
    (a connection URL with a password in it). Such an entry is left out of replies and never put
    on a command line."""
    return is_confidential(key) or CREDENTIAL_IN_VALUE.search(value) is not None


def masked(properties: Mapping[str, str]) -> dict[str, str]:
    """``properties`` (or a Spark conf) without the entries holding a credential, as the
    reference's replies leave out the confidential keys."""
    return {key: value for key, value in properties.items() if not holds_credential(key, value)}


def is_glue_backed(connector: str, properties: Mapping[str, str]) -> bool:
    """Whether a datasource is the reference's kind, with a Glue catalog and an index store of its
    own: a ``SECURITY_LAKE`` one, or one holding any ``glue.*`` property."""
    return connector == SECURITY_LAKE or any(key.startswith(GLUE_PREFIX) for key in properties)


def needs_glue_check(connector: str, properties: Mapping[str, str]) -> bool:
    """Whether a datasource a client sent is checked by the reference's Glue rules: a Glue-backed
    one, and any that names no engine (as Dashboards creates them). One naming its ``engine`` and
    no ``glue.*`` key is this product's own kind."""
    return is_glue_backed(connector, properties) or ENGINE not in properties


def _true(value: str | None) -> bool:
    """``BooleanUtils.toBoolean`` as the reference reads its flags (true, yes, on, y, t)."""
    return (value or "").strip().lower() in ("true", "yes", "on", "y", "t")


def _require(properties: Mapping[str, str], keys: set[str]) -> None:
    """The reference's ``validateLengthAndRequiredFields``, with its messages (keys sorted)."""
    missing = sorted(key for key in keys if key not in properties)
    too_long = sorted(key for key in keys if key in properties and len(properties[key]) > MAX_PROPERTY_LENGTH)
    message = ""
    if missing:
        message += f"Missing [{', '.join(missing)}] fields in the connector properties."
    if too_long:
        message += f"Fields [{', '.join(too_long)}] exceeds more than {MAX_PROPERTY_LENGTH} characters."
    if message:
        raise InvalidRequestError(message)


def check_glue(connector: str, properties: dict[str, str]) -> dict[str, str]:
    """The reference's checks of a Glue-backed datasource; returns its properties (a Security Lake
    datasource's with Iceberg and Lake Formation turned on, as the reference does)."""
    if connector == SECURITY_LAKE:
        properties = _check_security_lake(properties)
    _require(properties, {GLUE_AUTH_TYPE, GLUE_ROLE_ARN, GLUE_INDEX_STORE_URI, GLUE_INDEX_STORE_AUTH})
    auth = properties[GLUE_INDEX_STORE_AUTH].strip().lower()
    if auth not in AUTH_TYPES:
        raise InvalidRequestError(
            f"{GLUE_INDEX_STORE_AUTH} must be one of {', '.join(a for a in AUTH_TYPES if a != 'awssigv4auth')}"
        )
    if AUTH_TYPES[auth] == "basic":
        _require(properties, {GLUE_INDEX_STORE_USERNAME, GLUE_INDEX_STORE_PASSWORD})
    elif AUTH_TYPES[auth] == "sigv4":
        _require(properties, {GLUE_INDEX_STORE_REGION})
    index_store(properties)
    if not properties[GLUE_ROLE_ARN].startswith("arn:"):
        raise InvalidRequestError(f"{GLUE_ROLE_ARN} must be an IAM role ARN")
    if _true(properties.get(GLUE_LAKEFORMATION_ENABLED)):
        if not _true(properties.get(GLUE_ICEBERG_ENABLED)):
            raise InvalidRequestError("Lake Formation can only be enabled when Iceberg is enabled.")
        if not (properties.get(GLUE_LAKEFORMATION_SESSION_TAG) or "").strip():
            raise InvalidRequestError("Lake Formation session tag must be specified when enabling Lake Formation")
    return properties


def _check_security_lake(properties: dict[str, str]) -> dict[str, str]:
    for flag in (GLUE_ICEBERG_ENABLED, GLUE_LAKEFORMATION_ENABLED):
        if properties.get(flag) is not None and not _true(properties[flag]):
            raise InvalidRequestError(f"{flag} cannot be false when using Security Lake data source.")
    if not (properties.get(GLUE_LAKEFORMATION_SESSION_TAG) or "").strip():
        raise InvalidRequestError(
            f"{GLUE_LAKEFORMATION_SESSION_TAG} must be specified when using Security Lake data source"
        )
    return {**properties, GLUE_ICEBERG_ENABLED: "true", GLUE_LAKEFORMATION_ENABLED: "true"}


def index_store(properties: Mapping[str, str]) -> tuple[str, str, int | None]:
    """The index store's scheme, host and port (None: the scheme's default), from its URI."""
    try:
        parts = urlsplit(properties[GLUE_INDEX_STORE_URI].strip())
        port = parts.port
    except ValueError:
        raise InvalidRequestError("Invalid flint host in properties.") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidRequestError("Invalid flint host in properties.")
    return parts.scheme, parts.hostname, port


def check_service_properties(properties: Mapping[str, str]) -> None:
    """Refuse the properties that only the service's settings may set."""
    named = sorted(key for key in SERVICE_PROPERTIES if key in properties)
    if named:
        raise InvalidRequestError(
            f"properties {', '.join(named)} cannot be set on a datasource: the EMR Serverless application, "
            "region, entry point and parameters come from the service's settings "
            "(ASYNC_QUERY_SPARK_EXECUTION_ENGINE_CONFIG)"
        )


# -- the Spark conf a datasource may set ---------------------------------------------------------

#: Keys a datasource's ``sparkConf`` may set exactly.
ALLOWED_CONF_KEYS = frozenset(
    {
        "spark.sql.catalogImplementation",
        "spark.sql.warehouse.dir",
        "spark.sql.shuffle.partitions",
        "spark.default.parallelism",
        "spark.driver.cores",
        "spark.driver.memory",
        "spark.driver.memoryOverhead",
        "spark.executor.cores",
        "spark.executor.memory",
        "spark.executor.memoryOverhead",
        "spark.executor.instances",
        "spark.emr-serverless.driver.disk",
        "spark.emr-serverless.executor.disk",
        "spark.emr-serverless.lakeformation.enabled",
    }
)
#: Key prefixes it may set: catalogs, Hive and Glue metastore settings, S3 access, scaling.
ALLOWED_CONF_PREFIXES = (
    "spark.sql.catalog.",
    "spark.hadoop.hive.",
    "spark.hive.",
    "spark.hadoop.aws.glue.",
    "spark.hadoop.fs.s3a.",
    "spark.dynamicAllocation.",
    "spark.sql.adaptive.",
)
#: Never, whatever the lists above say: code, listeners, JVM options and the job's own settings.
DENIED_CONF_PATTERNS = (
    re.compile(r"^spark\.jars"),
    re.compile(r"\.extraListeners$", re.IGNORECASE),
    re.compile(r"extraJavaOptions$", re.IGNORECASE),
    re.compile(r"extra(Class|Library)Path$", re.IGNORECASE),
    re.compile(r"^spark\.datasource\.flint\."),
    re.compile(r"^spark\.flint\."),
)
_CONF_KEY = re.compile(r"[A-Za-z0-9_.\-]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def conf_key_refusal(key: str) -> str:
    """Why a datasource may not set Spark conf ``key`` ("": it may)."""
    if not _CONF_KEY.fullmatch(key):
        return "is not a Spark conf key"
    if any(pattern.search(key) for pattern in DENIED_CONF_PATTERNS):
        return "is the job's own or loads code"
    if key in ALLOWED_CONF_KEYS or key.startswith(ALLOWED_CONF_PREFIXES):
        return ""
    return "is not on the allow list (docs/datasources.md)"


def check_spark_conf(conf: Mapping[str, str]) -> None:
    """Refuse a ``sparkConf`` that names a key off the allow list, or a value no command line can carry."""
    refused = [f"{key!r} {why}" for key, why in ((k, conf_key_refusal(k)) for k in conf) if why]
    if refused:
        raise InvalidRequestError(f"sparkConf: {'; '.join(sorted(refused))}")
    bad = sorted(key for key, value in conf.items() if _CONTROL.search(value))
    if bad:
        raise InvalidRequestError(f"sparkConf: the values of {', '.join(bad)} hold control characters")


def allowed_spark_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """The keys of ``conf`` a datasource may set (what was stored before the allow list existed is
    filtered again where a job's conf is made)."""
    return {key: value for key, value in conf.items() if not conf_key_refusal(key) and not _CONTROL.search(value)}
