"""harness/core/settings.py: one settings object, resolved defaults < environment < flags, validated, redacted and
documented; every FLEET_* variable the code reads is one of its settings or a documented contract variable;
and nothing passes settings through os.environ."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from harness.core.errors import UsageError
from harness.core.settings import CONTRACT_VARIABLES, Settings, redact, setting_specs
from tests.support import REPO

ROOT = REPO
DOC = ROOT / "docs" / "settings.md"
SECRET = "s3cr3t-pw"


def test_defaults_then_environment_then_flags_each_with_its_origin() -> None:
    d = Settings.resolve({}, {})
    assert (d.runs, d.broker_url, d.namespace, d.visibility_timeout_s) == (Path("runs"), "", "", 6 * 3600)
    assert (d.slot_ttl_s, d.start_timeout_s, d.retry_backoff_s, d.max_attempts, d.log_file) == (30.0, 30.0, (5.0, 30.0, 120.0), 3, None)
    assert set(d.origins.values()) == {"default"}

    env = {"FLEET_RUNS": "/r/env", "FLEET_BROKER_URL": "redis://e:6379/0", "FLEET_RETRY_BACKOFF": "0.5,1",
           "FLEET_START_TIMEOUT": "20", "FLEET_NAMESPACE": "team-a"}
    e = Settings.resolve({}, env)
    assert (e.runs, e.broker_url, e.retry_backoff_s, e.start_timeout_s, e.namespace) == (
        Path("/r/env"), "redis://e:6379/0", (0.5, 1.0), 20.0, "team-a")
    assert e.origin("runs") == "env FLEET_RUNS" and e.origin("slot_ttl_s") == "default"

    f = Settings.resolve({"runs": "/r/flag", "broker_url": "redis://f:6379/0", "max_attempts": 5}, env)
    assert (f.runs, f.broker_url, f.max_attempts, f.start_timeout_s) == (Path("/r/flag"), "redis://f:6379/0", 5, 20.0)
    assert (f.origin("runs"), f.origin("broker_url"), f.origin("max_attempts"), f.origin("start_timeout_s")) == (
        "flag --runs", "flag --broker", "flag --max-attempts", "env FLEET_START_TIMEOUT")


def test_an_empty_variable_or_flag_counts_as_not_given() -> None:
    s = Settings.resolve({"runs": "", "broker_url": None}, {"FLEET_RUNS": "", "FLEET_BROKER_URL": "", "FLEET_RETRY_BACKOFF": ""})
    assert (s.runs, s.broker_url, s.retry_backoff_s) == (Path("runs"), "", (5.0, 30.0, 120.0))
    assert s.embedded


@pytest.mark.parametrize(("given", "line"), [
    ({"FLEET_VISIBILITY_TIMEOUT": "abc"}, "FLEET_VISIBILITY_TIMEOUT='abc': expected a whole number of seconds"),
    ({"FLEET_VISIBILITY_TIMEOUT": "0"}, "FLEET_VISIBILITY_TIMEOUT='0': expected a whole number of seconds, at least 1"),
    ({"FLEET_RETRY_BACKOFF": "x"}, "FLEET_RETRY_BACKOFF='x': expected seconds separated by commas"),
    ({"FLEET_RETRY_BACKOFF": "5,-1"}, "FLEET_RETRY_BACKOFF='5,-1': expected seconds separated by commas, none negative"),
    ({"FLEET_SLOT_TTL": "nan"}, "FLEET_SLOT_TTL='nan': expected a number of seconds greater than 0"),
    ({"FLEET_START_TIMEOUT": "-3"}, "FLEET_START_TIMEOUT='-3': expected a number of seconds greater than 0"),
    ({"FLEET_NAMESPACE": "a,b"}, "FLEET_NAMESPACE='a,b': expected letters, digits"),
    ({"FLEET_BROKER_URL": "localhost:6379"}, "FLEET_BROKER_URL='localhost:6379': expected a URL such as redis://"),
    ({"FLEET_BROKER_URL": "redis://h:6379/0 extra"}, "FLEET_BROKER_URL='redis://h:6379/0 extra': a URL has no spaces"),
    ({"FLEET_RESULT_BACKEND": "redis://h:6379/1\n"}, "FLEET_RESULT_BACKEND='redis://h:6379/1': a URL has no spaces or control characters"),
])
def test_a_bad_variable_is_one_line_naming_it(given: dict[str, str], line: str) -> None:
    with pytest.raises(UsageError) as exc:
        Settings.resolve({}, given)
    assert str(exc.value).startswith(line) and "\n" not in str(exc.value)
    assert exc.value.exit_code == 2


def test_a_bad_flag_is_one_line_naming_it() -> None:
    with pytest.raises(UsageError, match=r"^--max-attempts '0': expected a whole number of attempts, at least 1$"):
        Settings.resolve({"max_attempts": 0}, {})


def test_a_bad_secret_value_is_named_without_its_password() -> None:
    for bad in (f"redis:/:{SECRET}@host:6379", f"{SECRET}@host"):
        with pytest.raises(UsageError) as exc:
            Settings.resolve({}, {"FLEET_BROKER_URL": bad})
        assert "FLEET_BROKER_URL=" in str(exc.value) and SECRET not in str(exc.value)


def test_a_name_that_is_no_setting_is_a_programming_error() -> None:
    with pytest.raises(TypeError, match="broker"):
        Settings.resolve({"broker": "redis://h/0"}, {})


def test_redact_hides_passwords_in_the_user_part_and_the_query() -> None:
    assert redact(f"redis://:{SECRET}@h:6379/0") == "redis://:***@h:6379/0"
    assert redact(f"redis://default:{SECRET}@h:6379/0") == "redis://default:***@h:6379/0"
    assert redact(f"redis://h:6379/0?password={SECRET}&db=1") == "redis://h:6379/0?password=***&db=1"
    assert redact("redis://h:6379/0") == "redis://h:6379/0"


def test_redact_hides_every_password_of_a_failover_list() -> None:
    # kombu takes "url1;url2" as brokers to fail over between; the second's password was shown in full.
    shown = redact(f"redis://:{SECRET}@h1:6379/0;redis://u:{SECRET}@h2:6379/0;sentinel://h3:26379?password={SECRET}")
    assert SECRET not in shown
    assert shown == "redis://:***@h1:6379/0;redis://u:***@h2:6379/0;sentinel://h3:26379?password=***"


def test_every_shown_and_logged_value_is_redacted() -> None:
    env = {"FLEET_BROKER_URL": f"redis://:{SECRET}@h:6379/0", "FLEET_RESULT_BACKEND": f"redis://:{SECRET}@h:6379/1",
           "FLEET_SLOTS_URL": f"redis://u:{SECRET}@h:6379/2"}
    s = Settings.resolve({}, env)
    assert SECRET not in s.one_line() and SECRET not in repr(s.rows())
    assert "broker_url=redis://:***@h:6379/0 (env FLEET_BROKER_URL)" in s.one_line()


def test_derived_queue_and_slot_places() -> None:
    e = Settings.resolve({"runs": "/tmp/r"}, {})
    assert e.celery_broker == "fleet-sqla+sqlite:////tmp/r/.queue/broker.sqlite"
    assert e.celery_backend == "db+sqlite:////tmp/r/.queue/results.sqlite"
    assert e.slots_redis == "" and e.slots_dir == Path("/tmp/r/.queue/slots")
    r = Settings.resolve({"broker_url": "redis://h:6379/0"}, {"FLEET_RESULT_BACKEND": "redis://h:6379/1"})
    assert (r.celery_broker, r.celery_backend, r.slots_redis) == ("redis://h:6379/0", "redis://h:6379/1", "redis://h:6379/0")
    assert Settings.resolve({}, {"FLEET_SLOTS_URL": "redis://s/0"}).slots_redis == "redis://s/0"


# -- the documentation ---------------------------------------------------------------------------------------------

def _doc_table(heading: str) -> list[list[str]]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    return [[c.strip().strip("`") for c in row.strip("|").split("|")] for row in rows[2:]]  # the header and its rule


def test_the_doc_lists_exactly_the_settings_with_their_variable_flag_and_default() -> None:
    documented = {r[0]: r for r in _doc_table("Settings")}
    assert list(documented) == [s.name for s in setting_specs()]
    defaults = Settings.resolve({}, {})
    for spec in setting_specs():
        _, env, flag, default, read_by, meaning = documented[spec.name]
        assert env == (spec.env or "-") and flag == (spec.flag or "-"), spec.name
        assert default == (spec.default_text or defaults.shown(spec.name)), spec.name
        assert read_by == spec.read_by and meaning, spec.name


def test_the_doc_lists_exactly_the_contract_variables() -> None:
    assert {r[0] for r in _doc_table("Variables that are not settings")} == set(CONTRACT_VARIABLES)


def test_the_readme_links_the_settings_doc() -> None:
    assert "(docs/settings.md)" in (ROOT / "README.md").read_text(encoding="utf-8")


# -- the code ------------------------------------------------------------------------------------------------------

def _sources() -> list[Path]:
    return sorted(p for d in ("harness", "workers") for p in (ROOT / d).rglob("*.py"))


def test_every_fleet_variable_the_code_names_is_a_setting_or_a_documented_contract() -> None:
    known = {s.env for s in setting_specs() if s.env} | set(CONTRACT_VARIABLES)
    named = {(m, p.relative_to(ROOT).as_posix()) for p in _sources()
             for m in re.findall(r"\bFLEET_[A-Z][A-Z_]*\b", p.read_text(encoding="utf-8"))}
    assert sorted(n for n in named if n[0] not in known) == []


def _environ_writes(path: Path) -> list[str]:
    """Writes to os.environ: item assignment or deletion, and the mutating methods; os.putenv / os.unsetenv."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        target = None
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
            for t in (node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]):
                if isinstance(t, ast.Subscript):
                    target = t.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("pop", "update", "setdefault", "clear", "popitem"):
                target = node.func.value
            elif node.func.attr in ("putenv", "unsetenv") and ast.unparse(node.func.value) == "os":
                found.append(f"{path.name}:{node.lineno}")
        if target is not None and ast.unparse(target) in ("os.environ", "environ"):
            found.append(f"{path.name}:{node.lineno}")
    return sorted(found, key=lambda w: int(w.rsplit(":", 1)[1]))


def test_no_harness_or_worker_code_writes_the_environment() -> None:
    assert [w for p in _sources() for w in _environ_writes(p)] == []


def test_the_environment_write_finder_finds_writes(tmp_path: Path) -> None:
    sample = tmp_path / "w.py"
    sample.write_text("import os\nos.environ['A'] = '1'\nos.environ.pop('B', None)\ndel os.environ['C']\nos.putenv('D', '')\n")
    assert _environ_writes(sample) == ["w.py:2", "w.py:3", "w.py:4", "w.py:5"]


def test_the_embedded_broker_is_polled_every_tenth_of_a_second(tmp_path: Path) -> None:
    # kombu's default for its SQLite transport is once a second, and every attempt waited on it.
    from harness.core.settings import Settings
    from workers.app import app, configure

    configure(Settings.resolve({"runs": str(tmp_path / "runs")}, {}))
    with app.connection_for_write() as conn:
        conn.connect()
        assert conn.transport.polling_interval == 0.1
        with conn.SimpleQueue("fleet.test.polling") as queue:  # a real put and get through the SQLite file
            queue.put({"n": 1})
            assert queue.get(timeout=5).payload == {"n": 1}
    assert (tmp_path / "runs" / ".queue" / "broker.sqlite").exists()
