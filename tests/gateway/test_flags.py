"""flags.py: the command line, its environment names and the README's table."""

from __future__ import annotations

from pathlib import Path

import pytest

from voice_stack_gateway.flags import FLAGS, build_parser, env_table

README = Path(__file__).resolve().parents[2] / "gateway" / "README.md"


def test_readme_table_is_the_generated_one() -> None:
    assert env_table() in README.read_text()


def test_every_flag_has_a_unique_environment_name() -> None:
    names = [name for flag in FLAGS for name in flag.env]
    assert len(names) == len(set(names))
    assert "`STT_OPENAI_KEY_FILE`" in env_table()


def test_print_env_table_is_a_listed_action(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser({})
    assert "--print-env-table" in parser.format_help()
    with pytest.raises(SystemExit) as done:
        parser.parse_args(["--print-env-table"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == env_table()
