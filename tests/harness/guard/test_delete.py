"""Recursive-delete refusal: what counts, what does not, the owner's ask, and the latch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.guard.delete import (
    RECURSIVE_DELETE_REFUSAL,
    DeleteGuard,
    find_recursive_delete,
    owner_asked_for_delete,
)
from tests.fixtures import PIXEL_FLEET

FIXTURES = PIXEL_FLEET
TOWER2 = json.loads((FIXTURES / "photo-renamer-tower2-d4a61f33.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    ("command", "fragment"),
    [
        ("rm -rf build", "rm -rf build"),
        ("rm -r -f build", "rm -r -f build"),
        ("rm --recursive --force build", "rm --recursive --force build"),
        ("rm -fr build", "rm -fr build"),
        ("rm -R build", "rm -R build"),
        ("rm -rv build", "rm -rv build"),
        ("rm build -r", "rm build -r"),
        ("/bin/rm -rf build", "/bin/rm -rf build"),
        ("\\rm -rf build", "\\rm -rf build"),
        ('"rm" -rf build', '"rm" -rf build'),
        ("cd /workspace && rm -rf build", "rm -rf build"),
        ("make clean; rm -rf build", "rm -rf build"),
        ("test -d build || rm -rf build", "rm -rf build"),
        ("ls build | xargs rm -rf", "xargs rm -rf"),
        ("find . -name '*.tmp' -print0 | xargs -0 -I {} rm -rf {}", "xargs -0 -I {} rm -rf {}"),
        ("sudo rm -rf /opt/app", "sudo rm -rf /opt/app"),
        ("sudo -u www-data rm -rf cache", "sudo -u www-data rm -rf cache"),
        ("env DEBUG=1 rm -rf build", "env DEBUG=1 rm -rf build"),
        ("timeout 10 rm -rf build", "timeout 10 rm -rf build"),
        ("nohup rm -rf build &", "nohup rm -rf build"),
        ("(cd out && rm -rf assets)", "rm -rf assets"),
        ("{ rm -rf build; }", "rm -rf build"),
        ("if [ -d build ]; then rm -rf build; fi", "then rm -rf build"),
        ('for d in */; do rm -rf "$d"; done', 'do rm -rf "$d"'),
        ("echo $(rm -rf build)", "rm -rf build"),
        ("echo `rm -rf build`", "rm -rf build"),
        ("cat <(rm -rf build)", "rm -rf build"),
        ("find . -name '*.pyc' -delete", "find . -name '*.pyc' -delete"),
        ("find /tmp/x -type d -exec rm -r {} +", "find /tmp/x -type d -exec rm -r {} +"),
        ("find . -type f -execdir rm {} \\;", "find . -type f -execdir rm {} \\;"),
        ("find . -exec sh -c 'rm -rf \"$1\"' _ {} \\;", "find . -exec sh -c 'rm -rf \"$1\"' _ {} \\;"),
        ("python3 -c \"import shutil; shutil.rmtree('build')\"", "shutil.rmtree('build')"),
        ("python -c 'from shutil import rmtree; rmtree(\"out\")'", 'rmtree("out")'),
        ("python3 -c 'import os; os.system(\"rm -rf build\")'", "rm -rf build"),
        ("python3 -c \"import subprocess; subprocess.run(['rm', '-rf', 'build'])\"", "'rm', '-rf'"),
        ("python3 - <<'EOF'\nimport shutil\nshutil.rmtree('x')\nEOF", "shutil.rmtree('x')"),
        ("node -e \"require('fs').rmSync('dist', {recursive: true, force: true})\"", "rmSync('dist'"),
        ("npx rimraf dist", "npx rimraf dist"),
        ("bash -c 'rm -rf build'", "rm -rf build"),
        ('sh -lc "cd x && rm -rf y"', "rm -rf y"),
        ('eval "rm -rf build"', "rm -rf build"),
        ("echo 'rm -rf build' | sh", "rm -rf build"),
        ("bash <<'EOF'\nrm -rf build\nEOF", "rm -rf build"),
        ("bash <<< 'rm -rf build'", "rm -rf build"),
        ("su -c 'rm -rf /srv/app'", "rm -rf /srv/app"),
        ("ssh builder 'rm -rf /srv/cache'", "rm -rf /srv/cache"),
        ("git clean -fdx", "git clean -fdx"),
        ("git rm -r old_module", "git rm -r old_module"),
        ("rsync -a --delete empty/ target/", "rsync -a --delete empty/ target/"),
        ("rmdir /s /q build", "rmdir /s /q build"),
        ("rd /S /Q build", "rd /S /Q build"),
        ("del /s /q *.tmp", "del /s /q *.tmp"),
        ("cmd /c rd /s /q build", "rd /s /q build"),
        ("Remove-Item -Recurse -Force build", "Remove-Item -Recurse -Force build"),
        ("Remove-Item build -r", "Remove-Item build -r"),
        ("Get-ChildItem build | Remove-Item -Recurse", "Remove-Item -Recurse"),
        ('powershell -Command "Remove-Item C:/temp/x -Recurse"', "Remove-Item C:/temp/x -Recurse"),
        ("pwsh -c 'rd build -Recurse'", "rd build -Recurse"),
        # An unreadable command (unclosed quote) falls back to a plain-text scan.
        ('echo "unclosed && rm -rf build', "rm -rf build"),
    ],
)
def test_recursive_deletions_are_found(command: str, fragment: str) -> None:
    found = find_recursive_delete(command)
    assert found is not None, command
    assert fragment in found, (command, found)


@pytest.mark.parametrize(
    "command",
    [
        "rm file.txt",
        "rm -f file.txt",
        "rm -i a b",
        "rm -d emptydir",
        "rm -- -r",
        "rmdir emptydir",
        'echo "rm -rf /"',  # printed, not executed
        "echo rm -rf build",
        "printf 'rm -rf build\\n' > cleanup.sh",
        'grep -rn "rm -rf" .',
        "git commit -m 'stop using rm -rf in the Makefile'",
        "cat > notes.sh <<'EOF'\nrm -rf build\nEOF",  # stored in a file, not run
        "git rm -r --cached build",
        "git clean -n -d",
        "find . -name '*.py' -print",
        "python3 test_rename.py",
        "python3 -c 'print(\"rm -rf\")'",
        "ls -la 2>&1 | head",
        "mkdir -p /workspace/test_manual && cd /workspace/test_manual && ls -la",
        "rsync -a src/ dst/",
        "Remove-Item build/file.txt",
        "cat script.sh | bash",  # what the script does is not visible here
        "",
    ],
)
def test_harmless_commands_are_not_deletions(command: str) -> None:
    assert find_recursive_delete(command) is None


def test_tower2_recorded_cleanup_is_found_and_its_earlier_commands_are_not() -> None:
    calls = TOWER2["calls"]
    execs = [call for call in calls if call["tool"] == "exec"]
    assert find_recursive_delete(calls[9]["arguments"]["command"]) == "rm -rf /workspace/test_manual"
    assert [find_recursive_delete(call["arguments"]["command"]) for call in execs[:4]] == [None] * 4
    assert find_recursive_delete(calls[10]["arguments"]["command"]) is None


def test_tower2_guard_refuses_the_cleanup_then_every_later_call() -> None:
    guard = DeleteGuard(TOWER2["submittedUserText"])
    assert not guard.authorized
    decisions = [guard.check(call["tool"], call["arguments"]) for call in TOWER2["calls"]]
    assert [decision.allowed for decision in decisions] == [True] * 9 + [False, False]
    refusal, latched = decisions[9], decisions[10]
    assert refusal.fragment == "rm -rf /workspace/test_manual" and refusal.stop_turn
    # The recorded refusal text is what both refused calls received.
    assert refusal.reason == RECURSIVE_DELETE_REFUSAL == calls_result_text(9) == calls_result_text(10)
    # The harmless mkdir && ls is refused by the latch, not as a deletion.
    assert latched.fragment is None and latched.stop_turn and latched.reason == RECURSIVE_DELETE_REFUSAL
    assert guard.stopped
    # Any later tool, even a read, is refused for the rest of the turn.
    assert not guard.check("read", {"path": "Playground/photo-renamer/test_rename.py"}).allowed


def calls_result_text(index: int) -> str:
    return TOWER2["calls"][index]["result"]["text"]


def test_guard_reads_wrapped_and_process_commands() -> None:
    wrapped = DeleteGuard("write a script and test it")
    decision = wrapped.check("tool_call", {"id": "openclaw:core:exec", "args": {"command": "rm -rf /tmp/x"}})
    assert not decision.allowed and decision.fragment == "rm -rf /tmp/x"
    process = DeleteGuard("write a script and test it")
    assert not process.check("process", {"action": "write", "sessionId": "s1", "data": "rm -rf build\n"}).allowed
    harmless = DeleteGuard("write a script and test it")
    assert harmless.check("write", {"path": "clean.sh", "content": "rm -rf build\n"}).allowed  # a file, not a run
    assert harmless.check("exec", {"command": "python3 -m unittest -v"}).allowed
    assert not harmless.stopped


def test_an_owner_who_asked_for_the_deletion_is_not_refused() -> None:
    guard = DeleteGuard("Delete the directory /workspace/test_manual recursively.")
    assert guard.authorized
    decision = guard.check("exec", {"command": "rm -rf /workspace/test_manual", "workdir": "/workspace"})
    assert decision.allowed and not guard.stopped


@pytest.mark.parametrize(
    "request_text",
    [
        "Delete the directory /workspace/test_manual recursively.",
        "Remove the build folder and rebuild the site.",
        "rm -rf node_modules and reinstall the dependencies",
        "Please clean up the temp directory.",
        "Wipe everything in Playground/old-project, I don't need it.",
        "Delete all the files in the logs directory",
        "remove /workspace/Playground/old-project",
    ],
)
def test_owner_asked_for_delete(request_text: str) -> None:
    assert owner_asked_for_delete(request_text)


@pytest.mark.parametrize(
    "request_text",
    [
        TOWER2["submittedUserText"],
        "write a python script that renames all photos in a folder by date taken, and test it",
        "Don't delete any folders, just fix the tests.",
        "Do not remove anything; only add a README.",
        "Write a script that deletes empty folders.",
        "Write a tool to remove old build folders.",
        "Remove the TODO comment in src/app.py",
        "Delete the unused import in rename_photos.py",
        "Keep the test folder; fix the failing test instead of deleting it.",
        "",
    ],
)
def test_owner_did_not_ask_for_delete(request_text: str) -> None:
    assert not owner_asked_for_delete(request_text)
