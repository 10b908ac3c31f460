"""jobctl on PostgreSQL as a new user and an operator meet it: rights a user lacks, a read-only
user, and the messages that must not send them the wrong way (in-process via run_inproc)."""

import secrets
from urllib.parse import urlsplit, urlunsplit

import pytest

from conftest import pg_admin, run_inproc


@pytest.fixture
def role(pg_base):
    """A login role with no rights at all (dropped afterwards, with every grant it received)."""
    name = f"jt_role_{secrets.token_hex(4)}"
    conn = pg_admin(pg_base)
    conn.cursor().execute(f"CREATE ROLE {name} LOGIN PASSWORD 'pw'")
    try:
        yield name
    finally:
        cur = conn.cursor()
        cur.execute(f"DROP OWNED BY {name}")
        cur.execute(f"DROP ROLE {name}")
        conn.close()


def as_role(url: str, role: str) -> str:
    """`url` with `role` (password pw) as its user."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{role}:pw@{parts.netloc.rpartition('@')[2]}"))


def grant(pg_base, *statements: str) -> None:
    conn = pg_admin(pg_base)
    try:
        for sql in statements:
            conn.cursor().execute(sql)
    finally:
        conn.close()


def test_a_schema_the_user_may_not_use_is_permission_denied_not_missing(pg_base, pg_url, pg_schema, role):
    # The server leaves a schema without USAGE out of the search path: its tables looked missing,
    # and the error sent the user to `init`, which then failed on the same rights.
    assert run_inproc("enqueue", "t", db=pg_url).exit_code == 0
    url = as_role(pg_url, role)
    for args in (["list"], ["stats"], ["init"], ["enqueue", "t"]):
        r = run_inproc(*args, db=url)
        line = r.one_error_line()
        assert r.exit_code == 8, r.output
        assert f"the user {role} may not use the schema {pg_schema} (it exists)" in line, line
        assert f"GRANT USAGE ON SCHEMA {pg_schema} TO {role}" in line and "init" not in line, line
        assert "pw" not in line.replace("pw@", ""), line  # (the password never shows)


def test_a_user_who_may_not_create_the_schema_is_told_how(pg_base, pg_url, pg_schema, role):
    url = as_role(pg_url, role)
    r = run_inproc("list", db=url)
    assert r.exit_code == 8 and "init" in r.one_error_line(), r.output  # truly missing: init makes it
    r = run_inproc("init", db=url)
    line = r.one_error_line()
    assert r.exit_code == 8, r.output
    assert f"may not create the schema {pg_schema}" in line, line
    assert f"CREATE SCHEMA {pg_schema} AUTHORIZATION {role}" in line, line
    conn = pg_admin(pg_base)
    try:
        cur = conn.cursor()
        cur.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s", (pg_schema,))
        assert cur.fetchone()[0] == 0
        # What the message says, done: the user then makes its tables in a schema it owns.
        cur.execute(f"CREATE SCHEMA {pg_schema} AUTHORIZATION {role}")
    finally:
        conn.close()
    assert run_inproc("init", db=url).exit_code == 0
    assert run_inproc("enqueue", "t", db=url).stdout.strip() == "1"


def test_a_user_who_may_only_read_sees_stats_and_is_refused_writes(pg_base, pg_url, pg_schema, role):
    # stats folds the count changes into the totals, a write: a monitoring user who may only
    # read got "permission denied" from stats (and --format prometheus) until that became optional.
    assert run_inproc("enqueue", "t", "{}", "-q", "mon", db=pg_url).exit_code == 0
    grant(pg_base, f"GRANT USAGE ON SCHEMA {pg_schema} TO {role}",
          f"GRANT SELECT ON ALL TABLES IN SCHEMA {pg_schema} TO {role}")
    url = as_role(pg_url, role)
    r = run_inproc("stats", "--json", db=url)
    assert r.exit_code == 0 and '"mon":{"ready":1' in r.stdout, r.output
    r = run_inproc("stats", "--format", "prometheus", db=url)
    assert r.exit_code == 0 and 'jobctl_jobs{queue="mon",state="ready"} 1' in r.stdout, r.output
    for args in (["list"], ["show", "1"], ["wait", "1", "--timeout", "0s"]):
        assert run_inproc(*args, db=url).exit_code in (0, 5), args
    r = run_inproc("enqueue", "t", db=url)
    line = r.one_error_line()
    assert r.exit_code == 8 and "permission denied" in line, r.output
    assert f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {pg_schema} TO {role}" in line, line
    # ...and the grants the message names are all a user needs.
    grant(pg_base, f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {pg_schema} TO {role}")
    assert run_inproc("enqueue", "t", db=url).stdout.strip() == "2"
    claimed = run_inproc("claim", "--json", db=url)
    assert claimed.exit_code == 0, claimed.output
    for args in (["pause", "mon"], ["resume", "mon"], ["cancel", "2"], ["recover"], ["purge"], ["stats"]):
        r = run_inproc(*args, db=url)
        assert r.exit_code == 0, (args, r.output)


def test_backup_of_a_server_database_points_to_pg_dump_even_when_the_path_exists(pg_url, tmp_path):
    # It said "PATH exists; pass --force", and --force then led to pg_dump anyway.
    assert run_inproc("init", db=pg_url).exit_code == 0
    dest = tmp_path / "b.db"
    dest.write_bytes(b"keep")
    for args in (["backup", str(dest)], ["backup", str(tmp_path)], ["backup", str(tmp_path / "no" / "b.db")]):
        r = run_inproc(*args, db=pg_url)
        assert r.exit_code == 2 and "pg_dump" in r.one_error_line(), r.output
    assert dest.read_bytes() == b"keep"


def test_no_such_job_speaks_of_the_database_not_a_file(any_db):
    assert run_inproc("init", db=any_db).exit_code == 0
    r = run_inproc("show", "42", db=any_db)
    assert r.exit_code == 3, r.output
    assert r.one_error_line() == ("jobctl: error: no job with id 42; `jobctl list` shows the jobs in this "
                                  "database")


def test_a_change_to_tables_of_another_owner_says_who_may_make_it(pg_base, pg_url, pg_schema, role):
    # What a newer jobctl migrating the schema as a user who does not own it meets: a GRANT
    # cannot give that right, so the error names the owner's `init` instead.
    from jobctl.engines.postgres import PermissionDenied, PostgresEngine

    assert run_inproc("init", db=pg_url).exit_code == 0
    grant(pg_base, f"GRANT USAGE ON SCHEMA {pg_schema} TO {role}",
          f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {pg_schema} TO {role}")
    e = PostgresEngine.open(as_role(pg_url, role))
    try:
        with pytest.raises(PermissionDenied, match=rf"only the owner of the schema {pg_schema} may change its "
                                                    r"tables: run `jobctl init` as that user first"):
            with e._errors():
                e.conn.execute("ALTER TABLE jobs ADD COLUMN extra integer")
    finally:
        e.close()


@pytest.mark.parametrize("query, said", [
    ("sslmode=bogus", 'invalid sslmode value: "bogus"'),
    ("connect_timeout=abc", 'invalid integer value "abc" for connection option "connect_timeout"'),
    ("options=-cno_such_setting%3D1", 'unrecognized configuration parameter "no_such_setting"'),
])
def test_a_url_value_libpq_or_the_server_refuses_is_bad_input(pg_base, query, said):
    # A typo in the URL is exit 2 (bad input), not 8 (database unusable), and connect_timeout's
    # typo is no longer sent to "check the host name and the network".
    url = f"{pg_base}{'&' if '?' in pg_base else '?'}{query}"
    r = run_inproc("list", db=url)
    line = r.one_error_line()
    assert r.exit_code == 2, r.output
    assert said in line and "fix it in --db / JOBCTL_DB" in line, line


def test_config_show_gives_the_schema_the_url_names(tmp_path):
    # It printed the config's (or the default) schema while the URL's search_path, which wins,
    # named another: the "effective settings" sent an operator to the wrong schema.
    cfg = tmp_path / "c.toml"
    cfg.write_text('[postgres]\nschema = "from_config"\n')
    url = "postgresql://app:pw@db1/queue?options=-csearch_path%3Dbilling"
    r = run_inproc("--config", cfg, "--db", url, "config", "show", "--sources")
    assert r.exit_code == 0, r.output
    assert 'schema = "billing"  # the db URL\'s search_path' in r.stdout, r.stdout
    r = run_inproc("--config", cfg, "--db", "postgresql://app@db1/queue", "config", "show", "--sources")
    assert 'schema = "from_config"  # ' in r.stdout, r.stdout


def test_list_and_stats_go_on_past_a_damaged_row(pg_url, pg_base, pg_schema):
    """A row that cannot be decoded (here, a time that is no time) never fails the view of the
    whole database: the other jobs are shown, the damaged one named on stderr, and doctor names it."""
    from conftest import pg_sql

    for n in range(3):
        assert run_inproc("enqueue", "t", f'{{"n": {n}}}', db=pg_url).exit_code == 0
    pg_sql(pg_base, f"UPDATE {pg_schema}.jobs SET created_at = -5 WHERE id = 2")
    for args in (["list"], ["list", "--json"], ["stats"], ["stats", "--json"]):
        r = run_inproc(*args, db=pg_url)
        assert r.exit_code == 0, r.output
        assert "jobctl: warning: job 2 is damaged and left out: created_at" in r.stderr, r.stderr
        assert "`jobctl doctor` says more" in r.stderr
    listed = run_inproc("list", "--json", db=pg_url).stdout
    assert '"n":0' in listed and '"n":2' in listed and '"n":1' not in listed
    import json

    r = run_inproc("doctor", "--json", db=pg_url)
    assert r.exit_code == 9 and [d["id"] for d in json.loads(r.stdout)["damaged_jobs"]] == [2], r.output
