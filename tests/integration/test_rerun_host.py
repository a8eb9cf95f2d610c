"""`fleet rerun --sweep ID --host H [--items] [--agents]`: every (or the named) cell of one host run again as new
attempts on the embedded default; the table, --json, REPORT.md and compare say which cells' latest attempt is a
rerun, and bad combinations get one line."""

from __future__ import annotations

import json

import pytest

from tests.integration.fleetkit import REPO, free_port, run_embedded

pytestmark = pytest.mark.integration


def _rows(stdout: str) -> dict[str, str]:
    return {cells[0]: cells[1] for line in stdout.splitlines() if line.startswith("│")
            for cells in [[c.strip() for c in line.split("│")[1:-1]]]}


def test_a_host_rerun_adds_attempts_and_every_view_says_rerun(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    # The embedded inventory on a port of its own: another sweep on this machine may hold 8765.
    inv = tmp_path / "local.toml"
    inv.write_text((REPO / "inventory" / "local.toml").read_text().replace(":8765/", f":{free_port()}/"))
    first = run_embedded(["sweep", "-i", str(inv), "--items", "07,12", "--label", "r"], tmp_path, home)
    assert first.returncode == 0, first.stderr[-3000:]
    runs = tmp_path / "runs"
    (base,) = [p.name for p in runs.iterdir() if (p / "sweep.json").exists()]
    second = run_embedded(["sweep", "-i", str(inv), "--items", "07,12", "--label", "r"], tmp_path, home)
    assert second.returncode == 0, second.stderr[-3000:]
    (sweep_id,) = [p.name for p in runs.iterdir() if (p / "sweep.json").exists() and p.name != base]

    # Bad combinations: one line each, exit 2, nothing run.
    for args, said in (
        (["rerun", "local", "07", "--sweep", sweep_id, "--host", "local"], "not both"),
        (["rerun", "--sweep", sweep_id, "--items", "07"], "--items goes with --host"),
        (["rerun", "--sweep", sweep_id], "name one cell"),
        (["rerun", "--sweep", sweep_id, "--host", "tower9"], "--host 'tower9': sweep"),
        (["rerun", "--sweep", sweep_id, "--host", "local", "--items", "07,99"], "--items '99'"),
        (["rerun", "--sweep", sweep_id, "--host", "local", "--agents", "hermes"], "--agents 'hermes'"),
        (["rerun", "--sweep", sweep_id, "--host", "local", "--items", ","], "names nothing"),
        (["rerun", "--sweep", sweep_id, "--host", "local", "--agent", "builtin"], "--agent goes with HOST ITEM"),
    ):
        bad = run_embedded(args, tmp_path, home)
        assert bad.returncode == 2 and said in bad.stderr, (args, bad.stderr)
        assert len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr, bad.stderr
    assert all(len(v) == 1 for v in json.loads((runs / sweep_id / "sweep.json").read_text())["attempts"].values())

    one = run_embedded(["rerun", "--sweep", sweep_id, "--host", "local", "--items", "07", "--json"], tmp_path, home)
    assert one.returncode == 0, one.stderr[-3000:]
    cells = {c["item"]: c for c in json.loads(one.stdout)["cells"]}
    assert (cells["07-photo-renamer"]["attempts"], cells["07-photo-renamer"]["rerun"]) == (2, True)
    assert (cells["12-explain-only"]["attempts"], cells["12-explain-only"]["rerun"]) == (1, False)

    every = run_embedded(["rerun", "--sweep", sweep_id, "--host", "local"], tmp_path, home)
    assert every.returncode == 0, every.stderr[-3000:]
    assert _rows(every.stdout) == {"07-photo-renamer": "DELIVERED (3 attempts, rerun)", "12-explain-only": "DELIVERED (2 attempts, rerun)"}, every.stdout
    record = json.loads((runs / sweep_id / "sweep.json").read_text())
    # Earlier attempts are kept; each rerun is recorded with the attempt it began with.
    assert [a["attempt"] for a in record["attempts"]["local/07-photo-renamer/builtin/r1"]] == [1, 2, 3]
    assert [r["cells"] for r in record["reruns"]] == [
        {"local/07-photo-renamer/builtin/r1": 2},
        {"local/07-photo-renamer/builtin/r1": 3, "local/12-explain-only/builtin/r1": 2}]

    # The one-cell form keeps working, and is a rerun too.
    cell = run_embedded(["rerun", "local", "12", "--sweep", sweep_id, "--json"], tmp_path, home)
    assert cell.returncode == 0, cell.stderr[-3000:]
    assert {c["item"]: (c["attempts"], c["rerun"]) for c in json.loads(cell.stdout)["cells"]}["12-explain-only"] == (3, True)

    assert run_embedded(["report", sweep_id], tmp_path, home).returncode == 0
    report = (runs / sweep_id / "REPORT.md").read_text()
    assert "| local / builtin | DELIVERED (rerun) | DELIVERED (rerun) |" in report, report
    assert "- rerun: 2 cell(s)" in report
    reruns = report.split("## Reruns", 1)[1]
    assert "host local: 1 cell(s) run again; none of them counts any more" in reruns, reruns
    assert "host local: 2 cell(s) run again; counted: local/07-photo-renamer/builtin/r1" in reruns, reruns
    assert "host local: 1 cell(s) run again; counted: local/12-explain-only/builtin/r1" in reruns, reruns
    results = json.loads((runs / sweep_id / "results.json").read_text())
    assert all(c["rerun"] for c in results["cells"])

    cmp = run_embedded(["compare", base, sweep_id, "--all", "--json"], tmp_path, home)
    assert cmp.returncode == 0, cmp.stderr[-3000:]
    data = json.loads(cmp.stdout)
    assert {r["item"]: r["candidate"]["reps"][0]["rerun"] for r in data["rows"]} == {
        "07-photo-renamer": True, "12-explain-only": True}
    assert {r["item"]: r["baseline"]["reps"][0]["rerun"] for r in data["rows"]} == {
        "07-photo-renamer": False, "12-explain-only": False}
    text = run_embedded(["compare", base, sweep_id, "--all"], tmp_path, home)
    assert "DELIVERED -> DELIVERED (rerun)" in text.stdout, text.stdout


def _fast_setup(tmp_path):
    import sys

    from tests.integration.conftest import write_inventory, write_prompts

    inv = write_inventory(tmp_path / "inv.toml", [f"""[hosts.here]
transport = "local"
workdir = "{tmp_path / 'work'}"
python = "{sys.executable}"
model = {{ base_url = "http://127.0.0.1:9/v1", id = "m", context = 4096, max_output = 512 }}
[hosts.here.agents.fast]
kind = "command"
command = ["sh", "-c", "echo hi > out.txt; echo finished"]
"""])
    prompts = write_prompts(tmp_path / "prompts", {"01-a": "do it\n", "02-b": "do it\n"})
    return inv, prompts


def test_a_rerun_of_a_sweep_stopped_before_every_cell_ran_is_refused_until_resumed(tmp_path):
    """A sweep whose coordinator died (status running, lock free) with a cell never run: a rerun of another cell
    ended it `finished`, the cell pending for good and the pass rate over the cells that ran (prune could then
    remove it as finished). It is one line, nothing written, until `fleet resume` has run the rest."""
    inv, prompts = _fast_setup(tmp_path)
    first = run_embedded(["sweep", "-i", str(inv), "--prompts", str(prompts)], tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    runs = tmp_path / "runs"
    (sweep_id,) = [p.name for p in runs.iterdir() if (p / "sweep.json").exists()]
    path = runs / sweep_id / "sweep.json"
    record = json.loads(path.read_text())
    del record["attempts"]["here/02-b/fast/r1"]
    record["status"] = "running"
    path.write_text(json.dumps(record))
    before = path.read_bytes()
    for args in (["rerun", "--sweep", sweep_id, "--host", "here", "--items", "01"], ["rerun", "here", "01", "--sweep", sweep_id]):
        bad = run_embedded([*args, "-i", str(inv)], tmp_path)
        assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
        assert f"was stopped before every cell ran (here/02-b/fast/r1 not run to its end): `fleet resume {sweep_id}` " \
            "first" in bad.stderr, bad.stderr
    assert path.read_bytes() == before
    assert run_embedded(["resume", sweep_id, "-i", str(inv)], tmp_path).returncode == 0
    ok = run_embedded(["rerun", "--sweep", sweep_id, "--host", "here", "--items", "01", "-i", str(inv), "--json"], tmp_path)
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert {c["item"]: (c["attempts"], c["rerun"]) for c in json.loads(ok.stdout)["cells"]} == {
        "01-a": (2, True), "02-b": (1, False)}


def test_a_rerun_stopped_before_it_sent_every_cell_is_finished_by_resume(tmp_path):
    """A rerun records the cells it runs again (sweep.json's reruns) before it sends anything; one killed after
    sending some of them left the others at their old, measured attempt, which resume never runs again: the
    report said "2 cell(s) run again" of a cell that never was. Resume now sends what the rerun planned."""
    import sys

    from tests.integration.conftest import write_inventory, write_prompts

    inv = write_inventory(tmp_path / "inv.toml", [f"""[hosts.here]
transport = "local"
workdir = "{tmp_path / 'work'}"
python = "{sys.executable}"
model = {{ base_url = "http://127.0.0.1:9/v1", id = "m", context = 4096, max_output = 512 }}
[hosts.here.agents.fast]
kind = "command"
command = ["sh", "-c", "echo hi > out.txt; echo finished"]
"""])
    prompts = write_prompts(tmp_path / "prompts", {"01-a": "do it\n", "02-b": "do it\n"})
    first = run_embedded(["sweep", "-i", str(inv), "--prompts", str(prompts)], tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    runs = tmp_path / "runs"
    (sweep_id,) = [p.name for p in runs.iterdir() if (p / "sweep.json").exists()]
    # What `fleet rerun --sweep ID --host here` killed after sending 01-a's attempt 2 leaves: both cells in the
    # rerun's record, status running, 02-b's attempt 2 never sent (01-a's attempt 2 is there, measured).
    one = run_embedded(["rerun", "here", "01", "--sweep", sweep_id], tmp_path)
    assert one.returncode == 0, one.stderr[-3000:]
    path = runs / sweep_id / "sweep.json"
    record = json.loads(path.read_text())
    record["reruns"][-1]["cells"]["here/02-b/fast/r1"] = 2
    record["status"] = "running"
    path.write_text(json.dumps(record))
    # Until resume sends the rest, the report says how many of the planned cells were run again.
    report = run_embedded(["report", sweep_id], tmp_path)
    assert report.returncode == 0, report.stderr
    reruns = (runs / sweep_id / "REPORT.md").read_text().split("## Reruns", 1)[1]
    assert "host here: 1 of 2 planned cell(s) run again (stopped midway; `fleet resume` runs the rest)" in reruns, reruns

    resumed = run_embedded(["resume", sweep_id, "-i", str(inv), "--json"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    cells = {c["item"]: (c["attempts"], c["rerun"]) for c in json.loads(resumed.stdout)["cells"]}
    # 02-b gets the attempt its rerun planned; 01-a, whose rerun attempt ran, is not run a third time.
    assert cells == {"01-a": (2, True), "02-b": (2, True)}, cells
    again = run_embedded(["resume", sweep_id, "-i", str(inv), "--json"], tmp_path)
    assert {c["item"]: c["attempts"] for c in json.loads(again.stdout)["cells"]} == {"01-a": 2, "02-b": 2}
