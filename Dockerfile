# The preemptctl image: `docker build -t ghcr.io/preemptctl/preemptctl:0.1.0 .`
# (the tag is pyproject.toml's version; deploy/ and docker-compose.yml use the same).
# Runs `preemptctl worker` by default; `docker run IMAGE migrate`, `... setup-temporal`,
# `... history` run the other subcommands. No settings or secrets are baked in: everything
# comes from PREEMPT_ environment variables at run time.

# --- build: install the project (not editable) and its dependencies into a virtualenv ---
FROM python:3.11.10-slim-bookworm AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN python -m venv /opt/preemptctl
WORKDIR /src
# Only what the distribution is built from: preemptctl/ (links to the folders below, which
# the wheel carries as preemptctl.*); .dockerignore keeps caches and virtualenvs out.
COPY pyproject.toml README.md ./
COPY preemptctl/ preemptctl/
COPY preemption/ preemption/
COPY kube/ kube/
COPY workflows/ workflows/
COPY activities/ activities/
COPY ledger/ ledger/
COPY migrations/ migrations/
COPY worker/ worker/
COPY emulator/ emulator/
RUN /opt/preemptctl/bin/pip install . \
    && /opt/preemptctl/bin/preemptctl --help > /dev/null

# --- runtime: the virtualenv only, run by an unprivileged user ---
FROM python:3.11.10-slim-bookworm

ENV PATH=/opt/preemptctl/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp

RUN groupadd --gid 10001 preemptctl \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin preemptctl
COPY --from=build /opt/preemptctl /opt/preemptctl

# Numeric, so that Kubernetes' runAsNonRoot can verify it.
USER 10001:10001
WORKDIR /tmp

# Prometheus /metrics, and the /healthz and /readyz probes (PREEMPT_METRICS_PORT).
EXPOSE 9464

ENTRYPOINT ["preemptctl"]
CMD ["worker"]
