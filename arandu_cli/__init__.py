"""The ``arandu`` command line: imports, retrieval, memory management and operations.

Every command that talks to the service goes through the typed HTTP client
(:mod:`arandu_client`); only ``db`` (migrations) and ``doctor`` (direct checks of the database,
broker, workers, Beat and Flower) reach the services themselves.
"""
