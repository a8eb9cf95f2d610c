"""Snapshot every importer output, to prove a refactor changes nothing: ``python tests/harness/importers/snapshot.py REPO OUT``.

Imports every recorded session (tests/agents/data, tests/fixtures/pixel-fleet, and a few sessions cut or reordered
from them) through every road (``fleet import``'s ``import_to_folder`` with the grade, and each adapter's
``normalize``, ``infrastructure_failure`` and ``answer``), with the clocks pinned (``ts``, ``imported_at``,
``graded_at`` are import times), and writes every output under OUT/outputs and OUT/manifest.json (name ->
sha256). Run it on the code before a change and after, then ``diff`` the two manifests. Not a test: it compares
two versions of the code, which one test run cannot hold."""
import gzip, hashlib, json, os, shutil, sys
from pathlib import Path

REPO = Path(sys.argv[1]).resolve()
OUT = Path(sys.argv[2]).resolve()
sys.path.insert(0, str(REPO))
import harness.core.transcript, harness.grading.rules
import harness.importers.folder as folder_mod
FIXED = "2000-01-01T00:00:00.000Z"
harness.core.transcript.utc_now = lambda: FIXED
harness.grading.rules.utc_now = lambda: FIXED
folder_mod.utc_now = lambda: FIXED
from harness.importers import grade_folder, import_to_folder
from harness.core.inventory import AgentConfig
from workers.adapters.openclaw import OpenClawAdapter, STATE_DIR
from workers.adapters.opencode import OpenCodeAdapter, DB as OC_DB
from workers.adapters.hermes import HermesAdapter, DB as H_DB, FINAL as H_FINAL, USAGE as H_USAGE

if OUT.exists():
    shutil.rmtree(OUT)
work = OUT / "work"
(work / "src").mkdir(parents=True)
os.chdir(work)
DATA = REPO / "tests" / "agents" / "data"
manifest = {}
sessions = 0

def put(key, data: bytes):
    p = OUT / "outputs" / key
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    manifest[key] = hashlib.sha256(data).hexdigest()

def src(path: Path, rel: str) -> str:
    dest = Path("src") / rel
    dest.parent.mkdir(parents=True, exist_ok=True)
    data = path.read_bytes()
    dest.write_bytes(gzip.decompress(data) if path.name.endswith(".gz") else data)
    return str(dest)

def imp(fmt, rel):
    global sessions
    out = Path("out") / fmt / Path(rel).name
    for f in import_to_folder(fmt, rel, out):
        sessions += 1
        for file in sorted(f.iterdir()):
            put(f"import/{fmt}/{Path(rel).name}/{f.name}/{file.name}", file.read_bytes())
        put(f"import/{fmt}/{Path(rel).name}/{f.name}/GRADE", grade_folder(f).model_dump_json(indent=1).encode())

for p in sorted((REPO / "tests" / "fixtures" / "pixel-fleet").glob("*.json")):
    imp("pixel-fleet", src(p, f"pixel/{p.name}"))
for p in sorted((DATA / "openclaw" / "jsonl").glob("*.jsonl")):
    imp("openclaw-jsonl", src(p, f"openclaw/{p.name}"))
openclaw = OpenClawAdapter("openclaw", AgentConfig(kind="openclaw"))
for p in sorted((DATA / "openclaw" / "sqlite").glob("*.gz")):
    rel = src(p, f"openclaw/{p.name[:-3]}")
    imp("openclaw-sqlite", rel)
    collected = {f"{STATE_DIR}/agents/main/agent/openclaw-agent.sqlite": Path(rel).read_bytes()}
    put(f"adapter/openclaw/{p.name}/transcript.jsonl", openclaw.normalize(collected) or b"NONE")
    put(f"adapter/openclaw/{p.name}/infra", repr(openclaw.infrastructure_failure(1, collected)).encode())
opencode = OpenCodeAdapter("opencode", AgentConfig(kind="opencode"))
for p in sorted((DATA / "opencode").iterdir()):
    if p.name.endswith(".db.gz"):
        rel = src(p, f"opencode/{p.name[:-3]}")
        collected = {OC_DB: Path(rel).read_bytes()}
        put(f"adapter/opencode/{p.name}/transcript.jsonl", opencode.normalize(collected) or b"NONE")
        put(f"adapter/opencode/{p.name}/infra", repr((opencode.infrastructure_failure(1, collected),
                                                       opencode.infrastructure_failure(0, collected))).encode())
    else:
        rel = src(p, f"opencode/{p.name}")
        if p.suffix == ".jsonl":
            put(f"adapter/opencode/{p.name}/answer", opencode.answer(p.read_bytes(), None))
    imp("opencode", rel)
hermes = HermesAdapter("hermes", AgentConfig(kind="hermes"))
names = sorted({p.name.split(".")[0] for p in (DATA / "hermes").iterdir()})
for name in names:
    for p in sorted((DATA / "hermes").glob(f"{name}.*")):
        if p.name.endswith(".state.db.gz"):
            imp("hermes", src(p, f"hermes/{p.name[:-3]}"))
        elif p.name.endswith(".export.jsonl"):
            imp("hermes", src(p, f"hermes/{p.name}"))
    db = DATA / "hermes" / f"{name}.state.db.gz"
    final, usage = DATA / "hermes" / f"{name}.final.txt", DATA / "hermes" / f"{name}.usage.json"
    collected = {H_FINAL: final.read_bytes(), H_USAGE: usage.read_bytes()}
    if db.exists():
        collected[H_DB] = gzip.decompress(db.read_bytes())
    put(f"adapter/hermes/{name}/transcript.jsonl", hermes.normalize(collected) or b"NONE")
    put(f"adapter/hermes/{name}/infra", repr(hermes.infrastructure_failure(0, collected)).encode())
    # the same attempt without its usage report and final output: the store alone
    if db.exists():
        put(f"adapter/hermes/{name}/store-only.jsonl", hermes.normalize({H_DB: collected[H_DB]}) or b"NONE")
(OUT / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
print(f"{sessions} imported sessions, {len(manifest)} outputs hashed -> {OUT}/manifest.json")

# --- synthetic edge cases, derived from the real files: calls without results, a late result, cut runs ---------
syn = Path("src/synthetic")
syn.mkdir(parents=True, exist_ok=True)
tour = (DATA / "openclaw" / "jsonl" / "tour-v3.jsonl").read_text().split("\n")
variants = {
    "unanswered": tour[:6] + tour[7:],                                   # call_1_1's result dropped
    "late-result": tour[:8] + [tour[9], tour[8]] + tour[10:],            # call_2_1's result after the next reply
    "cut-after-call": tour[:18],                                          # ends on a toolCall, no result
}
for name, lines in variants.items():
    (syn / f"openclaw-{name}.jsonl").write_text("\n".join(lines).rstrip("\n") + "\n")
    imp("openclaw-jsonl", str(syn / f"openclaw-{name}.jsonl"))
mixed = json.loads((DATA / "hermes" / "mixed.export.jsonl").read_text().splitlines()[0])
mixed["messages"] = mixed["messages"][:4]                                 # ends on an assistant with a tool call
(syn / "hermes-cut.export.jsonl").write_text(json.dumps(mixed) + "\n")
imp("hermes", str(syn / "hermes-cut.export.jsonl"))
stream = (DATA / "opencode" / "mixed.jsonl").read_text().splitlines()
out_lines, done = [], False
for line in stream:
    ev = json.loads(line)
    if not done and ev["type"] == "tool_use":
        ev["part"]["state"] = {"status": "running", "input": ev["part"]["state"].get("input", {})}
        done = True
    out_lines.append(json.dumps(ev))
(syn / "opencode-running.jsonl").write_text("\n".join(out_lines) + "\n")
imp("opencode", str(syn / "opencode-running.jsonl"))
(syn / "opencode-cut.jsonl").write_text("\n".join(stream[:5]) + "\n")
imp("opencode", str(syn / "opencode-cut.jsonl"))
(OUT / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
print(f"with the synthetic cases: {sessions} imported sessions, {len(manifest)} outputs hashed")
