"""A scripted, OpenAI-compatible model server: the stand-in for a host's local model where no GPU exists.

See ``docs/scripted-model.md`` for the script format and how to run it.
"""

from .script import (
    SCHEMA_VERSION,
    Answer,
    Match,
    Rule,
    Script,
    ScriptError,
    ScriptPlayer,
    Step,
    ToolCallOut,
    ToolCallSpec,
    load_script,
    parse_script,
)
from .server import (
    CONVERSATION_HEADER,
    DEFAULT_CONTEXT_SIZE,
    DEFAULT_MAX_OUTPUT_TOKENS,
    DEFAULT_MODEL_ID,
    RequestRecord,
    ScriptedModelServer,
    conversation_key,
    count_tokens,
    serve,
)

__all__ = [
    "CONVERSATION_HEADER",
    "DEFAULT_CONTEXT_SIZE",
    "DEFAULT_MAX_OUTPUT_TOKENS",
    "DEFAULT_MODEL_ID",
    "SCHEMA_VERSION",
    "Answer",
    "Match",
    "RequestRecord",
    "Rule",
    "Script",
    "ScriptError",
    "ScriptPlayer",
    "ScriptedModelServer",
    "Step",
    "ToolCallOut",
    "ToolCallSpec",
    "conversation_key",
    "count_tokens",
    "load_script",
    "parse_script",
    "serve",
]
