"""The builtin guarded agent: its tools, its transcript, and whole runs against the scripted model."""
