"""PostgreSQL: what the engine refuses rather than changes or chokes on (a URL that is not UTF-8
once decoded, NUL in a payload or result), and the rights a user needs, tested with a role that
has exactly those (in-process via run_inproc, work as a real process)."""

import json
import secrets
import sqlite3

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
