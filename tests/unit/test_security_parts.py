"""The security parts on their own (no servers): principals, checks, cache, audit log, users file."""

from __future__ import annotations

import base64
import json
import multiprocessing
import os
import stat
from pathlib import Path

import pytest

from async_query.datasources import Datasource
from async_query.security.audit import AuditLog
from async_query.security.authn import CredentialCache, parse_basic
from async_query.security.authz import check_datasource_access, check_owner, require_admin
from async_query.security.errors import ForbiddenError
from async_query.security.job_user import DEFAULT_JOB_USER, JobUser
from async_query.security.middleware import classify
from async_query.security.principal import ANONYMOUS, Principal
from async_query.security.setup import serve_checks
from async_query.security.users import UserDirectory, UsersFile, UsersFileError
from async_query.settings import Settings
from query_core.hosts import is_loopback_bind, loopback_host
from query_core.ids import new_id
from tests.support import FAST_HASHER

# -- principals and authorization ------------------------------------------------------------------


def test_admin_comes_from_the_admin_roles() -> None:
    assert Principal.of("a", ["all_access"]).is_admin
    assert not Principal.of("b", ["reader"]).is_admin
    assert Principal.of("c", ["ops", "reader"], admin_roles=["ops"]).is_admin
    assert not Principal.of("d", ["all_access"], admin_roles=["ops"]).is_admin
    assert ANONYMOUS.is_admin and ANONYMOUS.anonymous


def test_datasource_access_in_the_references_words() -> None:
    # the reference's own test case: datasource "test" allowing prometheus_access, a user with role1
    test = Datasource(name="test", allowed_roles=["prometheus_access"])
    with pytest.raises(ForbiddenError) as refused:
        check_datasource_access(Principal.of("myuser", ["role1", "bckrole1"]), test)
    assert refused.value.message == (
        "User is not authorized to access datasource test. "
        "User should be mapped to any of the roles in [prometheus_access] for access."
    )
    assert refused.value.http_status == 403
    check_datasource_access(Principal.of("myuser", ["prometheus_access"]), test)
    check_datasource_access(Principal.of("admin", ["all_access"]), test)
    check_datasource_access(ANONYMOUS, test)
    two = Datasource(name="lake", allowed_roles=["a", "b"])
    with pytest.raises(ForbiddenError, match=r"roles in \[a, b\] for access"):
        check_datasource_access(Principal.of("x", []), two)


def test_an_empty_allowed_roles_list_admits_admins_only() -> None:
    open_to_none = Datasource(name="local")
    with pytest.raises(ForbiddenError, match=r"roles in \[\] for access"):
        check_datasource_access(Principal.of("bob", ["reader"]), open_to_none)
    check_datasource_access(Principal.of("alice", ["all_access"]), open_to_none)


def test_a_query_belongs_to_its_submitter() -> None:
    query_id = new_id("local")
    check_owner(Principal.of("bob", []), "bob", query_id)
    check_owner(Principal.of("alice", ["all_access"]), "bob", query_id)
    with pytest.raises(ForbiddenError) as refused:
        check_owner(Principal.of("carol", []), "bob", query_id)
    assert "bob" not in refused.value.message and query_id in refused.value.message
    for unknown in (None, ""):
        with pytest.raises(ForbiddenError):
            check_owner(Principal.of("bob", []), unknown)
        check_owner(ANONYMOUS, unknown)


def test_require_admin() -> None:
    require_admin(Principal.of("alice", ["all_access"]), "change datasources")
    with pytest.raises(ForbiddenError, match="User bob is not authorized to change datasources"):
        require_admin(Principal.of("bob", ["reader"]), "change datasources")


# -- request parsing ----------------------------------------------------------------------------


def _basic(text: str) -> bytes:
    return b"Basic " + base64.b64encode(text.encode())


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (_basic("alice:pw"), ("alice", "pw")),
        (_basic("alice:p:w:"), ("alice", "p:w:")),
        (_basic("ünï:çødé"), ("ünï", "çødé")),
        (b"basic " + base64.b64encode(b"a:b"), ("a", "b")),
        (_basic("alice:"), ("alice", "")),
        (_basic("alice"), None),
        (_basic(":pw"), None),
        (b"Basic !!!", None),
        (b"Basic " + base64.b64encode(b"\xff:\xfe"), None),
        (b"Bearer abc", None),
        (b"", None),
    ],
)
def test_parse_basic(header: bytes, expected: tuple[str, str] | None) -> None:
    assert parse_basic(header) == expected


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        (b"localhost", True),
        (b"localhost:9000", True),
        (b"127.0.0.1:1", True),
        (b"[::1]", True),
        (b"[::1]:9000", True),
        (b"LocalHost", True),
        (None, False),
        (b"", False),
        (b"localhost.", False),
        (b"127.0.0.2", False),
        (b"evil.example", False),
        (b"localhost:9000:1", False),
        (b"[::1]x", False),
        (b"::1", False),
    ],
)
def test_loopback_host(host: bytes | None, expected: bool) -> None:
    assert loopback_host(host) is expected


def test_classify() -> None:
    query_id = new_id("lake")
    assert classify("POST", "/_plugins/_async_query") == ("query.submit", None, None)
    assert classify("GET", f"/_plugins/_async_query/{query_id}") == ("query.get", "lake", query_id)
    assert classify("DELETE", f"/_plugins/_async_query/{query_id}") == ("query.cancel", "lake", query_id)
    assert classify("GET", "/_plugins/_async_query/garbage") == ("query.get", None, "garbage")
    assert classify("GET", "/_plugins/_async_query/_sessions") == ("sessions.list", None, None)
    assert classify("POST", "/_plugins/_query/_datasources") == ("datasource.create", None, None)
    assert classify("PATCH", "/_plugins/_query/_datasources") == ("datasource.patch", None, None)
    assert classify("GET", "/_plugins/_query/_datasources") == ("datasource.list", None, None)
    assert classify("DELETE", "/_plugins/_query/_datasources/x") == ("datasource.delete", "x", None)
    assert classify("GET", "/_cluster/health") == ("other", None, None)
    assert classify("PUT", "/_plugins/_async_query") == ("other", None, None)
    huge = "Q" * 10_000
    assert len(classify("GET", f"/_plugins/_async_query/{huge}")[2] or "") == 400


def test_is_loopback_bind() -> None:
    assert all(is_loopback_bind(h) for h in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"))
    assert not any(is_loopback_bind(h) for h in ("0.0.0.0", "::", "", "10.0.0.1", "myhost", "localhost.example"))


# -- serve's checks -----------------------------------------------------------------------------


def test_serve_checks(tmp_path: Path) -> None:
    none = Settings(data_dir=tmp_path)
    assert serve_checks(none, "127.0.0.1").errors == []
    refused = serve_checks(none, "0.0.0.0")
    assert len(refused.errors) == 1 and "ASYNC_QUERY_AUTH=basic" in refused.errors[0]
    insecure = serve_checks(none, "0.0.0.0", insecure_no_auth=True)
    assert insecure.errors == [] and "WITHOUT AUTHENTICATION" in insecure.warnings[0]

    users = tmp_path / "users.json"
    basic = Settings(data_dir=tmp_path, auth="basic", users_file=users)
    assert "needs a readable users file" in serve_checks(basic, "127.0.0.1").errors[0]
    users.write_text('{"version": 1, "users": []}')
    assert "has no users" in serve_checks(basic, "127.0.0.1").errors[0]
    UsersFile(users).add("alice", "alice-Pa55word", ["all_access"])
    assert serve_checks(basic, "127.0.0.1").errors == []
    in_clear = serve_checks(basic, "0.0.0.0")
    assert in_clear.errors == [] and any("plain HTTP" in w for w in in_clear.warnings)
    assert not any("plain HTTP" in w for w in serve_checks(basic, "0.0.0.0", tls=True).warnings)
    users.chmod(0o644)
    readable = serve_checks(basic, "127.0.0.1")
    if JobUser.resolve().switches:  # run as root, jobs run as the job user: who must not read the hashes
        assert any(f"can be read by the job user {DEFAULT_JOB_USER}" in e and "chmod 600" in e for e in readable.errors)
    else:
        assert any("chmod 600" in w for w in readable.warnings)

    assert "needs OPENSEARCH_URL" in serve_checks(Settings(data_dir=tmp_path, auth="cluster"), "127.0.0.1").errors[0]
    cluster = Settings(data_dir=tmp_path, auth="cluster", opensearch_url="https://os.example:9200")
    assert serve_checks(cluster, "127.0.0.1").errors == []


def test_serve_refuses_to_run_jobs_as_root_unless_a_setting_says_so(tmp_path: Path) -> None:
    as_root = serve_checks(Settings(data_dir=tmp_path, local_job_user="root"), "127.0.0.1")
    allowed = serve_checks(Settings(data_dir=tmp_path, local_job_user="root", local_job_allow_root=True), "127.0.0.1")
    if os.geteuid() == 0:
        assert len(as_root.errors) == 1 and "refusing to run local jobs as root" in as_root.errors[0]
        assert "ASYNC_QUERY_LOCAL_JOB_ALLOW_ROOT" in as_root.errors[0]
        assert allowed.errors == [] and any("local jobs run as root" in w for w in allowed.warnings)
        default = serve_checks(Settings(data_dir=tmp_path), "127.0.0.1")
        assert default.errors == [] and JobUser.resolve().name == DEFAULT_JOB_USER
    else:  # a service that is not root cannot start anything as root, allowed or not
        assert "not root" in as_root.errors[0] and "not root" in allowed.errors[0]
    unknown = serve_checks(Settings(data_dir=tmp_path, local_job_user="no-such-user-here"), "127.0.0.1")
    assert "is not a user of this machine" in unknown.errors[0]


def test_serve_refuses_a_tls_key_the_job_user_could_read(tmp_path: Path) -> None:
    key = tmp_path / "key.pem"
    key.write_text("-----BEGIN PRIVATE KEY-----")
    key.chmod(0o644)
    checks = serve_checks(Settings(data_dir=tmp_path), "127.0.0.1", tls=True, tls_key=str(key))
    if JobUser.resolve().switches:
        assert any("TLS key" in e and "chmod 600" in e for e in checks.errors)
    key.chmod(0o600)
    assert serve_checks(Settings(data_dir=tmp_path), "127.0.0.1", tls=True, tls_key=str(key)).errors == []


def test_admin_roles_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASYNC_QUERY_ADMIN_ROLES", "all_access, ops_admin,")
    assert Settings().admin_roles == ["all_access", "ops_admin"]
    monkeypatch.delenv("ASYNC_QUERY_ADMIN_ROLES")
    assert Settings().admin_roles == ["all_access"]


# -- the credential cache ------------------------------------------------------------------------


def test_the_cache_keys_are_not_the_header() -> None:
    header = _basic("alice:secret-password")
    cache = CredentialCache(60, 10)
    key = cache.key(header)
    assert header not in key and base64.b64encode(b"alice:secret-password") not in key
    assert cache.key(header) == key
    assert CredentialCache(60, 10).key(header) != key, "keyed by this process's secret"


def test_the_cache_is_bounded() -> None:
    cache = CredentialCache(60, 3)
    for i in range(10):
        cache.put(cache.key(b"h%d" % i), Principal.of(f"u{i}", []), cache.generation)
    assert len(cache) == 3
    assert cache.get(cache.key(b"h9")) is not None and cache.get(cache.key(b"h0")) is None
    off = CredentialCache(0, 10)
    off.put(off.key(b"h"), Principal.of("u", []), off.generation)
    assert off.get(off.key(b"h")) is None


def test_a_check_that_started_before_a_clear_is_not_cached() -> None:
    """A user removed while their first request was being checked stays out."""
    cache = CredentialCache(60, 10)
    started = cache.generation
    cache.clear()  # the users file changed meanwhile
    cache.put(cache.key(b"h"), Principal.of("removed", []), started)
    assert cache.get(cache.key(b"h")) is None
    cache.put(cache.key(b"h"), Principal.of("kept", []), cache.generation)
    assert cache.get(cache.key(b"h")) == Principal.of("kept", [])


# -- the audit log -------------------------------------------------------------------------------


def test_the_audit_log_rotates_and_stays_private(tmp_path: Path) -> None:
    audit = AuditLog(tmp_path / "audit", max_bytes=300, backups=2)
    for i in range(20):
        audit.write({"n": i, "pad": "x" * 50})
    audit.close()
    files = sorted(p.name for p in (tmp_path / "audit").iterdir())
    assert files == ["audit.log", "audit.log.1", "audit.log.2"]
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in (tmp_path / "audit").iterdir())
    assert stat.S_IMODE((tmp_path / "audit").stat().st_mode) == 0o700
    last = [json.loads(line)["n"] for line in (tmp_path / "audit" / "audit.log").read_text().splitlines()]
    assert last and last[-1] == 19


def test_a_failing_audit_write_does_not_fail_the_caller(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    audit = AuditLog(tmp_path / "audit")
    (tmp_path / "audit" / "audit.log").mkdir()  # cannot be opened for writing, not even by root
    audit.write({"n": 1})
    audit.write({"n": 2})
    assert caplog.text.count("cannot write the audit log") == 1, "logged once a minute at most"


# -- the users file ------------------------------------------------------------------------------


def test_users_file_is_private_and_holds_hashes_only(tmp_path: Path) -> None:
    path = tmp_path / "new" / "users.json"
    UsersFile(path).add("alice", "alice-Pa55word", ["all_access", "all_access", "ops"])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    raw = path.read_bytes()
    assert b"alice-Pa55word" not in raw and base64.b64encode(b"alice-Pa55word") not in raw
    entry = json.loads(raw)["users"][0]
    assert entry["roles"] == ["all_access", "ops"] and entry["hash"].startswith("$argon2id$")
    directory = UserDirectory(path)
    user = directory.verify("alice", "alice-Pa55word")
    assert user is not None and user.roles == ("all_access", "ops")
    assert directory.verify("alice", "alice-Pa55wore") is None
    assert directory.verify("nobody", "alice-Pa55word") is None


def test_the_directory_follows_the_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "users.json"
    users = UsersFile(path, FAST_HASHER)
    users.add("alice", "alice-Pa55word", ["r"])
    directory = UserDirectory(path, recheck_s=0)
    assert directory.knows("alice") and not directory.changed()
    users.add("bob", "bob-Pa55word1", ["r"])
    assert directory.changed() and directory.knows("bob")
    path.write_text("{broken")
    assert not directory.changed() and len(directory) == 2  # keeps what it had
    assert "not valid JSON" in caplog.text
    path.unlink()
    assert directory.changed() and len(directory) == 0  # gone: nobody gets in


def test_concurrent_adds_keep_every_user(tmp_path: Path) -> None:
    path = tmp_path / "users.json"
    names = [f"user{i}" for i in range(3)]
    ctx = multiprocessing.get_context("spawn")
    # the target is the product's own method: a child imports its module only, not this one's
    add = UsersFile(path, FAST_HASHER).add
    procs = [ctx.Process(target=add, args=(n, f"{n}-Pa55word", ["r"])) for n in names]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert [u.name for u in UsersFile(path).users()] == names


def test_a_malformed_users_file_is_refused_with_a_reason(tmp_path: Path) -> None:
    path = tmp_path / "users.json"
    for content, reason in [
        ("[]", "no 'users' list"),
        ('{"users": [{"name": "a:b", "roles": [], "hash": "$x"}]}', "entry 0 is not a user"),
        ('{"users": [{"name": "a", "roles": ["r"]}]}', "entry 0 is not a user"),
    ]:
        path.write_text(content)
        with pytest.raises(UsersFileError, match=reason):
            UsersFile(path).users()


def test_trusted_proxies_are_addresses_or_networks(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ASYNC_QUERY_TRUSTED_PROXIES`` names proxies exactly: a host name, a network with host
    bits, or ``*`` is refused at start rather than silently trusting something else."""
    assert Settings().trusted_proxies == []
    monkeypatch.setenv("ASYNC_QUERY_TRUSTED_PROXIES", "10.0.0.5, 10.1.0.0/16, ::1")
    assert Settings().trusted_proxies == ["10.0.0.5", "10.1.0.0/16", "::1"]
    for bad in ("*", "10.0.0.1/8", "proxy.local", "10.0.0.5,nope"):
        monkeypatch.setenv("ASYNC_QUERY_TRUSTED_PROXIES", bad)
        with pytest.raises(ValueError, match="is not an IP address or network"):
            Settings()
