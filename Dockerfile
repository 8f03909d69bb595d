# Corral: one image for the service (`corral serve`, the default command) and for every Ray node of the cluster
# (`ray start --head ...`, `ray start --address ...`): Ray needs the same Ray and Python versions everywhere.
#
#   docker build -t corral .
#   docker run --rm -p 8080:8080 --shm-size=1g corral    # 4 virtual nodes x 8 virtual GPUs, SQLite in the volume
#
# docker-compose.yml runs it against Postgres and a real Ray cluster (docs/deployment.md).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    RAY_USAGE_STATS_ENABLED=0 \
    CORRAL_HOME=/var/lib/corral

# torch first, the CPU build: pyproject.toml pins the same version, which this build then satisfies (2.13.0+cpu), so
# `pip install .` does not pull gigabytes of CUDA packages from PyPI. Jobs' own CUDA code brings its own stack.
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0

COPY pyproject.toml README.md /tmp/corral-src/
COPY scheduler /tmp/corral-src/scheduler
COPY policies /tmp/corral-src/policies
COPY agents /tmp/corral-src/agents
COPY web /tmp/corral-src/web
# The shipped agents (agents/zoo/*.zip and their *.json sidecars) are not package data in pyproject.toml, so a plain
# `pip install .` leaves out rl:default, the policy a new store starts with: copy any the wheel lacks next to the
# installed package (a later pyproject.toml that ships them wins). Then check the service can load it.
RUN cd /tmp/corral-src \
    && pip install . \
    && cd / \
    && zoo="$(python -c 'import agents, pathlib; print(pathlib.Path(agents.__file__).parent / "zoo")')" \
    && mkdir -p "$zoo" \
    && for f in /tmp/corral-src/agents/zoo/*.zip /tmp/corral-src/agents/zoo/*.json; do \
         [ -e "$zoo/${f##*/}" ] || cp "$f" "$zoo/"; done \
    && rm -rf /tmp/corral-src \
    && corral --help > /dev/null \
    && python -c 'from policies import make_policy; make_policy("rl:default")'

# Non-root. CORRAL_HOME holds the SQLite store (when DATABASE_URL is unset), job logs and checkpoints; a named volume
# mounted here starts out owned by this user.
RUN useradd --uid 10001 --user-group --create-home --shell /bin/bash corral \
    && mkdir -p /var/lib/corral \
    && chown corral:corral /var/lib/corral
VOLUME /var/lib/corral
USER corral
WORKDIR /var/lib/corral

EXPOSE 8080

# /api/v1/health needs no token. Only the service answers it: compose disables this check on the Ray node services.
HEALTHCHECK --interval=15s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/api/v1/health', timeout=4)"]

CMD ["corral", "serve", "--host", "0.0.0.0", "--port", "8080"]
