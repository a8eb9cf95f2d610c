"""The prompt catalog: bundled items load, selection works, template values are drawn reproducibly and
rendered byte for byte, and every bad item folder or round file gives a CatalogError naming file and key."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from harness.core.catalog import BUNDLED_PROMPTS_DIR, draw_values, load_catalog, render
from harness.core.errors import CatalogError, UsageError
from tests.support import run_fleet

ITEM_TOML = 'schema_version = 1\ntitle = "T"\ntimeout_s = 60\n'
ROUND = '''\
schema_version = 1
title = "R"
repetitions = 2

[[tasks]]
id = "one"
title = "One"
prompt = "Write {{marker}} to out.txt"
[tasks.vars]
marker = "M-{hex:8}"

[[tasks]]
id = "two"
title = "Two"
deliverable = "answer"
prompt = "Say hello"
'''


def make_prompts(root: Path, items: dict[str, tuple[str | None, str | None]], rounds: dict[str, str]) -> Path:
    """items: folder -> (item.toml text or None, prompt.md text or None); rounds: name -> TOML text."""
    for folder, (meta, prompt) in items.items():
        d = root / "open" / folder
        d.mkdir(parents=True)
        if meta is not None:
            (d / "item.toml").write_text(meta, encoding="utf-8")
        if prompt is not None:
            (d / "prompt.md").write_text(prompt, encoding="utf-8")
    (root / "rounds").mkdir(parents=True, exist_ok=True)
    for name, text in rounds.items():
        (root / "rounds" / f"{name}.toml").write_text(text, encoding="utf-8")
    return root


# -- the bundled catalog -------------------------------------------------------------------------------


def test_bundled_catalog_loads() -> None:
    cat = load_catalog()
    assert cat.root == str(BUNDLED_PROMPTS_DIR)
    ids = [i.id for i in cat.open_items]
    assert ids == sorted(ids) and len(ids) >= 10
    assert {"04-snake-game", "07-photo-renamer", "09-sales-dashboard", "12-explain-only"} <= set(ids)
    assert all(i.number == i.id[:2] for i in cat.open_items)
    photo = next(i for i in cat.open_items if i.id == "07-photo-renamer")
    assert photo.kind == "open" and photo.deliverable == "workspace" and photo.timeout_s == 900
    assert photo.prompt == (BUNDLED_PROMPTS_DIR / "open/07-photo-renamer/prompt.md").read_text(encoding="utf-8")
    assert next(i for i in cat.open_items if i.id == "12-explain-only").deliverable == "answer"
    tasks = cat.rounds["qualification"]
    assert [t.id for t in tasks] == ["qualification.website", "qualification.coding", "qualification.sum-of-squares"]
    for task in tasks:
        assert task.kind == "round" and task.round == "qualification" and task.repetitions == 1
        assert set(re.findall(r"\{\{(\w+)\}\}", task.prompt)) == set(task.vars)
        assert task.folder == str(BUNDLED_PROMPTS_DIR / "rounds/qualification" / task.id.split(".")[1])
        assert task.checks and all((Path(task.folder) / "checks" / c).is_file() for c in task.checks)
    website, coding, squares = tasks
    assert set(website.vars) == {"project", "marker"} and website.vars["project"] == "fleet-qualification-{hex:12}"
    assert website.vars["marker"] == "FLEET-{hex:10}" and "Night Garden {{marker}}" in website.prompt
    assert "Show sold out" in website.prompt and "Midnight sold-out concert" in website.prompt
    assert "test-results.txt" in coding.prompt and set(coding.vars) == {"project"}
    assert set(squares.vars) == {"project", "marker", "n"} and "result.json" in squares.prompt


def test_select_by_number_id_and_round() -> None:
    cat = load_catalog()
    assert [i.id for i in cat.select(None, None)] == [i.id for i in cat.open_items]
    assert [i.id for i in cat.select(["07"], None)] == ["07-photo-renamer"]
    assert [i.id for i in cat.select(["12-explain-only", "07"], None)] == ["12-explain-only", "07-photo-renamer"]
    assert [i.id for i in cat.select(["07", "07-photo-renamer"], None)] == ["07-photo-renamer"]  # no duplicates
    round_ids = ["qualification.website", "qualification.coding", "qualification.sum-of-squares"]
    assert [i.id for i in cat.select(None, "qualification")] == round_ids
    assert [i.id for i in cat.select(["qualification.sum-of-squares"], None)] == ["qualification.sum-of-squares"]
    assert [i.id for i in cat.select(["09"], "qualification")] == ["09-sales-dashboard", *round_ids]


def test_select_unknown_item_and_round() -> None:
    cat = load_catalog()
    with pytest.raises(UsageError) as err:
        cat.select(["99"], None)
    assert "unknown item '99'" in str(err.value) and "07, 09, 12" in str(err.value)
    with pytest.raises(UsageError) as err:
        cat.select(None, "nightly")
    assert "unknown round 'nightly'" in str(err.value) and "qualification" in str(err.value)


def test_round_tasks_from_a_folder(tmp_path: Path) -> None:
    root = make_prompts(tmp_path, {"03-a": (ITEM_TOML, "hello")}, {"mini": ROUND})
    cat = load_catalog(root)
    one, two = cat.rounds["mini"]
    assert (one.id, one.round, one.repetitions, one.vars) == ("mini.one", "mini", 2, {"marker": "M-{hex:8}"})
    assert (two.id, two.deliverable, two.timeout_s) == ("mini.two", "answer", 900)
    assert one.source == str(root / "rounds" / "mini.toml")


# -- values and rendering -------------------------------------------------------------------------------

VARS = {"h": "x-{hex:12}", "n": "{int:5-9}", "c": "{choice:red|green|blue}", "lit": "plain {text}", "two": "{hex:4}{hex:4}"}


def test_draw_values_is_deterministic_per_seed() -> None:
    a = draw_values(VARS, 1234)
    assert a == draw_values(VARS, 1234)
    assert re.fullmatch(r"x-[0-9a-f]{12}", a["h"])
    assert 5 <= int(a["n"]) <= 9
    assert a["c"] in {"red", "green", "blue"}
    assert a["lit"] == "plain {text}"  # not a generator: literal
    assert re.fullmatch(r"[0-9a-f]{8}", a["two"])


def test_draw_values_differs_across_seeds() -> None:
    draws = [draw_values(VARS, seed) for seed in range(40)]
    assert len({d["h"] for d in draws}) == 40
    assert {d["n"] for d in draws} == {"5", "6", "7", "8", "9"}
    assert {d["c"] for d in draws} == {"red", "green", "blue"}


def test_int_range_bounds_are_inclusive() -> None:
    assert {draw_values({"v": "{int:3-3}"}, s)["v"] for s in range(5)} == {"3"}


def test_render_replaces_only_placeholders_byte_for_byte() -> None:
    prompt = (
        'Write {{ project }}/result.json as {"marker": "{{marker}}", "n": N}.\n'
        "def f():\n    return {k: v for k, v in d.items()}  # {single} braces\n"
        "Run: echo $(date) `id` ${HOME} \\n \\1 {{{marker}}}\r\n\ttrailing  \n"
    )
    values = {"project": "p-1", "marker": "M\\1 $(x) {{project}}"}
    out = render(prompt, values)
    expected = (
        'Write p-1/result.json as {"marker": "M\\1 $(x) {{project}}", "n": N}.\n'
        "def f():\n    return {k: v for k, v in d.items()}  # {single} braces\n"
        "Run: echo $(date) `id` ${HOME} \\n \\1 {M\\1 $(x) {{project}}}\r\n\ttrailing  \n"
    )
    assert out == expected
    assert render("no placeholders {x} $(rm -rf /)", {}) == "no placeholders {x} $(rm -rf /)"


def test_bundled_round_renders_with_no_placeholder_left() -> None:
    task = load_catalog().rounds["qualification"][2]
    assert task.id == "qualification.sum-of-squares"
    values = draw_values(task.vars, 7)
    out = render(task.prompt, values)
    assert "{{" not in out and values["marker"] in out and '{"marker": ' in out


# -- bad items and rounds -----------------------------------------------------------------------------------


def load_error(root: Path) -> CatalogError:
    with pytest.raises(CatalogError) as err:
        load_catalog(root)
    assert "\n" not in str(err.value)
    return err.value


def test_missing_prompt_md(tmp_path: Path) -> None:
    e = load_error(make_prompts(tmp_path, {"05-x": (ITEM_TOML, None)}, {}))
    assert str(e) == f"{tmp_path / 'open/05-x/prompt.md'}: file not found"


def test_missing_item_toml(tmp_path: Path) -> None:
    e = load_error(make_prompts(tmp_path, {"05-x": (None, "hi")}, {}))
    assert str(e) == f"{tmp_path / 'open/05-x/item.toml'}: file not found"


def test_empty_prompt(tmp_path: Path) -> None:
    e = load_error(make_prompts(tmp_path, {"05-x": (ITEM_TOML, "  \n\n")}, {}))
    assert e.file == str(tmp_path / "open/05-x/prompt.md") and e.problem == "prompt is empty"


def test_item_toml_missing_title_and_unknown_key(tmp_path: Path) -> None:
    e = load_error(make_prompts(tmp_path, {"05-x": ('schema_version = 1\ntimeout_s = 5\n', "hi")}, {}))
    assert (e.file, e.key, e.problem) == (str(tmp_path / "open/05-x/item.toml"), "title", "required key is missing")
    e = load_error(make_prompts(tmp_path / "b", {"05-x": (ITEM_TOML + "timeout = 5\n", "hi")}, {}))
    assert (e.key, e.problem) == ("timeout", "unknown key")


def test_open_placeholder_without_var(tmp_path: Path) -> None:
    e = load_error(make_prompts(tmp_path, {"05-x": (ITEM_TOML, "make {{thing}} now")}, {}))
    assert e.file == str(tmp_path / "open/05-x/prompt.md")
    assert "{{thing}}" in e.problem


def test_open_bad_generator_names_item_toml(tmp_path: Path) -> None:
    meta = ITEM_TOML + '[vars]\nthing = "{hex:0}"\n'
    e = load_error(make_prompts(tmp_path, {"05-x": (meta, "make {{thing}} now")}, {}))
    assert (e.file, e.key) == (str(tmp_path / "open/05-x/item.toml"), "vars.thing")
    assert "{hex:0}" in e.problem


def test_round_placeholder_without_var(tmp_path: Path) -> None:
    text = ROUND.replace('prompt = "Say hello"', 'prompt = "Say {{greeting}}"')
    e = load_error(make_prompts(tmp_path, {}, {"mini": text}))
    assert (e.file, e.key) == (str(tmp_path / "rounds/mini.toml"), "tasks[1].prompt")
    assert "{{greeting}}" in e.problem


@pytest.mark.parametrize(
    "spec, words",
    [("{hex:0}", "1..64"), ("{hex:65}", "1..64"), ("{hex:ab}", "1..64"), ("{int:9-1}", "A <= B"),
     ("{int:a-b}", "A-B"), ("{int:5}", "A-B"), ("{choice:a||b}", "empty option")],
)
def test_round_bad_generator_names_task_var(tmp_path: Path, spec: str, words: str) -> None:
    text = ROUND.replace('marker = "M-{hex:8}"', f'marker = "M-{spec}"')
    e = load_error(make_prompts(tmp_path, {}, {"mini": text}))
    assert (e.file, e.key) == (str(tmp_path / "rounds/mini.toml"), "tasks[0].vars.marker")
    assert spec in e.problem and words in e.problem


def test_round_duplicate_task_id(tmp_path: Path) -> None:
    e = load_error(make_prompts(tmp_path, {}, {"mini": ROUND.replace('id = "two"', 'id = "one"')}))
    assert (e.file, e.key) == (str(tmp_path / "rounds/mini.toml"), "tasks")
    assert "duplicate task id one" in e.problem


def test_round_bad_values(tmp_path: Path) -> None:
    e = load_error(make_prompts(tmp_path, {}, {"mini": ROUND.replace("repetitions = 2", "repetitions = 0")}))
    assert e.key == "repetitions"
    e = load_error(make_prompts(tmp_path / "b", {}, {"mini": ROUND.replace('id = "two"', 'id = "Two!"')}))
    assert e.key == "tasks[1].id"
    e = load_error(make_prompts(tmp_path / "c", {}, {"mini": ROUND.replace('title = "One"', 'titel = "One"')}))
    assert (e.key, e.problem) == ("tasks[0].title", "required key is missing (and 1 more problem)")
    text = ROUND + "[[tasks\n"
    e = load_error(make_prompts(tmp_path / "d", {}, {"mini": text}))
    line = text.splitlines().index("[[tasks") + 1
    assert e.file == str(tmp_path / "d/rounds/mini.toml") and "not valid TOML" in e.problem and f"line {line}" in e.problem


@pytest.mark.parametrize("folder", ["7-x", "photo-renamer", "07_photo", "07-Photo", "0007-x"])
def test_folder_not_named_nn_slug(tmp_path: Path, folder: str) -> None:
    e = load_error(make_prompts(tmp_path, {folder: (ITEM_TOML, "hi")}, {}))
    assert e.file == str(tmp_path / "open" / folder) and "NN-slug" in e.problem


def test_duplicate_numbers(tmp_path: Path) -> None:
    e = load_error(make_prompts(tmp_path, {"04-a": (ITEM_TOML, "a"), "04-b": (ITEM_TOML, "b")}, {}))
    assert e.file == str(tmp_path / "open") and "04" in e.problem


def test_missing_prompts_dir(tmp_path: Path) -> None:
    e = load_error(tmp_path / "nope")
    assert str(e) == f"{tmp_path / 'nope'}: prompts directory not found"


def test_an_items_checks_must_be_check_files_in_its_checks_folder(tmp_path: Path) -> None:
    from harness.core.catalog import load_open_item
    from harness.core.errors import CatalogError

    item = tmp_path / "05-thing"
    (item / "checks").mkdir(parents=True)
    (item / "prompt.md").write_text("do a thing\n")
    (item / "item.toml").write_text('schema_version = 1\ntitle = "t"\nchecks = ["test_thing.py"]\n')
    with pytest.raises(CatalogError) as err:
        load_open_item(item)
    assert str(err.value).startswith(f"{item / 'item.toml'}: checks[0]: ") and "not found" in str(err.value)
    (item / "item.toml").write_text('schema_version = 1\ntitle = "t"\nchecks = ["thing.txt"]\n')
    with pytest.raises(CatalogError) as err:
        load_open_item(item)
    assert "checks/test_*.py or checks/*.web.toml" in str(err.value)
    (item / "checks" / "test_thing.py").write_text("def test_x(workspace):\n    assert workspace.is_dir()\n")
    (item / "item.toml").write_text('schema_version = 1\ntitle = "t"\nchecks = ["test_thing.py"]\n')
    assert load_open_item(item).checks == ["test_thing.py"]


def test_round_task_checks_live_in_the_rounds_task_folder(tmp_path: Path) -> None:
    from harness.core.catalog import load_round

    rounds = tmp_path / "rounds"
    rounds.mkdir()
    f = rounds / "r.toml"
    f.write_text('schema_version = 1\n[[tasks]]\nid = "site"\ntitle = "t"\nprompt = "in {{project}}"\n'
                 'checks = ["page.web.toml"]\n[tasks.vars]\nproject = "p-{hex:4}"\n')
    with pytest.raises(CatalogError) as err:
        load_round(f)
    assert str(err.value) == f"{f}: tasks[0].checks[0]: {rounds / 'r/site/checks/page.web.toml'} not found"
    checks = rounds / "r" / "site" / "checks"
    checks.mkdir(parents=True)
    spec = checks / "page.web.toml"
    spec.write_text('page = "**/{{project}}/index.html"\nelements = ["text={{marker}}"]\n')
    with pytest.raises(CatalogError) as err:
        load_round(f)
    assert str(err.value) == f"{spec}: elements[0]: placeholder {{{{marker}}}} is not a variable of the item"
    spec.write_text('page = "**/{{project}}/index.html"\nviewport_widht = 375\n')
    with pytest.raises(CatalogError) as err:
        load_round(f)
    assert str(err.value) == f"{spec}: viewport_widht: extra inputs are not permitted"
    spec.write_text('page = "**/{{project}}/index.html"\nelements = ["h1"]\n')
    (task,) = load_round(f)
    assert task.folder == str(rounds / "r" / "site") and task.checks == ["page.web.toml"]


def test_a_pytest_check_that_does_not_compile_is_a_catalog_error(tmp_path: Path) -> None:
    from harness.core.catalog import load_open_item

    item = tmp_path / "05-thing"
    (item / "checks").mkdir(parents=True)
    (item / "prompt.md").write_text("do a thing\n")
    (item / "item.toml").write_text('schema_version = 1\ntitle = "t"\nchecks = ["test_thing.py"]\n')
    (item / "checks" / "test_thing.py").write_text("def test_x(workspace):\n    assert (\n")
    with pytest.raises(CatalogError) as err:
        load_open_item(item)
    assert str(err.value).startswith(f"{item / 'checks/test_thing.py'}: line ") and "not valid Python" in str(err.value)


def test_check_specs_carry_the_cells_values() -> None:
    from harness.core.checks.spec import load_checks

    task = load_catalog().rounds["qualification"][0]
    values = draw_values(task.vars, 11)
    web, files = load_checks(Path(task.folder), task.checks, values)
    assert web.kind == "web" and web.spec["page"] == f"**/{values['project']}/**/index.html"
    assert web.spec["elements"] == [f"text=Night Garden {values['marker']}"]
    assert files.kind == "pytest" and files.values == values and "test_site_files.py" in files.files


# -- the prompt's bytes --------------------------------------------------------------------------------


def test_a_prompt_keeps_its_cr_and_crlf_bytes(tmp_path: Path) -> None:
    raw = "line one\r\nline two\rline three\n\u00e9t\u00e9 \u2713\r".encode()
    d = tmp_path / "open" / "01-cr"
    d.mkdir(parents=True)
    (d / "item.toml").write_text(ITEM_TOML)
    (d / "prompt.md").write_bytes(raw)
    (item,) = load_catalog(tmp_path).open_items
    assert item.prompt.encode() == raw


@pytest.mark.parametrize("raw, words", [(b"say \x00 hi\n", "byte 4: a NUL byte"),
                                        (b"caf\xe9\n", "byte 3: not UTF-8 text")])
def test_a_prompt_with_a_nul_or_bytes_that_are_not_utf8_is_refused(tmp_path: Path, raw: bytes, words: str) -> None:
    d = tmp_path / "open" / "01-bad"
    d.mkdir(parents=True)
    (d / "item.toml").write_text(ITEM_TOML)
    (d / "prompt.md").write_bytes(raw)
    with pytest.raises(CatalogError, match=re.escape(f"{d / 'prompt.md'}: {words}")):
        load_catalog(tmp_path)


@pytest.mark.parametrize("make, words", [
    (lambda p: os.mkfifo(p), "not a regular file"),  # a read would wait for a writer for ever
    (lambda p: os.symlink("/dev/zero", p), "not a regular file"),  # a read would never end
    (lambda p: os.symlink(p.name, p), "a symbolic link that loops"),
    (lambda p: p.write_bytes(b"x" * (4 * 1024 * 1024 + 1)), "a prompt is at most 4194304 bytes"),
])
def test_a_prompt_that_is_no_regular_file_of_a_sane_size_is_one_line(tmp_path: Path, make, words: str) -> None:  # type: ignore[no-untyped-def]
    d = tmp_path / "open" / "01-odd"
    d.mkdir(parents=True)
    (d / "item.toml").write_text(ITEM_TOML)
    make(d / "prompt.md")
    with pytest.raises(CatalogError, match=re.escape(f"{d / 'prompt.md'}: ") + ".*" + re.escape(words)):
        load_catalog(tmp_path)


# -- a broken folder fails only the sweeps that ask for it ---------------------------------------------------


def _half_broken(tmp_path: Path) -> Path:
    root = make_prompts(tmp_path, {"03-good": (ITEM_TOML, "hello"), "05-bad": ("title = [", "hi"),
                                   "notes": (None, None)},
                        {"mini": ROUND, "wrecked": "schema_version = 1\ntasks = []\n"})
    (root / "open" / "notes" / "todo.txt").write_text("a folder of notes, not an item\n")
    return root


def test_a_partial_catalog_keeps_the_good_items_and_fails_only_a_selection_of_a_broken_one(tmp_path: Path) -> None:
    root = _half_broken(tmp_path)
    cat = load_catalog(root, partial=True)
    assert [i.id for i in cat.select(["03"], None)] == ["03-good"]
    assert [i.id for i in cat.select(None, "mini")] == ["mini.one", "mini.two"]
    assert cat.skipped == [f"{root / 'open' / 'notes'}: not an open prompt (folders are named NN-slug, e.g. "
                           "07-photo-renamer); skipped"]
    for items, round_name in ((["05"], None), (["05-bad"], None), (None, None)):
        with pytest.raises(CatalogError, match=re.escape(f"{root / 'open' / '05-bad' / 'item.toml'}: not valid TOML")):
            cat.select(items, round_name)
    for items, round_name in ((None, "wrecked"), (["wrecked.one"], None)):
        with pytest.raises(CatalogError, match=re.escape(f"{root / 'rounds' / 'wrecked.toml'}: tasks")):
            cat.select(items, round_name)
    with pytest.raises(CatalogError):  # read whole, as before, the first broken folder is the answer
        load_catalog(root)


def test_sweep_runs_the_good_items_beside_a_broken_folder(tmp_path: Path) -> None:
    root = _half_broken(tmp_path / "prompts")
    ok = run_fleet("sweep", "--prompts", str(root), "--items", "03", "--dry-run", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.splitlines()[0] == "local/03-good/builtin/r1"
    assert ok.stderr.splitlines() == [f"fleet: warning: {root / 'open' / 'notes'}: not an open prompt (folders are "
                                      "named NN-slug, e.g. 07-photo-renamer); skipped"]
    bad = run_fleet("sweep", "--prompts", str(root), "--items", "03,05", "--dry-run", cwd=tmp_path)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.splitlines()[-1].startswith(f"fleet: error: {root / 'open' / '05-bad' / 'item.toml'}: not valid TOML")


def test_a_broken_round_named_like_a_folder_fails_only_that_round(tmp_path: Path) -> None:
    # rounds/01-smoke.toml broken was kept under the same name as a folder would be: a sweep of every open
    # prompt, and --items 01, failed with the round's error.
    root = make_prompts(tmp_path, {"03-good": (ITEM_TOML, "hello")}, {"01-smoke": "schema_version = 1\ntasks = []\n",
                                                                       "mini": ROUND})
    cat = load_catalog(root, partial=True)
    assert [i.id for i in cat.select(None, None)] == ["03-good"]
    assert [i.id for i in cat.select(None, "mini")][:1] == ["mini.one"]
    with pytest.raises(UsageError, match="unknown item '01'"):
        cat.select(["01"], None)
    for items, round_name in ((None, "01-smoke"), (["01-smoke.one"], None)):
        with pytest.raises(CatalogError, match=re.escape(f"{root / 'rounds' / '01-smoke.toml'}: tasks")):
            cat.select(items, round_name)


def test_two_folders_of_one_number_fail_only_the_sweeps_that_ask_for_it(tmp_path: Path) -> None:
    # A leftover copy (03-good-old beside 03-good) stopped every sweep, of every item, read for a sweep or not.
    root = make_prompts(tmp_path, {"03-good": (ITEM_TOML, "hello"), "03-good-old": (ITEM_TOML, "hello"),
                                   "04-other": (ITEM_TOML, "hi")}, {"mini": ROUND})
    cat = load_catalog(root, partial=True)
    assert [i.id for i in cat.select(["04"], None)] == ["04-other"]
    assert [i.id for i in cat.select(None, "mini")][:1] == ["mini.one"]
    for items in (["03"], ["03-good-old"], None):
        with pytest.raises(CatalogError, match="two open prompts share the number 03 \\(03-good, 03-good-old\\)"):
            cat.select(items, None)
    with pytest.raises(CatalogError, match="share the number 03"):  # read whole, as before
        load_catalog(root)
