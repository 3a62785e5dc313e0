# hpsearch: one image for `migrate`, `dashboard` and GPU `worker`s (see docker-compose.yml).
#
#   docker build -t hpsearch .
#   docker build --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu -t hpsearch:cpu .
#
# torch comes first, from TORCH_INDEX_URL (default: PyPI, whose Linux wheels are CUDA builds);
# then hpsearch is installed as a normal package, as on any GPU machine without the image.
FROM python:3.11-slim

ARG TORCH_INDEX_URL=https://pypi.org/simple
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1

RUN pip install --index-url "${TORCH_INDEX_URL}" torch

WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY search ./search
COPY trainer ./trainer
COPY migrations ./migrations
RUN pip install . && rm -rf /src

# The examples, so that `create examples/digits.toml` works inside the container; a study's own
# task module goes into /app too (workers import task.name with /app first on sys.path).
WORKDIR /app
COPY examples ./examples
RUN useradd --create-home --uid 1000 hpsearch
USER hpsearch

ENTRYPOINT ["hpsearch"]
CMD ["--help"]
