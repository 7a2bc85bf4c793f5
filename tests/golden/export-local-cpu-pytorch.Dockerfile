# Written by envbuild export from envs/local-cpu-pytorch.yaml (spec local-cpu-pytorch); build with: docker build -t local-cpu-pytorch -f local-cpu-pytorch.Dockerfile .
# Python packages pinned by envs/local-cpu-pytorch.lock
# base debootstrap:bookworm: the Debian image of the same suite
FROM debian:bookworm
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv && rm -rf /var/lib/apt/lists/*
ENV TOKENIZERS_PARALLELISM=false
ENV PATH=/opt/envbuild/venv/bin:$PATH
LABEL "maintainer"="envbuild"
RUN python3 -m venv /opt/envbuild/venv
RUN /opt/envbuild/venv/bin/python -m pip install --no-cache-dir torch==2.13.0+cpu  # pytorch variant cpu
RUN /opt/envbuild/venv/bin/python -m pip install --no-cache-dir transformers==5.23.0 lightning==2.6.6 accelerate==1.15.0 aiohappyeyeballs==2.7.1 aiohttp==3.14.5 aiosignal==1.4.0 annotated-doc==0.0.7 annotated-types==0.8.0 anyio==4.16.0 attrs==26.1.0 click==8.5.1 filelock==4.2.11 frozenlist==1.8.0 fsspec==2026.9.0 h11==0.16.0 hf-xet==1.8.0 httpcore2==2.16.2 httpx2==2.16.2 huggingface-hub==2.4.0 idna==3.20 jinja2==3.1.6 lightning-utilities==0.15.3 markdown-it-py==4.3.0 markupsafe==3.0.4 mdurl==0.1.2 mpmath==1.3.0 multidict==7.2.1 networkx==3.6.1 numpy==2.4.6 packaging==26.3 propcache==0.5.4 psutil==7.2.2 pydantic==2.14.3 pydantic-core==2.50.4 pygments==2.21.0 pytorch-lightning==2.6.6 pyyaml==6.0.3 regex==2026.11.15 rich==15.0.0 safetensors==0.8.0 setuptools==84.2.1 shellingham==1.5.4 sympy==1.14.0 tokenizers==0.23.3 torchmetrics==1.9.0 tqdm==4.70.1 truststore==0.10.5 typer==0.29.2 typing-extensions==4.16.0 typing-inspection==0.4.5 yarl==1.25.1
# tests: envbuild runs these in the finished image; here they fail the build instead
RUN python -c "import torch, transformers, lightning, accelerate; print('torch', torch.__version__, 'transformers', transformers.__version__, 'lightning', lightning.__version__)"
RUN python -c "import torch.distributed as dist; assert dist.is_gloo_available(), 'gloo backend missing'"
