# The worker image: swagppm-tune with the drivers of every shared storage, for Kubernetes Jobs and other clusters.
#
#   docker build -t swagppm-tuner:0.1.0-cpu .                          # CPU: torch's CPU build
#   docker build --build-arg VARIANT=cuda -t swagppm-tuner:0.1.0-cuda .  # CUDA: torch's default (CUDA) build
#
# torch goes in first, pinned, as the README installs it, so that installing the project never resolves another.
# Only the project's own files enter the image (.dockerignore lists them): never a study's data, its private cache,
# its database or its releases. The image holds no credentials: the storage URL comes from the environment
# (SWAGPPM_TUNE_STORAGE, e.g. from a Kubernetes Secret), and the study file and data from a volume.
FROM python:3.11-slim

ARG VARIANT=cpu
ARG TORCH_VERSION=2.13.0
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

RUN case "$VARIANT" in \
      cpu) pip install "torch==${TORCH_VERSION}" --index-url https://download.pytorch.org/whl/cpu ;; \
      cuda) pip install "torch==${TORCH_VERSION}" ;; \
      *) echo "VARIANT must be cpu or cuda, not '$VARIANT'" >&2; exit 2 ;; \
    esac

COPY . /src
RUN pip install "/src[postgres,mysql,redis,grpc,tracking,cluster,s3,gcs]" && rm -rf /src

# Not root: the private cache and every owner-side file the workers write are this user's only (0600/0700).
RUN useradd --uid 1000 --create-home tuner
USER 1000
WORKDIR /home/tuner
ENTRYPOINT ["swagppm-tune"]
CMD ["--help"]
