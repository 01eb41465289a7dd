# The WavePP image: `wavepp serve` (the compose runtime) and `wavepp dashboard` (the compose dashboard).
# CPU torch, pinned like pyproject.toml; a CUDA image would install the CUDA wheel instead.
FROM python:3.11-slim

ARG TORCH_VERSION=2.13.0
# PyTorch's index of CPU-only wheels (the default wheel for Linux brings CUDA libraries).
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /opt/wavepp

RUN pip install --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"
COPY pyproject.toml setup.py README.md ./
COPY wavepp ./wavepp
COPY runtime ./runtime
COPY store ./store
COPY telemetry ./telemetry
COPY dashboard ./dashboard
RUN pip install ".[torch]"

RUN useradd --create-home wavepp
USER wavepp
# The built-in tokenizer of the default model (tiny-llama's 32,000 tokens), built now so a start does not pay it.
RUN python -c "from wavepp.runtime.serve.builtin_tokenizer import ensure; ensure(32000)"
EXPOSE 8000 8501
CMD ["wavepp", "serve", "--host", "0.0.0.0"]
