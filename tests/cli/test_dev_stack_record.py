"""``arandu`` reads ``./ops/dev``'s record: the environment wins, a stopped stack is named as such,
and a broker that answers but is not the service's is not taken for it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from arandu_cli.dev_stack import overrides_from, read_record, write_record
from arandu_cli.doctor_checks import check_broker
from arandu_cli.exit_codes import ExitCode
from arandu_cli.main import app as cli_app
from memory_core.settings import load_settings
from ops.embedded import EmbeddedRedis
from workers.celery_app import create_celery_app


def _gone_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_the_record_is_private_and_the_environment_wins_over_it(tmp_path: Path) -> None:
    settings = load_settings(
        home=tmp_path, database_url="postgresql://stack/db", broker_url="redis://stack:1/0", flower_password="pw"
    )
    path = write_record(settings, pid=12345)
    assert path.stat().st_mode & 0o777 == 0o600  # it holds the Flower password
    record = read_record(tmp_path)
    assert record is not None
    assert record.pid == 12345
    assert record.settings["flower_password"] == "pw"
    overrides = overrides_from(record, {"ARANDU_DATABASE_URL": "postgresql://mine/db"})
    assert "database_url" not in overrides
    assert overrides["broker_url"] == "redis://stack:1/0"
    assert read_record(tmp_path / "nowhere") is None


def test_doctor_says_the_dev_stack_is_not_running_instead_of_blaming_servers(tmp_path: Path) -> None:
    # What a stopped ./ops/dev leaves: its record, naming sockets that no longer exist.
    settings = load_settings(
        home=tmp_path,
        database_url=f"postgresql+psycopg://postgres:@/arandu?host={tmp_path / 'pg'}",
        broker_url=f"redis+socket://{tmp_path / 'redis' / 'redis.sock'}",
    )
    write_record(settings, pid=_gone_pid())
    env = {"ARANDU_HOME": str(tmp_path), "ARANDU_DATABASE_URL": "", "ARANDU_BROKER_URL": ""}
    env = {key: value for key, value in env.items() if value}
    result = CliRunner().invoke(cli_app, ["doctor", "--json"], env=env, catch_exceptions=False)
    assert result.exit_code == ExitCode.FAILED
    checks = {check["name"]: check for check in json.loads(result.stdout)["checks"]}
    assert checks["dev stack"]["state"] == "failed"
    assert "is not running" in checks["dev stack"]["detail"]
    assert "./ops/dev" in checks["dev stack"]["fix"]
    assert {check["state"] for name, check in checks.items() if name != "dev stack"} == {"skipped"}
    human = CliRunner().invoke(cli_app, ["doctor"], env=env, catch_exceptions=False)
    fixes = human.stdout.split("what to fix:")[1]
    assert "start PostgreSQL" not in fixes
    assert "dev stack: start it again: ./ops/dev" in " ".join(fixes.split())


def test_a_redis_that_no_arandu_process_used_is_not_taken_for_the_broker(tmp_path: Path) -> None:
    redis = EmbeddedRedis(tmp_path / "redis")
    redis.start()
    try:
        settings = load_settings(home=tmp_path, broker_url=redis.url)
        check = check_broker(settings)
        assert check.state == "failed"
        assert "not this service's broker" in check.detail
        assert check.fix is not None
        assert "ARANDU_BROKER_URL" in check.fix
        # What a worker does when it starts: declare the service's queues. Then it is the service's broker.
        app = create_celery_app(settings)
        with app.connection_for_write() as connection:
            for queue in app.amqp.queues.values():
                queue(connection.default_channel).declare()
        app.close()
        used = check_broker(settings)
        assert used.state == "ok"
        assert "queue ingest, queue apply, queue maintenance" in used.detail
    finally:
        redis.stop()
