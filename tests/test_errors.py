"""Every error is one line on stderr, whatever the user typed."""

from conftest import run_cli


def test_an_error_naming_a_path_with_a_newline_stays_one_line(tmp_path):
    weird = tmp_path / "no\nsuch"
    r = run_cli("enqueue", "t", "--payload-file", str(weird), db=tmp_path / "q.db")
    assert r.exit_code == 2, r.output
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("jobctl: error: "), r.output
    assert "no\\nsuch" in r.stderr
