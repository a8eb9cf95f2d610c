"""The builtin agent sends the model its prompt file's text byte for byte: CR and CRLF are not LF."""

from __future__ import annotations

from pathlib import Path

from workers.host.agent.__main__ import _parser, _settings


def test_the_builtin_agent_reads_its_prompt_without_newline_translation(tmp_path: Path) -> None:
    raw = "one\r\ntwo\rthree\n\u00e9\r".encode()
    (tmp_path / "prompt.md").write_bytes(raw)
    (tmp_path / "ws").mkdir()
    args = _parser().parse_args(["--prompt-file", str(tmp_path / "prompt.md"), "--workspace", str(tmp_path / "ws"),
                                 "--out-dir", str(tmp_path), "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
                                 "--context", "4096", "--max-output", "512"])
    settings, _, _ = _settings(args)
    assert settings.prompt.encode() == raw
