"""Make ``runner-outputs.json``: what the real test runners print when no test ran, and controls beside it.

    .venv/bin/python tests/harness/guard/data/make_runner_outputs.py [PYTHON ...]

Each case runs a real runner (pytest from this venv, unittest from each interpreter given, default this
venv's) in a fresh folder holding one small test module, and keeps the command, the exit code and the
output (stdout then stderr) exactly as printed. unittest says "Ran 0 tests ... OK" and exits 0 on Python
3.11, "NO TESTS RAN" and exit 5 from 3.12 on, so pass a 3.12+ interpreter too to record both.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

OUT = Path(__file__).with_name("runner-outputs.json")
MODULE = '''import unittest


class T(unittest.TestCase):
    def test_a(self):
        self.assertEqual(1, 1)

    def test_b(self):
        self.assertEqual(2, 2)

    @unittest.skip("later")
    def test_s(self):
        pass
'''
FAILING = MODULE.replace("self.assertEqual(2, 2)", "self.assertEqual(2, 3)")
SKIPPED_ONLY = '''import unittest


class T(unittest.TestCase):
    @unittest.skip("later")
    def test_s(self):
        pass
'''

# name -> (module text or None for an empty folder, runner argv after the interpreter)
PYTEST = {
    "pytest-empty": (None, ["-m", "pytest", "-p", "no:cacheprovider"]),
    "pytest-q-empty": (None, ["-m", "pytest", "-q", "-p", "no:cacheprovider"]),
    "pytest-deselected-only": (MODULE, ["-m", "pytest", "-p", "no:cacheprovider", "-k", "nomatch"]),
    "pytest-q-deselected-only": (MODULE, ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "nomatch"]),
    "pytest-q-skipped-and-deselected": (MODULE, ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "test_s"]),
    "pytest-q-passed-and-deselected": (MODULE, ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "test_a"]),
    "pytest-q-failed-and-deselected": (FAILING, ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "test_b"]),
}
UNITTEST = {
    "unittest-empty": (None, ["-m", "unittest", "-v"]),
    "unittest-k-nomatch": (MODULE, ["-m", "unittest", "-v", "-k", "nomatch"]),
    "unittest-failed": (FAILING, ["-m", "unittest", "-v"]),
    "unittest-skipped-only": (SKIPPED_ONLY, ["-m", "unittest", "-v"]),
}


def run(python: str, module: str | None, argv: list[str]) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="fleet-runner-") as tmp:
        if module is not None:
            Path(tmp, "test_m.py").write_text(module)
        proc = subprocess.run([python, *argv], cwd=tmp, capture_output=True, text=True, timeout=120)
        version = subprocess.run([python, "-c", "import platform; print(platform.python_version())"],
                                 capture_output=True, text=True, check=True).stdout.strip()
    command = "python3 " + " ".join(shlex.quote(a) for a in argv)
    return {"command": command, "python": version, "exit_code": proc.returncode, "output": proc.stdout + proc.stderr}


def main(pythons: list[str]) -> None:
    cases: dict[str, object] = {}
    for name, (module, argv) in PYTEST.items():
        cases[name] = run(sys.executable, module, argv)
    for python in pythons or [sys.executable]:
        for name, (module, argv) in UNITTEST.items():
            entry = run(python, module, argv)
            cases[f"{name}-py{'.'.join(str(entry['python']).split('.')[:2])}"] = entry
    OUT.write_text(json.dumps(cases, indent=1, ensure_ascii=False) + "\n")
    print(f"{OUT}: {len(cases)} cases")


if __name__ == "__main__":
    main(sys.argv[1:])
