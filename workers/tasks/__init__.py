"""Celery tasks: thin wrappers that take ids and call ``memory_core``."""
