"""Fleet qualification harness: the coordinator side (inventory, catalog, plan, dispatch, store, CLI)."""

__version__ = "0.1.0"
