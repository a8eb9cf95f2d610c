"""The cell page and the stored files route, over real HTTP (Starlette's TestClient) on a store written by the
real SweepWriter: a builtin-style attempt with a real transcript, a grade with checks, a reviewer's override, a
workspace manifest and its files, and an older attempt with none of them."""

from __future__ import annotations

import contextlib
from typing import Any
import base64
import hashlib
import html
import os
import re
import time
from pathlib import Path

import pytest
from markupsafe import escape
from starlette.testclient import TestClient

from harness.core.checks.result import AssertionResult, CheckResult
from harness.dashboard.app import make_app
from harness.dashboard.cell import cell_page
from harness.dashboard.context import Links
from harness.grading.model import Grade, StopRecord
from harness.store import override_grade
from harness.core.records import Artifact
from harness.core.sweep import SweepRecord
from harness.store import Store
from harness.core.transcript import (GuardDecision, ModelError, ModelRequest, ModelResponse, OwnerReceipt, ReceiptEvent,
                                RunEnd, RunStart, StopEvent, ToolCall, ToolCallRecord, ToolDetails, ToolResult,
                                TranscriptWriter, Usage)
from tests.support import finished_result, synthetic_sweep

SWEEP = "20261201-000000-cell"
CELL = "host0/01-item/builtin/r1"
OTHER = "host0/02-item/builtin/r1"


def _attacks(n: int) -> list[str]:
    """The markup planted in one place of the attempt, told apart from the others' by ``n``."""
    return [f"<script>alert({n})</script>", f"<img src=x onerror=alert({n})>", f"[x](javascript:alert({n}))",
            f'<a href="javascript:alert({n})">x</a>']


def _esc(text: str) -> str:
    """``text`` as the templates print it (Jinja2's autoescape)."""
    return str(escape(text))


def _planted(n: int) -> str:
    return " ".join(_attacks(n))


REPLY, RESULT, NAME, CONTENT, ANSWER, ARGUMENT, REASONING = 11, 12, 13, 14, 15, 16, 17
PLACES = {"model reply": REPLY, "tool result": RESULT, "workspace file name": NAME, "workspace file content": CONTENT,
          "answer.txt": ANSWER, "tool argument": ARGUMENT, "reasoning": REASONING}

HOSTILE_NAME = f"<script>alert({NAME})</script><img src=x onerror=alert({NAME})>.html"
"""A workspace file's name (its "/" makes a folder "<script>alert(13)<" and a file in it, as a host would)."""
RAW_NAME = "caf\udce9.txt"
"""A host file name of raw bytes (b'caf\\xe9.txt'), as Python reads it: stored as caf\\udce9.txt, in escapes."""
BINARY = bytes(range(256)) * 4


def _start() -> RunStart:
    return RunStart(run_id="r1", agent="builtin", agent_version="0.1.0", harness_commit="abc", model="m",
                    base_url="http://127.0.0.1:1/v1", context=32768, max_output=2048, stream=True, timeout_s=600,
                    retries=3, exec_timeout_s=120, workspace="/w", prompt_file="/p.md", prompt="write the page",
                    system_prompt="You are a coding agent", tools=["write", "exec"], budget_policy={},
                    python="3.11.7", platform="Linux")


def _write_transcript(path: Path) -> bytes:
    """A builtin agent's transcript: an error and a retry, a reply with reasoning and two calls (one failing), the
    guard's decisions, a stop, the receipt and run_end; markup planted in the reply, a result and an argument."""
    with TranscriptWriter(path) as w:
        w.append(_start())
        w.append(ModelRequest(round=1, max_tokens=2048, stream=True, prompt_tokens_estimate=900,
                              messages_added=[{"role": "user", "content": "write the page"}]))
        w.append(ModelError(round=1, attempt=1, kind="http", status=500, message="HTTP 500: CUDA out of memory",
                            retry_in_s=2.0))
        w.append(ModelResponse(round=1, text=f"Here is the page. {_planted(REPLY)}", reasoning=f"think {_planted(REASONING)}",
                               tool_calls=[ToolCallRecord(id="c1", name="write", arguments='{"path": "index.html"}'),
                                           ToolCallRecord(id="c2", name="exec", arguments='{"command": "false"}')],
                               finish_reason="tool_calls",
                               usage=Usage(prompt_tokens=901, completion_tokens=123, total_tokens=1024),
                               latency_s=0.25, attempts=2, model="m"))
        w.append(ToolCall(round=1, call_id="c1", name="write",
                          arguments={"path": "index.html", "content": f"<html>{_planted(ARGUMENT)}</html>"}))
        w.append(ToolResult(round=1, call_id="c1", name="write", is_error=False, text=f"Created index.html {_planted(RESULT)}",
                            details=ToolDetails(status="ok", path="index.html", bytes=10)))
        w.append(GuardDecision(round=1, rule="budget", decision="allow", call_id="c1", data={"failures": 0}))
        w.append(ToolCall(round=1, call_id="c2", name="exec", arguments={"command": "false"}))
        w.append(ToolResult(round=1, call_id="c2", name="exec", is_error=True, text="[exit code 1]",
                            details=ToolDetails(status="failed", exit_code=1, duration_s=0.01)))
        w.append(GuardDecision(round=1, rule="budget", decision="stop", call_id="c2", reason="consecutive_failures",
                               text="4 consecutive failures", data={"failures": 4}))
        w.append(StopEvent(round=1, rule="budget", reason="consecutive_failures", text="4 consecutive failures",
                           call_id="c2"))
        w.append(ReceiptEvent(receipt=OwnerReceipt(status="failed", text="stopped", source="budget_stop",
                                                   reasons=("4 consecutive failures",))))
        w.append(RunEnd(outcome="stopped", reason="consecutive_failures", exit_code=0, rounds=1, tool_calls=2,
                        duration_s=1.5, usage=Usage(prompt_tokens=901, completion_tokens=123, total_tokens=1024)))
    return path.read_bytes()


def _manifest(files: dict[str, bytes]) -> bytes:
    import json

    entries = []
    for name, data in files.items():
        entry = {"path": name.encode("utf-8", "backslashreplace").decode(), "size": len(data),
                 "sha256": hashlib.sha256(data).hexdigest(), "packed": True, "why": ""}
        if entry["path"] != name:
            entry["path_b64"] = base64.b64encode(os.fsencode(name)).decode()
        entries.append(entry)
    entries.append({"path": "node_modules/", "size": None, "sha256": None, "packed": False, "why": "skipped folder"})
    entries.append({"path": "latest", "size": None, "sha256": None, "packed": False, "why": "not a regular file",
                    "link": "/etc/passwd"})
    entries.append({"path": "big.log", "size": 10 ** 9, "sha256": "0" * 64, "packed": False, "why": "over the size cap"})
    return json.dumps(entries).encode()


WORKSPACE = {
    "index.html": f"<!doctype html><html><body>{_planted(CONTENT)}</body></html>".encode(),
    "notes.txt": b"plain notes\n",
    HOSTILE_NAME: b"named badly\n",
    RAW_NAME: b"raw name\n",
    "logo.bin": BINARY,
}


def _build(tmp_path: Path) -> tuple[Path, SweepRecord]:
    """The store: CELL with attempt 1 a harness failure (no transcript, manifest or checks: an older attempt's
    folder) and attempt 2 graded PARTIAL with everything, then overridden by a reviewer; OTHER not run."""
    runs = tmp_path / "runs"
    store = Store(runs)
    sweep = synthetic_sweep(SWEEP, hosts=1, items=2)
    sweep.items["01-item"] = sweep.items["01-item"].model_copy(update={"title": f"Forest page {_planted(19)}"})
    transcript = _write_transcript(tmp_path / "transcript.jsonl")
    checks = [CheckResult(name="page", kind="web", status="failed", summary="1 of 2 assertions failed",
                          details=[AssertionResult(name="element: h1", status="failed", message="no h1 <h1> found"),
                                   AssertionResult(name="console", status="passed", message="no console errors")])]
    with store.writer(SWEEP) as w:
        w.save_sweep(sweep)
        w.set_status(sweep, "running")
        cell = sweep.cell(CELL)
        assert w.record_attempt(sweep, finished_result(
            sweep, cell, 1, status="harness_failure", reason="host_lost", exit_code=None, artifacts=[
                Artifact.of("agent.stdout", b"agent said <script>alert(20)</script>\n" + b"x" * 200_000),
                Artifact.of("agent.stderr", b"Traceback-free stderr\n")]))
        arts = [Artifact.of("transcript.jsonl", transcript), Artifact.of("answer.txt", _planted(ANSWER).encode()),
                Artifact.of("workspace.manifest.json", _manifest(WORKSPACE)),
                Artifact.of("checks.json", ("[" + ",".join(c.model_dump_json() for c in checks) + "]").encode()),
                Artifact.of("agent.stdout", b"done\n"),
                *(Artifact.of(f"workspace/{name}", data) for name, data in WORKSPACE.items())]
        assert w.record_attempt(sweep, finished_result(sweep, cell, 2, artifacts=arts, duration_s=12.5))
        w.record_grade(sweep, CELL, 2, Grade(grade="PARTIAL", outcome="failed", reasons=["1 file(s) written",
                                                                                        "check page failed"],
                                             checks=checks, stop=StopRecord(reason="consecutive_failures",
                                                                            text="4 consecutive failures", at_call=2),
                                             graded_at="2026-12-01T00:01:00.000Z"))
        w.set_status(sweep, "finished")
    override_grade(store, SWEEP, CELL, 2, "DELIVERED", f"the h1 is there {_planted(18)}", "ana")
    return runs, store.load_sweep(SWEEP)


@pytest.fixture
def built(tmp_path: Path) -> tuple[Path, SweepRecord]:
    return _build(tmp_path)


def _page(runs: Path, url: str) -> tuple[int, str]:
    r = TestClient(make_app(runs)).get(url)
    return r.status_code, r.text


def _one_line_error(text: str) -> str:
    lines = re.findall(r'<p class="error-line">(.*?)</p>', text, re.S)
    assert len(lines) == 1, lines
    assert "Traceback" not in text and "\n" not in lines[0]
    return html.unescape(lines[0])


def test_the_page_shows_the_attempt_whole(built: tuple[Path, SweepRecord]) -> None:
    runs, sweep = built
    links = Links()
    status, page = _page(runs, links.cell(SWEEP, CELL))
    assert status == 200
    # The facts, the shown grade (the override), every attempt as a link, the last one shown.
    assert "Cell host0/01-item/builtin/r1" in page and "Forest page" in page and f'href="{links.host("host0")}"' in page
    assert f'href="{links.cell(SWEEP, CELL, 1)}"' in page and f'href="{links.cell(SWEEP, CELL, 2)}"' in page
    assert "HARNESS_FAILURE(host_lost)" in page and "override of PARTIAL" in page
    assert re.search(r"attempt 2</a> <span class=\"small\">\(shown\)", page)
    # The timeline: the turn's tokens and latency, the reasoning folded, both calls with arguments and results, the
    # failing one marked, the guard's stop, the stop, the receipt and run_end.
    assert "901 in / 123 out tokens" in page and "0.25 s" in page and "492 tok/s" in page and "2 tries" in page
    assert '<details class="reasoning"><summary>reasoning</summary>' in page
    assert "model error</b> round 1, try 1: http 500" in page and "CUDA out of memory" in page
    assert page.count('class="tl-tool') == 2 and page.count('class="tl-tool tool-error"') == 1
    assert "<dt>command</dt>" in page and "[exit code 1]" in page and "error: failed" in page
    assert 'decision d-stop">stop</span> · consecutive_failures' in page
    assert '<li class="tl-stop"' in page and '<li class="tl-receipt"' in page and "<b>run_end</b> stopped" in page
    # The answer, the checks with each assertion's message, the grade and its history with the override's author.
    assert 'id="answer"' in page and _esc(_attacks(ANSWER)[0]) in page
    assert "element: h1" in page and "no h1 &lt;h1&gt; found" in page and 'check check-failed' in page
    assert "check page failed" in page and "stop consecutive_failures" in page
    history = page[page.index("<h3>Grade history</h3>"):page.index('id="workspace"')]
    assert history.index("grader 3") < history.index("ana") and "the h1 is there" in history
    assert history.count("ana") == 1 and "override of PARTIAL" in history
    # The cell counts as the override, and says what it overrides.
    facts = page[:page.index('id="attempts"')]
    assert 'g-delivered">DELIVERED</span>' in facts and "override of PARTIAL" in facts


def test_every_stored_file_has_a_download_link_with_its_sha256(built: tuple[Path, SweepRecord]) -> None:
    runs, sweep = built
    store, links = Store(runs), Links()
    meta = store.load_meta(SWEEP, CELL, 2)
    client = TestClient(make_app(runs))
    page = client.get(links.cell(SWEEP, CELL, 2)).text
    for art in meta.artifacts:
        href = links.file(SWEEP, f"{CELL}/attempt-2/{art.name}")
        assert f'href="{_esc(href)}"' in page, art.name
        assert art.sha256 in page
        r = client.get(href)
        assert r.status_code == 200, (art.name, r.text[-300:])
        assert hashlib.sha256(r.content).hexdigest() == art.sha256
        assert r.headers["content-type"] == "application/octet-stream"
        assert r.headers["content-disposition"].startswith("attachment;")
        assert "sandbox" in r.headers["content-security-policy"] and r.headers["x-content-type-options"] == "nosniff"
    # The records meta.json does not list are downloads too (the raw grade history).
    assert f'href="{links.file(SWEEP, f"{CELL}/attempt-2/grades.jsonl")}"' in page
    # The raw non-UTF-8 name is listed as stored, in escapes, and its copy is found.
    assert "workspace/caf\\udce9.txt" in page and "raw name" in page


def test_a_file_can_be_viewed_as_plain_text_and_html_is_never_served_as_html(built: tuple[Path, SweepRecord]) -> None:
    runs, _ = built
    client = TestClient(make_app(runs))
    href = Links().file(SWEEP, f"{CELL}/attempt-2/workspace/index.html")
    r = client.get(href + "?view=1")
    assert r.status_code == 200 and r.headers["content-type"] == "text/plain; charset=utf-8"
    assert r.headers["content-disposition"].startswith("inline;") and "sandbox" in r.headers["content-security-policy"]
    assert r.content == WORKSPACE["index.html"]
    assert client.get(href).headers["content-type"] == "application/octet-stream"


@pytest.mark.parametrize("place", PLACES)
def test_planted_markup_renders_as_text(built: tuple[Path, SweepRecord], place: str) -> None:
    runs, _ = built
    status, page = _page(runs, Links().cell(SWEEP, CELL))
    assert status == 200
    n = PLACES[place]
    script, img, md, anchor = _attacks(n)
    for raw in (script, img, anchor):
        assert raw not in page, (place, raw)
    if place == "workspace file name":
        # The name's "/" made it a folder and a file; the whole path is shown, escaped.
        assert _esc(HOSTILE_NAME) in page
    else:
        for raw in (script, img, anchor, md):
            assert _esc(raw) in page, (place, raw)
    assert 'href="javascript:' not in page and "href='javascript:" not in page
    assert "<iframe" not in page


def test_no_markup_anywhere_in_the_page(built: tuple[Path, SweepRecord]) -> None:
    """The page's own tags are the only tags: no planted one survives in any place (title, override reason,
    agent.stdout of the older attempt too)."""
    runs, _ = built
    for attempt in (1, 2):
        status, page = _page(runs, Links().cell(SWEEP, CELL, attempt))
        assert status == 200
        assert not re.search(r"<script>alert|<img src=x|<a href=\"javascript:|href=\"javascript:", page)
        assert len(re.findall(r"<script\b", page)) == 1  # base.html's own dashboard.js


def test_workspace_files_are_escaped_text_html_as_source_and_binaries_as_downloads(built: tuple[Path, SweepRecord]) -> None:
    runs, _ = built
    links = Links()
    page = _page(runs, links.cell(SWEEP, CELL))[1]
    ws = page[page.index('id="workspace"'):page.index('id="downloads"')]
    assert "Markup, shown as its source: never rendered here." in ws
    assert _esc("<!doctype html><html><body>") in ws and "plain notes" in ws
    assert "Not text (1024 bytes)" in ws and f'href="{links.file(SWEEP, f"{CELL}/attempt-2/workspace/logo.bin")}"' in ws
    assert "caf\\udce9.txt" in ws and "raw name" in ws  # the name as stored, in escapes; the content found
    assert "skipped folder" in ws and "over the size cap" in ws and "link to /etc/passwd" in ws
    assert "<iframe" not in page and "<object" not in page and "<embed" not in page


def test_an_attempt_without_transcript_manifest_or_checks_shows_the_agents_output(built: tuple[Path, SweepRecord]) -> None:
    runs, _ = built
    links = Links()
    status, page = _page(runs, links.cell(SWEEP, CELL, 1))
    assert status == 200
    assert "no transcript.jsonl in this attempt" in page
    assert "agent said &lt;script&gt;alert(20)&lt;/script&gt;" in page and "Traceback-free stderr" in page
    # agent.stdout is cut in the page, with the whole one click away.
    assert re.search(r"… \d+ more bytes not shown: <a href=\"[^\"]+agent.stdout\">download the whole</a>", page)
    assert page.count("x" * 1000) <= 70  # 64 KiB of the 200 KB shown
    assert "No workspace manifest in this attempt" in page and "No checks ran for this attempt." in page
    assert "Not graded." in page


@pytest.mark.parametrize("url", [
    "/sweeps/{s}/cells/host0/01-item/builtin/r1?attempt=7",
    "/sweeps/{s}/cells/host0/01-item/builtin/r1?attempt=x",
    "/sweeps/{s}/cells/host0/09-item/builtin/r1",
    "/sweeps/{s}/cells/host0/01-item/builtin/r1/..%2F..%2F..%2F..",
    "/sweeps/{s}/cells/..%2F..%2F{s}%2Fhost0%2F01-item%2Fbuiltin%2Fr1",
    "/sweeps/{s}/cells/%2e%2e/%2e%2e",
    "/sweeps/{s}/cells/host0/02-item/builtin/r1?attempt=1",
    "/sweeps/nosuch/cells/host0/01-item/builtin/r1",
    "/sweeps/%2e%2e/cells/host0/01-item/builtin/r1",
])
def test_what_does_not_exist_is_a_404_line(built: tuple[Path, SweepRecord], url: str) -> None:
    runs, _ = built
    status, page = _page(runs, url.format(s=SWEEP))
    assert status in (403, 404), page
    _one_line_error(page)


def test_corrupt_records_are_one_line_each_and_the_rest_shows(built: tuple[Path, SweepRecord]) -> None:
    runs, _ = built
    store = Store(runs)
    folder = store.attempt_dir(SWEEP, CELL, 2)
    (folder / "grade.json").write_text('{"schema_version": 1, "grade": "SPLENDID"')
    (folder / "transcript.jsonl").write_bytes(b'{"schema_version": 1, "seq": 1, "event": "nonsense"}\n')
    status, page = _page(runs, Links().cell(SWEEP, CELL))
    assert status == 200 and "Traceback" not in page
    lines = [html.unescape(x) for x in re.findall(r'<p class="error-line">(.*?)</p>', page, re.S)]
    assert any("grade.json" in x and "not valid JSON" in x for x in lines), lines
    assert any("transcript.jsonl" in x and "line 1" in x for x in lines), lines
    assert "no h1 &lt;h1&gt; found" in page  # the checks come from checks.json when grade.json cannot be read
    assert "plain notes" in page and "the h1 is there" in page
    (folder / "meta.json").write_text("{not json")
    status, page = _page(runs, Links().cell(SWEEP, CELL))
    assert status == 200 and "Traceback" not in page
    assert any("meta.json" in html.unescape(x) and "not valid JSON" in html.unescape(x)
               for x in re.findall(r'<p class="error-line">(.*?)</p>', page, re.S))
    (store.sweep_dir(SWEEP) / "sweep.json").write_text("{broken")
    status, page = _page(runs, Links().cell(SWEEP, CELL))
    assert status == 500
    assert "sweep.json" in _one_line_error(page)


def test_a_packed_file_swapped_for_a_link_out_is_never_inlined(built: tuple[Path, SweepRecord], tmp_path: Path) -> None:
    runs, _ = built
    canary = tmp_path / "canary.txt"
    canary.write_text("CANARY-SECRET-42")
    target = Store(runs).attempt_dir(SWEEP, CELL, 2) / "workspace" / "notes.txt"
    target.unlink()
    target.symlink_to(canary)
    status, page = _page(runs, Links().cell(SWEEP, CELL))
    assert status == 200 and "CANARY-SECRET-42" not in page
    assert "leads outside the sweep&#39;s folder" in page


@pytest.fixture
def planted_links(built: tuple[Path, SweepRecord], tmp_path: Path) -> tuple[Path, Path]:
    runs, _ = built
    outside = tmp_path / "outside"
    outside.mkdir()
    canary = outside / "canary.txt"
    canary.write_text("CANARY-SECRET-42")
    folder = Store(runs).attempt_dir(SWEEP, CELL, 2)
    (folder / "leak.txt").symlink_to(canary)
    (Store(runs).sweep_dir(SWEEP) / "out").symlink_to(outside)
    os.mkfifo(folder / "fifo")
    return runs, canary


@pytest.mark.parametrize("path, expected", [
    ("../index.sqlite", (403, 404)),
    ("%2e%2e/index.sqlite", (403,)),
    ("%2e%2e%2F%2e%2e%2Fcanary.txt", (403,)),
    ("host0%2F..%2F..%2F..%2Foutside%2Fcanary.txt", (403,)),
    ("{canary}", (403,)),
    ("%2F{canary}", (403,)),
    ("{cell}/attempt-2/leak.txt", (403,)),
    ("out/canary.txt", (403,)),
    ("{cell}/attempt-2/fifo", (404,)),
    ("{cell}/attempt-2", (404,)),
    ("{cell}/attempt-2/", (403, 404)),
    ("{cell}/attempt-2/nosuch.txt", (404,)),
    (".lock", (404,)),
    ("{cell}/attempt-2/answer.txt%00.png", (403,)),
    ("{cell}/%2e/attempt-2/answer.txt", (403,)),
    ("{cell}%2F%2Fattempt-2/answer.txt", (403,)),
])
def test_the_files_route_never_leaves_the_sweeps_folder(planted_links: tuple[Path, Path], path: str,
                                                        expected: tuple[int, ...]) -> None:
    runs, canary = planted_links
    url = f"/sweeps/{SWEEP}/files/" + path.format(canary=str(canary).lstrip("/"), cell=CELL)
    if path == "{canary}":
        url = f"/sweeps/{SWEEP}/files/" + "%2F" + str(canary).lstrip("/").replace("/", "%2F")
    r = TestClient(make_app(runs)).get(url)
    assert r.status_code in expected, (url, r.status_code, r.text[-300:])
    assert b"CANARY-SECRET-42" not in r.content
    _one_line_error(r.text)


def test_the_lock_file_and_folders_are_not_files(planted_links: tuple[Path, Path]) -> None:
    runs, _ = planted_links
    client = TestClient(make_app(runs))
    assert (Store(runs).sweep_dir(SWEEP) / ".lock").exists()
    assert client.get(f"/sweeps/{SWEEP}/files/.lock").status_code == 404
    assert client.get(f"/sweeps/{SWEEP}/files/host0").status_code == 404
    ok = client.get(Links().file(SWEEP, f"{CELL}/attempt-2/answer.txt"))
    assert ok.status_code == 200 and ok.content == _planted(ANSWER).encode()


def test_a_large_file_is_streamed_in_pieces(built: tuple[Path, SweepRecord]) -> None:
    runs, _ = built
    big = Store(runs).attempt_dir(SWEEP, CELL, 2) / "big.bin"
    with open(big, "wb") as f:
        f.write(os.urandom(1 << 20) * 8)
    with TestClient(make_app(runs)) as client:
        with client.stream("GET", Links().file(SWEEP, f"{CELL}/attempt-2/big.bin")) as r:
            assert r.status_code == 200 and r.headers["content-length"] == str(8 << 20)
            pieces = [len(chunk) for chunk in r.iter_raw()]
    assert sum(pieces) == 8 << 20 and len(pieces) > 1


def _long_transcript(path: Path, events: int) -> bytes:
    with TranscriptWriter(path) as w:
        w.append(_start())
        rounds = (events - 3) // 4
        for k in range(1, rounds + 1):
            w.append(ModelResponse(round=k, text=f"round {k}: running the tests <b>again</b>",
                                   tool_calls=[ToolCallRecord(id=f"c{k}", name="exec", arguments='{"command": "pytest"}')],
                                   finish_reason="tool_calls", usage=Usage(prompt_tokens=1000 + k, completion_tokens=20,
                                                                          total_tokens=1020 + k),
                                   latency_s=0.1, attempts=1, model="m"))
            w.append(ToolCall(round=k, call_id=f"c{k}", name="exec", arguments={"command": "pytest"}))
            w.append(ToolResult(round=k, call_id=f"c{k}", name="exec", is_error=k % 3 == 0,
                                text="collected 5 items\n" + "." * 200 + f"\n{k} passed",
                                details=ToolDetails(status="failed" if k % 3 == 0 else "ok", exit_code=k % 3)))
            w.append(GuardDecision(round=k, rule="budget", decision="allow", call_id=f"c{k}", data={"results": k}))
        w.append(ReceiptEvent(receipt=OwnerReceipt(status="passed", text="done", source="model")))
        w.append(RunEnd(outcome="completed", exit_code=0, rounds=rounds, tool_calls=rounds, duration_s=100.0,
                        usage=Usage()))
    return path.read_bytes()


def test_a_1000_event_transcript_page_renders(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    store = Store(runs)
    sweep = synthetic_sweep(SWEEP, hosts=1, items=1)
    shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else tmp_path  # a thousand fsyncs, in memory where it can
    data = _long_transcript(shm / f"fleet-test-{os.getpid()}-transcript.jsonl", 1000)
    (shm / f"fleet-test-{os.getpid()}-transcript.jsonl").unlink()
    assert data.count(b"\n") >= 999
    with store.writer(SWEEP) as w:
        w.save_sweep(sweep)
        assert w.record_attempt(sweep, finished_result(sweep, sweep.cells[0], 1, artifacts=[
            Artifact.of("transcript.jsonl", data), Artifact.of("answer.txt", b"done")]))
        w.set_status(sweep, "finished")
    app = make_app(runs)
    r = TestClient(app).get(Links().cell(SWEEP, sweep.cells[0].id))
    assert r.status_code == 200
    assert r.text.count('<li class="tl-turn"') == 249 and r.text.count('class="tl-tool tool-error"') == 83
    assert "&lt;b&gt;again&lt;/b&gt;" in r.text
    dash = app.state.dash
    start = time.perf_counter()
    for _ in range(3):
        cell_page(dash, SWEEP, sweep.cells[0].id, None, Links())
    took = (time.perf_counter() - start) / 3
    print(f"\n1,000-event transcript: cell page in {took * 1000:.0f} ms of server time ({len(r.text):,} bytes)")


def test_a_cell_with_no_attempt_yet_is_a_page(built: tuple[Path, SweepRecord]) -> None:
    runs, _ = built
    status, page = _page(runs, Links().cell(SWEEP, OTHER))
    assert status == 200 and "No attempt yet: the cell is pending." in page and "error-line" not in page


def test_an_attempt_in_flight_says_so(built: tuple[Path, SweepRecord]) -> None:
    from harness.core.records import AttemptSummary

    runs, _ = built
    store = Store(runs)
    with store.writer(SWEEP) as w:
        sweep = store.load_sweep(SWEEP)
        w.dispatched(sweep, OTHER, AttemptSummary(attempt=1, task_id="t1", status="dispatched"))
    status, page = _page(runs, Links().cell(SWEEP, OTHER))
    assert status == 200
    assert "no result recorded yet: the attempt is in flight" in _one_line_error(page)


def test_the_timeline_keeps_calls_that_never_ran_and_results_without_a_call() -> None:
    """Pure: a reply cut at the output limit announces a call the agent never takes up; an imported session may
    record a result whose call it did not; a guard about no call is an entry of its own."""
    from harness.dashboard.timeline import build_timeline

    events = [
        _start().model_copy(update={"seq": 1, "ts": "2026-12-01T00:00:00.000Z"}),
        ModelResponse(seq=2, ts="2026-12-01T00:00:01.500Z", round=1, text="cut", finish_reason="length",
                      tool_calls=[ToolCallRecord(id="w1", name="write", arguments='{"path": "a.py", "cont')],
                      usage=None, latency_s=1.5, attempts=1, model="m"),
        GuardDecision(seq=3, round=1, rule="output_limit", decision="continue", reason="cut_at_output_limit"),
        ToolResult(seq=4, round=2, call_id="x9", name="read", is_error=True, text="no such file",
                   details=ToolDetails(status="error")),
    ]
    t = build_timeline(events)
    turn, guard, orphan = t.entries
    assert turn.kind == "turn" and turn.offset_s == 1.5 and turn.usage is None and turn.tokens_per_s is None
    (cut,) = turn.tools
    assert not cut.handled and cut.raw_arguments is not None and cut.raw_arguments.text.endswith('"cont')
    assert guard.kind == "guard" and guard.decision == "continue" and not guard.quiet
    assert orphan.kind == "tool" and orphan.is_error and orphan.status == "error" and t.tool_errors == 1
    assert (t.turns, t.tool_calls, t.end) == (1, 0, None)


def test_an_attempt_whose_folder_is_gone_is_one_line(built: tuple[Path, SweepRecord]) -> None:
    import shutil

    runs, _ = built
    shutil.rmtree(Store(runs).attempt_dir(SWEEP, CELL, 1))
    status, page = _page(runs, Links().cell(SWEEP, CELL, 1))
    assert status == 200
    assert _one_line_error(page) == f"the attempt's folder {CELL}/attempt-1 is missing"
    assert f'href="{Links().cell(SWEEP, CELL, 2)}"' in page  # the other attempts are still listed


def test_the_override_form_is_there_with_the_token_only_for_the_attempt_shown(built: tuple[Path, SweepRecord]) -> None:
    runs, _ = built
    links = Links()
    assert "Override the grade" not in _page(runs, links.cell(SWEEP, CELL))[1]
    client = TestClient(make_app(runs, token="secret-token"))
    page = client.get(links.cell(SWEEP, CELL)).text
    assert "Override the grade" in page and 'name="attempt" value="2"' in page
    assert "Attempt 2: now <strong>DELIVERED</strong>" in page  # the reviewer's grade counts now
    assert f'action="{links.override(SWEEP, CELL)}"' in page and "secret-token" not in page
    first = client.get(links.cell(SWEEP, CELL, 1)).text
    assert 'name="attempt" value="1"' in first and "Attempt 1: now <strong>HARNESS_FAILURE</strong>" in first


@pytest.mark.integration
def test_the_cell_page_in_chromium_runs_nothing_planted_and_holds_at_375_px(built: tuple[Path, SweepRecord],
                                                                           tmp_path: Path, chromium: Any) -> None:
    """Real headless Chromium against the app served by uvicorn on loopback: no console error (a CSP violation is
    one), no planted handler ran, the page is no wider than a 375 px phone, and a screenshot is kept."""
    import socket
    import threading

    import uvicorn

    from workers.host.webcheck import CHROMIUM_ARGS, find_chromium

    runs, _ = built
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    server = uvicorn.Server(uvicorn.Config(make_app(runs), log_level="warning", access_log=False, lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    exe, why = find_chromium()
    assert exe is not None, f"{why} (bash .ci/setup installs it)"
    errors: list[str] = []
    shots = Path(os.environ.get("FLEET_TEST_ARTIFACTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    try:
        # The session's one browser (conftest): a second sync_playwright in the same worker is refused.
        with contextlib.nullcontext(chromium) as browser:
            try:
                page = browser.new_page(viewport={"width": 375, "height": 800})
                page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
                page.on("pageerror", lambda e: errors.append(str(e)))
                page.on("dialog", lambda d: (errors.append(f"dialog: {d.message}"), d.dismiss()))
                for attempt in (2, 1):
                    page.goto(base + Links().cell(SWEEP, CELL, attempt))
                    page.wait_for_load_state("load")
                    # Open every fold, so what is inside them is laid out and measured too.
                    page.eval_on_selector_all("details", "els => els.forEach(e => { e.open = true; })")
                    width = page.evaluate("document.documentElement.scrollWidth")
                    assert width <= 375, f"attempt {attempt}: the page is {width} px wide"
                    assert page.locator("img").count() == 0 and page.locator("iframe").count() == 0
                    page.screenshot(path=str(shots / f"cell-attempt-{attempt}-375px.png"), full_page=True)
                assert "Here is the page." in page.goto(base + Links().cell(SWEEP, CELL, 2)).text()  # type: ignore[union-attr]
            finally:
                page.context.close()
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
    # The favicon's 404 is the only error a browser may log; a planted alert() would be a dialog.
    assert all("status of 404" in e for e in errors), errors
