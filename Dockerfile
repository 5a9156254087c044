# The preemptctl image: `docker build -t ghcr.io/preemptctl/preemptctl:0.1.0 .`
# (the tag is pyproject.toml's version; deploy/ and docker-compose.yml use the same).
# Runs `preemptctl worker` by default; `docker run IMAGE migrate`, `... setup-temporal`,
# `... history` run the other subcommands. No settings or secrets are baked in: everything
# comes from PREEMPT_ environment variables at run time.
#
# The production image: no `dev` extra (the 150 MB Temporal dev server) and no API
# emulator; `preemptctl dev` says so in one line. It runs as uid 10001 on a read-only root
# filesystem (nothing is written outside /tmp; bytecode is not written). The base image is
# pinned by digest (python:3.11.10-slim-bookworm's multi-platform index); bump the tag and
# the digest together.

# --- build: install the project (not editable) and its dependencies into a virtualenv ---
FROM python:3.11.10-slim-bookworm@sha256:840e180ebcc6e5c8efab209c43f5e40fd2af98cb49db5c7103c90539c56bb30e AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN python -m venv /opt/preemptctl
WORKDIR /src
# Only what the distribution is built from: namespace/ (the preemptctl package itself) and
# the folders pyproject.toml's package-dir maps to preemptctl.*; .dockerignore keeps caches
# and virtualenvs out.
COPY pyproject.toml README.md ./
COPY namespace/ namespace/
COPY preemption/ preemption/
COPY kube/ kube/
COPY deciding/ deciding/
COPY workflows/ workflows/
COPY activities/ activities/
COPY ledger/ ledger/
COPY migrations/ migrations/
COPY worker/ worker/
COPY emulator/ emulator/
# The emulator is a test and `dev` tool: left out of the installed package.
RUN /opt/preemptctl/bin/pip install . \
    && rm -rf /opt/preemptctl/lib/python3.11/site-packages/preemptctl/emulator \
    && /opt/preemptctl/bin/preemptctl --help > /dev/null \
    && /opt/preemptctl/bin/preemptctl --version

# --- runtime: the virtualenv only, run by an unprivileged user ---
FROM python:3.11.10-slim-bookworm@sha256:840e180ebcc6e5c8efab209c43f5e40fd2af98cb49db5c7103c90539c56bb30e

ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="preemptctl" \
      org.opencontainers.image.description="Durable, audited Kubernetes pod preemption: each preemption a Temporal workflow, every decision in a Postgres ledger." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="docker.io/library/python:3.11.10-slim-bookworm"

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

# Prometheus /metrics and /parked (PREEMPT_METRICS_PORT); the Temporal SDK's own metrics
# (PREEMPT_SDK_METRICS_PORT); the kubelet's /healthz and /readyz (PREEMPT_PROBE_PORT).
EXPOSE 9464 9465 9466

ENTRYPOINT ["preemptctl"]
CMD ["worker"]
