"""The worker side: the Celery app and tasks, transports to hosts, agent adapters, the launcher."""
