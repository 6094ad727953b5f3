"""Background maintenance jobs ("sleep-time compute"): domain code, free of Celery.

Each job lives in a module of its own named for the job (``importance``, ``summaries``,
``profiles``, ``clustering``, ``communities``, ``consolidation``, ``memify``,
``emotional_trends``) and exposes ``run(context, agent_id, config) -> dict``: it works on
one agent, is idempotent, does a bounded amount of work per call, and returns the seeds'
result fields as a JSON-friendly dict. :mod:`memory_core.maintenance.registry` names them;
``workers`` schedules them.
"""
