"""Each local datasource's catalog is its own, and its jobs run as the job user (docs/datasources.md,
docs/security.md): real spark-submit jobs of two datasources, each with its own metastore.

Bob may query ``local`` but not ``lake``. The admin keeps a table in ``lake``; from a ``local``
session Bob can neither name it (another datasource's catalog), find it under ``local``'s own
names, nor point a table of his at its files. The jobs and metastores run as the job user (the
suite runs as root, as CI does), and what Spark wrote is theirs alone.

Nor can anyone else point ``local``'s catalog at ``lake``'s files for him: a copy of ``lake``'s table,
a view and partitions written straight into ``local``'s metastore through its Thrift API (as any
local process can), at ``lake``'s data and at a directory outside every root, are refused by the
job in SQL and PPL, and no row comes back (docs/validation.md, "What the catalog holds").
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from async_query.datasources import Datasource, DatasourceRegistry
from async_query.embedded.catalogs import LocalCatalogs
from async_query.launcher.local import LocalLauncher
from async_query.runtime import Plugin, build_plugin
from async_query.security.errors import ForbiddenError
from async_query.security.job_user import JobUser
from async_query.security.principal import Principal
from async_query.service import SubmitRequest
from async_query.settings import Settings
from query_core.errors import InvalidRequestError
from query_core.ids import datasource_of
from query_core.store import Store
from tests import planted
from tests.node import index_config
from tests.support import wait_for

pytestmark = pytest.mark.e2e

ADMIN = Principal.of("alice", ["all_access"])
BOB = Principal.of("bob", ["analysts"])
TERMINAL = {"SUCCESS", "FAILED", "CANCELLED", "TIMEOUT"}


@pytest.fixture(scope="module")
def plugin(module_index_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plugin]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("isolation") / "var")
    opensearch = index_config(module_index_url)
    catalogs = LocalCatalogs(settings.data_dir, JobUser.resolve(), heap_mb=256)
    launcher = LocalLauncher(
        settings.data_dir,
        settings.cluster_name,
        "local[2]",
        java_options=settings.local_job_java_options,
        class_archive=settings.local_job_class_archive_dir,
        catalogs=catalogs,
    )
    store = Store.connect(opensearch)
    datasources = [
        Datasource(name="local", connector="local", allowed_roles=["analysts"]),
        Datasource(name="lake", connector="local", allowed_roles=["lake_team"]),
    ]
    made = build_plugin(settings, store, DatasourceRegistry(datasources, store), {"local": launcher}, opensearch)
    try:
        yield made
    finally:
        made.close()
        catalogs.close()


def submit(plugin: Plugin, who: Principal, ds: str, query: str, session: str | None = None) -> tuple[str, str]:
    submitted = plugin.service.submit(SubmitRequest(ds, "sql", query, session, principal=who))
    return submitted.query_id, submitted.session_id


def wait(plugin: Plugin, who: Principal, query_id: str) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        reply: dict[str, Any] = json.loads(plugin.service.get(query_id, who))
        return reply if reply["status"] in TERMINAL else None

    return wait_for(done, timeout=240, interval=0.2, what=f"query {query_id}")


def run(plugin: Plugin, who: Principal, ds: str, query: str, session: str) -> dict[str, Any]:
    return wait(plugin, who, submit(plugin, who, ds, query, session)[0])


def test_a_user_refused_on_a_datasource_cannot_reach_its_tables_through_another(
    plugin: Plugin, tmp_path_factory: pytest.TempPathFactory
) -> None:
    outside_every_root = tmp_path_factory.mktemp("outside-every-root")
    (outside_every_root / "secret.txt").write_text("outside every root\n")
    # Both sessions start at once: two jobs, two metastores.
    made, lake_session = submit(plugin, ADMIN, "lake", "CREATE TABLE secrets (id INT, v STRING) USING parquet")
    warm, bob_session = submit(plugin, BOB, "local", "SELECT 1 AS one")
    assert wait(plugin, ADMIN, made)["status"] == "SUCCESS"
    assert wait(plugin, BOB, warm)["status"] == "SUCCESS"
    inserted = run(plugin, ADMIN, "lake", "INSERT INTO secrets VALUES (1, 'lake only')", lake_session)
    assert inserted["status"] == "SUCCESS", inserted
    assert run(plugin, ADMIN, "lake", "SELECT v FROM lake.default.secrets", lake_session)["datarows"] == [["lake only"]]

    with pytest.raises(ForbiddenError):
        submit(plugin, BOB, "lake", "SELECT * FROM lake.default.secrets")
    named = run(plugin, BOB, "local", "SELECT * FROM lake.default.secrets", bob_session)
    assert named["status"] == "FAILED" and "is not this session's datasource" in named["error"], named
    own_name = run(plugin, BOB, "local", "SELECT * FROM default.secrets", bob_session)
    assert own_name["status"] == "FAILED" and "secrets" in own_name["error"], own_name
    listed = run(plugin, BOB, "local", "SHOW TABLES IN local.default", bob_session)
    assert listed["status"] == "SUCCESS" and listed["datarows"] == []
    # The catalog read model reads each datasource's own metastore, as its jobs do.
    browsed, _ = submit(plugin, ADMIN, "lake", "SHOW TABLE EXTENDED IN lake.default LIKE '*'", lake_session)
    assert [row[:2] for row in wait(plugin, ADMIN, browsed)["datarows"]] == [["default", "secrets"]]
    for query_id in (browsed, listed_by_model(plugin, BOB, bob_session)):
        result = plugin.store.results.get(plugin.datasources.get(datasource_of(query_id)).results, query_id)
        assert result is not None and result.job_run_id == "", "answered by the read model, not by a job"
    launcher = plugin.launchers.shared["local"]
    lake_files = launcher.warehouse_of(plugin.datasources.get("lake")) + "/secrets"
    for location in (lake_files, lake_files.removeprefix("file://")):
        with pytest.raises(InvalidRequestError):
            submit(plugin, BOB, "local", f"CREATE TABLE stolen (id INT, v STRING) USING parquet LOCATION '{location}'")

    assert isinstance(launcher, LocalLauncher)
    catalogs = launcher.catalogs
    running = catalogs.running()
    assert set(running) == {"local", "lake"} and running["local"].port != running["lake"].port
    assert_runs_as_the_job_user(launcher, [int(pid) for pid in pids_of_jobs(launcher)])
    assert all(uid_of(metastore.proc.pid) == launcher.job_user.uid for metastore in running.values())
    assert_only_the_job_user_s(catalogs.place("lake").warehouse / "secrets")
    assert_planted_metadata_is_refused(plugin, bob_session, lake_session, outside_every_root)


OUTSIDE = "LOCATION outside the warehouse"


def assert_planted_metadata_is_refused(plugin: Plugin, bob_session: str, lake_session: str, outside: Path) -> None:
    """What anyone who reaches ``local``'s metastore plants there is refused to Bob: a copy of
    ``lake``'s table, a Hive table and a partition outside every root, views over them, a
    partition at ``lake``'s files (the table that holds it is no longer read)."""
    launcher = plugin.launchers.shared["local"]
    assert isinstance(launcher, LocalLauncher)
    running = launcher.catalogs.running()
    lake_files = launcher.warehouse_of(plugin.datasources.get("lake")) + "/secrets"
    made = run(
        plugin,
        BOB,
        "local",
        "CREATE TABLE parted (id INT, v STRING, k INT) USING parquet PARTITIONED BY (k)",
        bob_session,
    )
    assert made["status"] == "SUCCESS", made
    assert run(plugin, BOB, "local", "INSERT INTO parted VALUES (1, 'mine', 1)", bob_session)["status"] == "SUCCESS"
    mine = run(plugin, BOB, "local", "SELECT v FROM parted WHERE k = 1", bob_session)
    assert mine["status"] == "SUCCESS" and mine["datarows"] == [["mine"]], mine
    with planted.metastore(running["lake"].uri) as lake, planted.metastore(running["local"].uri) as local:
        planted.copy_table(local, lake.get_table("default", "secrets"), "planted")
        planted.text_table(local, "planted_file", outside.as_uri())
        planted.view(local, "planted_view", "SELECT id, v FROM default.planted", [("id", "int"), ("v", "string")])
        planted.view(
            local, "planted_reflect", "SELECT reflect('java.lang.System', 'getenv', 'HOME') AS u", [("u", "string")]
        )
        planted.view(local, "planted_path", f"SELECT * FROM parquet.`{lake_files}`", [("id", "int"), ("v", "string")])
        planted.partition(local, "parted", ["2"], lake_files)
        planted.partition(local, "parted", ["3"], outside.as_uri())
    refused = {
        ("sql", "SELECT * FROM planted"): OUTSIDE,
        ("ppl", "source = local.default.planted"): OUTSIDE,
        ("sql", "SELECT count(*) FROM local.default.planted_file"): OUTSIDE,
        ("sql", "SELECT v FROM planted_view"): OUTSIDE,
        ("ppl", "source = local.default.planted_view | fields v"): OUTSIDE,
        (
            "sql",
            "SELECT u FROM planted_reflect",
        ): "Misc functions (reflect, in the stored view spark_catalog.default.planted_reflect)",
        ("sql", "SELECT v FROM planted_path"): "",  # Spark itself does not resolve a path in a view here
        ("sql", "SELECT * FROM parted"): OUTSIDE,
        ("sql", "SELECT v FROM parted WHERE k = 2"): OUTSIDE,
        ("sql", "SELECT v FROM parted WHERE k = 1"): OUTSIDE,  # a table holding a planted partition is not read
        ("ppl", "source = local.default.parted | where k = 3 | fields v"): OUTSIDE,
        ("sql", "INSERT INTO planted VALUES (2, 'written by bob')"): OUTSIDE,
    }
    for (lang, query), expected in refused.items():
        query_id, _ = submit_lang(plugin, BOB, "local", query, bob_session, lang)
        reply = wait(plugin, BOB, query_id)
        assert reply["status"] == "FAILED" and reply["error"].startswith(expected), (query, reply)
        assert "datarows" not in reply, (query, reply)
    kept = run(plugin, BOB, "local", "DESCRIBE TABLE EXTENDED planted", bob_session)  # metadata is shown
    assert kept["status"] == "SUCCESS", kept
    # lake's table holds what its admin wrote, nothing more.
    assert run(plugin, ADMIN, "lake", "SELECT v FROM secrets", lake_session)["datarows"] == [["lake only"]]


def submit_lang(plugin: Plugin, who: Principal, ds: str, query: str, session: str, lang: str) -> tuple[str, str]:
    submitted = plugin.service.submit(SubmitRequest(ds, lang, query, session, principal=who))
    return submitted.query_id, submitted.session_id


def listed_by_model(plugin: Plugin, who: Principal, session: str) -> str:
    """``SHOW TABLES IN local.default`` by ``who`` in ``session``: nothing of ``lake``'s; its query id."""
    query_id, _ = submit(plugin, who, "local", "SHOW TABLES IN local.default", session)
    assert wait(plugin, who, query_id)["datarows"] == []
    return query_id


def pids_of_jobs(launcher: LocalLauncher) -> list[str]:
    return [path.read_text() for path in (launcher.data_dir / "jobs").glob("*.pid")]


def uid_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])


def assert_runs_as_the_job_user(launcher: LocalLauncher, leaders: list[int]) -> None:
    """Every process of each job's process group runs as the job user: spark-submit, the driver's
    JVM, the Python it runs."""
    assert leaders
    for leader in leaders:
        group = [int(p) for p in os.listdir("/proc") if p.isdigit() and _pgid(int(p)) == os.getpgid(leader)]
        assert group and all(uid_of(pid) == launcher.job_user.uid for pid in group), (leader, group)
    if os.geteuid() == 0:
        assert launcher.job_user.uid != 0


def _pgid(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return -1


def assert_only_the_job_user_s(table: Path) -> None:
    """What Spark wrote (data files, its markers) is 0600 in 0700 directories, the job user's."""
    user = JobUser.resolve()
    written = [table, *table.rglob("*")]
    assert any(path.suffix == ".parquet" for path in written), written
    for path in written:
        st = path.stat()
        expected = 0o700 if path.is_dir() else 0o600
        assert (stat.S_IMODE(st.st_mode), st.st_uid) == (expected, user.uid), path
