"""The ``/v1`` routers: messages, imports, events."""
