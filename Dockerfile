# attnscope in a container: the JSON API and the pages, serving the models shipped in models/.
#
#   docker build -t attnscope .                                      # CPU torch (default)
#   docker build -t attnscope:cuda --build-arg TORCH_VARIANT=cu128 . # CUDA torch
#   docker run --rm -p 8000:8000 attnscope                           # http://localhost:8000
#   docker run --rm --gpus all -p 8000:8000 attnscope:cuda           # picks cuda by itself
#
# TORCH_VARIANT names a PyTorch wheel index (cpu, cu126, cu128, ...); CUDA wheels carry their
# own CUDA libraries, so the host needs only the NVIDIA driver and container toolkit.
# BASE_IMAGE may be swapped for another image with Python >= 3.11 and pip (e.g. a CUDA base
# with Python installed). Settings come from ATTNSCOPE_* variables (see docs/api.md).

ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ARG TORCH_VARIANT=cpu
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/${TORCH_VARIANT}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    ATTNSCOPE_HOST=0.0.0.0 \
    ATTNSCOPE_PORT=8000 \
    ATTNSCOPE_MODELS_DIR=/app/models

WORKDIR /app

# A C++ compiler: the native decoder steps are built in this image, below (attnscope/nn/native; never
# when serving; without them decoding takes the slower Python steps). Fashion-MNIST for the Vision page's samples,
# where the base image's Debian has the package (without it the page has none; text is unaffected).
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++ \
    && (apt-get install -y --no-install-recommends dataset-fashion-mnist \
        || echo "no dataset-fashion-mnist here: the Vision page will have no samples") \
    && rm -rf /var/lib/apt/lists/*

# Torch first, from the chosen variant's index: the largest layer, rebuilt only when it changes.
RUN pip install --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"

# The other dependencies, from pyproject.toml alone (a stub package), so code edits keep them cached.
COPY pyproject.toml ./
RUN mkdir -p attnscope && touch attnscope/__init__.py README.md \
    && pip install -e . \
    && rm -rf attnscope README.md

# The code, pages and models. The install is editable, so the app finds templates/, static/
# and models/ beside itself, as in a checkout.
COPY . .
# Built and checked here, at install time, so the container starts serving in seconds.
RUN python -m attnscope.nn.native || echo "no native decoder operations: serving takes the Python step"

RUN useradd --create-home --uid 10001 attnscope
USER attnscope

EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD python -c "import os, sys, urllib.request; url = 'http://127.0.0.1:%s/api/health' % os.environ.get('ATTNSCOPE_PORT', '8000'); sys.exit(0 if urllib.request.urlopen(url, timeout=4).status == 200 else 1)"

CMD ["attnscope", "serve"]
