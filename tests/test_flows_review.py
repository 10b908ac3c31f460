"""A review of flows and reactions for jobs lost, doubled or stuck without a word: each test here
failed before the fix it names."""

from __future__ import annotations

import pytest

from jobctl.config import Settings, apply_config
from jobctl.errors import ConfigError


def _types(**reactions: dict) -> dict:
    return {"types": {name: dict(keys) for name, keys in reactions.items()}}


@pytest.mark.parametrize("graph", [
    {"a": {"on_completed": "b"}, "b": {"on_completed": "a"}},
    {"a": {"on_buried": "b"}, "b": {"on_completed": "c"}, "c": {"on_cancelled": "a"}},
])
def test_types_that_react_to_each_other_in_a_loop_are_refused(graph):
    # a completes -> b is enqueued -> b completes -> a is enqueued -> ... for ever, each payload
    # holding the one before it: the loop the rule "a type may not react to itself" is there to stop.
    with pytest.raises(ConfigError, match=r"react to each other in a loop: a -> b -> .*a"):
        apply_config(Settings(), _types(**graph), "test")


def test_reactions_that_branch_and_meet_again_are_not_a_loop():
    settings = Settings()
    apply_config(settings, _types(a={"on_buried": "alert", "on_completed": "b"}, b={"on_buried": "alert"},
                                  alert={"on_buried": "page"}), "test")
    assert settings.types["a"].on_completed == "b"


def test_a_reaction_loop_is_exit_2_in_one_line(cli, tmp_path):
    (tmp_path / "jobctl.toml").write_text('[types.a]\non_completed = "b"\n[types.b]\non_completed = "a"\n')
    r = cli("enqueue", "a")
    assert r.exit_code == 2, r.output
    r.one_error_line()
    assert "a -> b -> a" in r.stderr and r.stdout == ""
