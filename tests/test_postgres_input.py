"""PostgreSQL: what the engine refuses rather than changes or chokes on (a URL that is not UTF-8
once decoded, NUL in a payload or result), and the rights a user needs, tested with a role that
has exactly those (in-process via run_inproc, work as a real process)."""

import json
import secrets

import pytest

from conftest import pg_admin, pg_sql, run_cli, run_inproc


@pytest.mark.parametrize("url, part", [
    ("postgresql://us%ffer@127.0.0.1/test", "user"),
    ("postgresql://u:pa%ffss@127.0.0.1/test", "password"),
    ("postgresql://u@db%ff.internal/test", "host"),
    ("postgresql://u@127.0.0.1/te%ffst", "database"),
    ("postgresql://u@127.0.0.1/test?options=-csearch_path%3D%ff", "options parameter"),
    ("postgresql://u@127.0.0.1/test?application_name=%c3", "application_name parameter"),
])
def test_a_url_part_that_is_not_utf8_once_decoded_is_exit_2_naming_the_part(url, part):
    # It was exit 1 with the driver's UnicodeDecodeError.
    pytest.importorskip("psycopg2")
    for args in (["stats"], ["enqueue", "t"]):
        r = run_inproc(*args, db=url)
        line = r.one_error_line()
        assert r.exit_code == 2, r.output
        assert f"its {part} is not UTF-8 text" in line, line
        assert "pa%ffss" not in line  # a password is never printed, even a broken one
    r = run_inproc("--db", "/nonexistent/x.db", "migrate", "--to", url)
    assert r.exit_code in (2, 8), r.output  # (the source is checked first; never a traceback)
    r.one_error_line()


# -- NUL (\u0000) in a payload or result: refused on PostgreSQL, never changed ---------------------

NUL = '{"note":"a\\u0000b"}'  # JSON text with an escaped NUL


def jobs_in(url) -> list[dict]:
    r = run_inproc("list", "--json", db=url)
    assert r.exit_code == 0, r.output
    return [json.loads(line) for line in r.stdout.splitlines()]


def test_a_nul_in_a_payload_is_refused_on_postgresql_at_every_enqueue(pg_url):
    assert run_inproc("init", db=pg_url).exit_code == 0
    r = run_inproc("enqueue", "t", NUL, db=pg_url)
    line = r.one_error_line()
    assert r.exit_code == 2 and r.stdout == "", r.output
    assert "invalid payload: it holds a NUL character (\\u0000)" in line and "nothing was enqueued" in line, line
    r = run_inproc("enqueue", "t", '{"k\\u0000":1}', db=pg_url)  # in a key too
    assert r.exit_code == 2, r.output
    lines = '{"type":"t","payload":{"a":1}}\n{"type":"t","payload":' + NUL + '}\n{"type":"t"}\n'
    for option in ("--batch", "--chain"):
        r = run_inproc("enqueue", option, "-", input=lines, db=pg_url)
        line = r.one_error_line()
        assert r.exit_code == 2 and r.stdout == "", r.output
        assert "line 2: invalid payload: it holds a NUL character" in line, line
    many = "".join('{"type":"t","payload":{"n":%d}}\n' % n for n in range(50)) + '{"type":"t","payload":' + NUL + '}\n'
    r = run_inproc("enqueue", "--batch", "-", input=many, db=pg_url)  # the bulk path, after 50 good lines
    assert r.exit_code == 2 and "line 51: invalid payload" in r.one_error_line(), r.output
    assert jobs_in(pg_url) == []  # nothing of any of them was kept
    # Text that only looks like it (an escaped backslash, then u0000) is no NUL, and is kept as it is.
    r = run_inproc("enqueue", "t", '{"path":"C:\\\\u0000"}', db=pg_url)
    assert r.exit_code == 0, r.output
    assert jobs_in(pg_url)[0]["payload"] == {"path": "C:\\u0000"}


def test_a_nul_in_a_payload_is_kept_unchanged_on_sqlite(tmp_path):
    db = tmp_path / "q.db"
    r = run_inproc("enqueue", "t", NUL, db=db)
    assert r.exit_code == 0, r.output
    assert jobs_in(db)[0]["payload"] == {"note": "a\x00b"}


def test_complete_with_a_nul_in_its_result_is_refused_and_the_job_stays_running(pg_url):
    assert run_inproc("enqueue", "t", db=pg_url).exit_code == 0
    job = json.loads(run_inproc("claim", db=pg_url).stdout)
    r = run_inproc("complete", job["id"], "--token", job["token"], "--result", NUL, db=pg_url)
    line = r.one_error_line()
    assert r.exit_code == 2, r.output
    assert "invalid result: it holds a NUL character (\\u0000)" in line and "nothing changed" in line, line
    assert jobs_in(pg_url)[0]["status"] == "running"
    r = run_inproc("complete", job["id"], "--token", job["token"], "--result", '{"ok":true}', db=pg_url)
    assert r.exit_code == 0, r.output
    assert jobs_in(pg_url)[0]["result"] == {"ok": True}


def test_a_handler_result_with_a_nul_completes_the_job_without_it_on_postgresql(pg_url, tmp_path):
    # The run succeeded (its side effects are done): running it again would do them twice. As for a
    # result too large to keep, the job completes with no result, and the worker's log says why.
    config = tmp_path / "jobctl.toml"
    config.write_text('[types.t]\ncommand = ["sh", "-c", "printf \'%s\\\\n\' \'{\\"r\\":\\"x\\\\u0000y\\"}\'"]\n')
    config.chmod(0o600)
    assert run_inproc("--config", config, "enqueue", "t", db=pg_url).exit_code == 0
    r = run_cli("--config", config, "work", "--stop-when-empty", db=pg_url)
    assert r.exit_code == 0, r.output
    job = jobs_in(pg_url)[0]
    assert job["status"] == "completed" and job["result"] is None, job
    assert "result" in r.stderr and "not stored: it holds a NUL character" in r.stderr, r.stderr


def test_a_nul_in_an_idempotency_key_is_refused_on_postgresql_not_changed(pg_url, tmp_path):
    """A batch line's key may hold NUL (JSON \\u0000): PostgreSQL stored it with U+FFFD in its place,
    so the key was changed, and another job's key "\\ufffd" then found that job ("created": false)
    as if it were the same key. It is refused (exit 2, naming the line), as a payload holding NUL
    is; migrate refuses a job whose key holds one, naming the job. SQLite keeps it as it is."""
    lines = '{"type":"t"}\n{"type":"t","key":"k\\u0000"}\n'
    r = run_inproc("enqueue", "--quiet", "--batch", "-", input=lines, db=pg_url)
    line = r.one_error_line()
    assert r.exit_code == 2 and "line 2: invalid idempotency key" in line and "NUL" in line, r.output
    assert jobs_in(pg_url) == []
    r = run_inproc("enqueue", "--batch", "-", "--json", input='{"type":"t","key":"k\\ufffd"}\n', db=pg_url)
    assert r.exit_code == 0 and json.loads(r.stdout)["created"] is True, r.output
    db = tmp_path / "q" / "jobs.db"
    assert run_inproc("enqueue", "--quiet", "--batch", "-", input=lines, db=db).exit_code == 0
    assert run_inproc("show", "--json", "2", db=db).stdout.count('"k\\u0000"') == 1
    target = pg_url.replace("search_path%3D", "search_path%3Dm")
    try:
        r = run_inproc("migrate", "--to", target, db=db)
        line = r.one_error_line()
        assert r.exit_code == 2 and "job 2: invalid idempotency key" in line, r.output
    finally:
        from urllib.parse import unquote

        schema = unquote(target).rpartition("search_path=")[2]
        conn = pg_admin(pg_url)
        conn.cursor().execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        conn.close()


# -- the rights a user needs: a role with exactly those ------------------------------------------

def rights(schema: str, role: str) -> list[str]:
    """The grants the README and docs/operations.md list, as the schema's owner runs them."""
    return [f"GRANT USAGE ON SCHEMA {schema} TO {role}",
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}",
            f"GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA {schema} TO {role}"]


@pytest.fixture
def role(pg_base):
    """A login role with no rights of its own (dropped afterwards, with every grant it received)."""
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
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{role}:pw@{parts.netloc.rpartition('@')[2]}"))


def test_the_documented_rights_are_enough_for_every_command_of_a_queue_user(pg_base, pg_url, pg_schema, role,
                                                                             tmp_path):
    # With the rights the README listed, enqueue --batch and migrate failed on the id sequence.
    from conftest import with_schema

    readme = open(__file__.rsplit("/tests/", 1)[0] + "/README.md").read()
    for grant in rights("jobctl", "app"):
        assert grant.replace("GRANT ", "").split(" TO ")[0] in " ".join(readme.split()), grant
    assert run_inproc("init", db=pg_url).exit_code == 0  # by the schema's owner
    target_schema = f"{pg_schema}_to"
    target = with_schema(pg_base, target_schema)
    try:
        assert run_inproc("init", db=target).exit_code == 0
        for schema in (pg_schema, target_schema):
            for sql in rights(schema, role):
                pg_sql(pg_base, sql)
        url = as_role(pg_url, role)
        assert run_inproc("enqueue", "t", '{"n":1}', db=url).stdout.strip() == "1"
        r = run_inproc("enqueue", "--batch", "-", input='{"type":"t"}\n{"type":"t"}\n{"type":"u"}\n', db=url)
        assert r.exit_code == 0 and r.stdout.split() == ["2", "3", "4"], r.output
        r = run_inproc("enqueue", "--chain", "-", input='{"type":"t"}\n{"type":"t"}\n', db=url)
        assert r.exit_code == 0, r.output
        claimed = json.loads(run_inproc("claim", "--type", "t", db=url).stdout)
        r = run_inproc("complete", claimed["id"], "--token", claimed["token"], "--result", '{"ok":1}', db=url)
        assert r.exit_code == 0, r.output
        claimed = json.loads(run_inproc("claim", "--type", "t", db=url).stdout)
        r = run_inproc("fail", claimed["id"], "--token", claimed["token"], "--error", "no", db=url)
        assert r.exit_code == 0, r.output
        config = tmp_path / "jobctl.toml"
        config.write_text('[types.u]\ncommand = ["true"]\n')
        config.chmod(0o600)
        r = run_cli("--config", config, "work", "--type", "u", "--stop-when-empty", db=url)
        assert r.exit_code == 0 and "permission" not in r.stderr, r.output
        for args in (["stats"], ["stats", "--json"], ["list"], ["show", "1"], ["recover"], ["purge"]):
            r = run_inproc(*args, db=url)
            assert r.exit_code == 0, (args, r.output)
        # migrate into that role's database: from a SQLite file, and from this schema
        source = tmp_path / "old.db"
        assert run_inproc("enqueue", "t", db=source).exit_code == 0
        r = run_inproc("migrate", "--to", as_role(target, role), db=source)
        assert r.exit_code == 0, r.output
        r = run_inproc("enqueue", "--batch", "-", input='{"type":"t"}\n{"type":"t"}\n', db=as_role(target, role))
        assert r.exit_code == 0 and r.stdout.split() == ["2", "3"], r.output  # the sequence moved on
        back = tmp_path / "back.db"
        r = run_inproc("migrate", "--to", back, db=as_role(target, role))
        assert r.exit_code == 0, r.output
    finally:
        pg_sql(pg_base, f'DROP SCHEMA IF EXISTS "{target_schema}" CASCADE')


def test_a_permission_denied_names_the_right_that_is_missing_not_those_given(pg_base, pg_url, pg_schema, role):
    # The hint always repeated the schema and table grants, even when only the sequence's was missing.
    assert run_inproc("init", db=pg_url).exit_code == 0
    usage, tables, sequences = rights(pg_schema, role)
    pg_sql(pg_base, usage)
    pg_sql(pg_base, tables)
    url = as_role(pg_url, role)
    r = run_inproc("enqueue", "--batch", "-", input='{"type":"t"}\n{"type":"t"}\n', db=url)
    line = r.one_error_line()
    assert r.exit_code == 8, r.output
    assert "sequence" in line and sequences in line, line
    assert tables not in line and usage + ";" not in line, line
    pg_sql(pg_base, f"REVOKE INSERT ON ALL TABLES IN SCHEMA {pg_schema} FROM {role}")
    r = run_inproc("enqueue", "t", db=url)
    line = r.one_error_line()
    assert r.exit_code == 8 and "table" in line and tables in line and sequences not in line, line
