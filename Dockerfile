# The scheduler image: slim Python, Debian's Slurm client (scontrol, for draining nodes),
# the placeholder script inside the package, running as a non-root user.
FROM python:3.11-slim-bookworm

RUN apt-get update \
 && apt-get install -y --no-install-recommends slurm-client \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install --no-cache-dir . && rm -rf /src

# 65532: a conventional "nonroot" uid; the chart also sets runAsNonRoot.
USER 65532:65532
ENTRYPOINT ["sunk"]
CMD ["scheduler"]
