# colossal-cpp on Debian 12: the toolchain and libraries, LibTorch (the pinned torch wheel), the
# build, and the `colossal` Python module, through the same script CI runs (scripts/install.sh).
#
#   docker build -t colossal-cpp .
#   docker run --rm colossal-cpp                                    # train_llama on 2 ranks
#   docker run --rm colossal-cpp colossal run --nproc_per_node 2 -- python apps/python/recipes/train_resnet_zero2.py
FROM debian:12

ENV DEBIAN_FRONTEND=noninteractive
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
WORKDIR /opt/colossal-cpp
COPY . .
# setup.sh installs Debian's packages and the torch environment; build.sh builds; pip installs the module.
RUN bash scripts/install.sh && rm -rf /var/lib/apt/lists/*

ENV PATH=/opt/colossal-cpp/build/apps:/root/.cache/colossal-cpp/torch-2.11.0/venv/bin:$PATH
CMD ["colossal", "run", "--nproc_per_node", "2", "--", "train_llama"]
