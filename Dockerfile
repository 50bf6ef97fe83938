# Retold worker image: the library, the Celery workers and beat, Flower; psycopg (the
# postgres extra) so the same image serves a SQLite or a PostgreSQL store, and faiss (the
# scale extra) so a worker writing into a very large scope finds duplicates through the
# approximate graph. It runs as an unprivileged user (uid/gid 1000 unless built otherwise;
# compose also sets the user at run time) and carries no config: compose mounts the
# operator's config.yaml.
FROM python:3.11-slim
# The ONNX file made below lives outside any home folder, so whichever uid runs the
# container reads it.
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 OPENBLAS_NUM_THREADS=1 \
    XDG_CACHE_HOME=/opt/retold-cache
ARG RETOLD_UID=1000
ARG RETOLD_GID=1000
RUN groupadd --gid "$RETOLD_GID" retold && useradd --uid "$RETOLD_UID" --gid "$RETOLD_GID" --no-create-home retold
WORKDIR /app
# torch first, pinned and CPU-only (the GPU build is gigabytes the workers never use), so
# sentence-transformers (the models extra: other models, the judge, the reranker) accepts
# it as it is. The default encoder runs on onnxruntime from a file built below. Override
# TORCH_PIP_ARGS to use a mirror.
ARG TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu"
RUN pip install --no-cache-dir $TORCH_PIP_ARGS torch==2.13.0
COPY pyproject.toml README.md beat_schedule.py ./
COPY retold ./retold
COPY workers ./workers
RUN pip install --no-cache-dir '.[models,hosted,monitor,postgres,scale]'
# Build the default model's ONNX file at build time, so no worker waits for it.
# Every mount point the services write is made here and given to the user they run as: a
# named volume starts as a copy of the image's folder, owner included (/beat holds the
# PostgreSQL stack's beat schedule; compose's store-dir re-owns the /data bind mount).
RUN python -c "from retold.index.onnx_export import ensure_exported; print(ensure_exported())" \
    && chmod -R a+rX "$XDG_CACHE_HOME" && mkdir -p /data /beat && chown retold:retold /data /beat
VOLUME ["/data"]
USER retold
CMD ["celery", "-A", "workers", "worker", "--loglevel=INFO", "-Q", "extraction,maintenance"]
