# One image for every process of the service; docker-compose.yml picks the command
# (API, the three worker pools, Beat, Flower, the one-shot migration).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONPATH=/app \
    ARANDU_HOME=/var/lib/arandu

# A fixed uid/gid so volumes keep the same owner across rebuilds. ARANDU_HOME is created
# here, owned by that user, so a named volume mounted on it (Beat's schedule) inherits
# the ownership on first use.
RUN groupadd --system --gid 10001 arandu \
    && useradd --system --uid 10001 --gid arandu --home-dir /var/lib/arandu --shell /usr/sbin/nologin arandu \
    && mkdir -p /var/lib/arandu \
    && chown arandu:arandu /var/lib/arandu

WORKDIR /app

# Dependencies first, from the project metadata alone, against empty stand-in packages:
# editing the code does not reinstall them, only editing pyproject.toml does.
COPY pyproject.toml README.md ./
RUN mkdir -p memory_core workers api arandu_client arandu_cli \
    && touch memory_core/__init__.py workers/__init__.py api/__init__.py arandu_client/__init__.py \
        arandu_cli/__init__.py beat_schedule.py \
    && pip install ".[anthropic]" \
    && rm -rf memory_core workers api arandu_client arandu_cli beat_schedule.py build ./*.egg-info

# Then the code, installed over the stand-ins without touching the dependencies.
# The sources also stay in /app (first on PYTHONPATH) because the migrations and any
# other non-Python files are read from the package directories.
COPY memory_core ./memory_core
COPY workers ./workers
COPY api ./api
COPY arandu_client ./arandu_client
COPY arandu_cli ./arandu_cli
COPY beat_schedule.py ./
RUN pip install --no-deps --force-reinstall . \
    && rm -rf build ./*.egg-info

USER arandu

EXPOSE 8000 5555

# Every compose service sets its own command; run alone, the image serves the API.
CMD ["python", "-m", "api"]
