# A CPU stand-in for the official pytorch/pytorch images, for building and testing cadenza's images
# where no image registry can be reached (`make images-check`): a Debian base made by mmdebstrap
# (imported as OS), Python headers for torch's compiler, and the pinned torch in a venv where the
# official images keep pip (/opt/conda/bin). It is tagged with the official names and the real
# Dockerfile is built on it with --pull=never, unedited.
ARG OS=localhost/cadenza-standin-os:bookworm
FROM ${OS}
ARG TORCH_VERSION=2.13.0
RUN python3 -m venv /opt/conda \
    && /opt/conda/bin/pip install --no-cache-dir "torch==${TORCH_VERSION}"
ENV PATH=/opt/conda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
