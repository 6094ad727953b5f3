"""``arandu db upgrade|check|current`` on a database of their own."""

from __future__ import annotations

import json

from typer.testing import CliRunner, Result

from arandu_cli.exit_codes import ExitCode
from arandu_cli.main import app as cli_app
from memory_core.db.migrate import head_revision
from tests.support.services import TestServices


def _db(args: list[str], database_url: str, dimensions: int = 384) -> Result:
    env = {"ARANDU_DATABASE_URL": database_url, "ARANDU_EMBEDDING_DIMENSIONS": str(dimensions)}
    return CliRunner().invoke(cli_app, ["db", *args], env=env, catch_exceptions=False)


def test_db_upgrade_migrates_a_new_database_and_check_tells_a_mismatch(services: TestServices) -> None:
    url = services.new_database("arandu_cli_db")

    before = _db(["check"], url)
    assert before.exit_code == ExitCode.FAILED
    assert "no arandu schema" in before.stderr
    assert "(none)" in _db(["current"], url).stdout

    upgraded = _db(["upgrade"], url)
    assert upgraded.exit_code == 0, upgraded.output
    assert "384-dimensional" in upgraded.stdout

    checked = _db(["check"], url)
    assert checked.exit_code == 0, checked.output
    assert head_revision() in _db(["current"], url).stdout
    assert json.loads(_db(["current", "--json"], url).stdout) == {"revision": head_revision(), "head": head_revision()}
    assert json.loads(_db(["check", "--json"], url).stdout)["current"] is True

    other = _db(["check"], url, dimensions=1536)
    assert other.exit_code == ExitCode.FAILED
    assert "384" in other.stderr
    assert "1536" in other.stderr
