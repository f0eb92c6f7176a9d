#!/usr/bin/env bash
# Idempotent installer for the real NVIDIA Dynamo 1.6.1 Python frontend + mocker
# into a virtualenv (default: ~/.cache/switchyard-dynamo-venv), for the interop tests and
# the side-by-side benchmarks.
#
# What the install needs:
#  * ai-dynamo 1.6.1 Requires-Dist:
#      ai-dynamo-runtime==1.6.1, aiohttp<4.0,>=3.14.3, aisimulate==0.13.0 (py>=3.11,<3.14),
#      certifi>=2026.10.19, kubernetes<33.0.0,>=32.0.1, msgspec>=0.19.0,
#      prometheus-client<1.0,>=0.23.1, pyzmq>=26.0.0, redis<9.0.0,>=6.2.0, tqdm>=4.0.0,
#      transformers>=4.56.0, typing-extensions>=4.10.0, zstandard<1.0,>=0.23.0
#  * ai-dynamo-runtime 1.6.1 Requires-Dist: pydantic>=2.10.6,<=2.13.5, uvloop>=0.21.0
#  * aisimulate is skipped (not installable, not needed).
#  * certifi>=2026.10.19 does not exist on the registry (newest is 2026.10.18), so the
#    newest certifi is installed instead; pip prints a harmless conflict warning.
#  * Nothing else was needed: `python -m dynamo.frontend --help` and
#    `python -m dynamo.mocker --help` work with exactly the pins below.
#  * The OpenAI Python SDK (openai 3.54.0, + jiter, sniffio; its other dependencies are
#    already among the pins) drives the interop test (scripts/interop_client.py).
#  * The Anthropic Python SDK (anthropic 2.14.0, + docstring_parser, opentelemetry-api) drives
#    scripts/interop_anthropic.sh.
set -euo pipefail
VENV=${VENV:-${HOME:-/root}/.cache/switchyard-dynamo-venv}
PY=${PYTHON:-python3}

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
PIP="$VENV/bin/pip"

"$PIP" install --no-deps ai-dynamo==1.6.1 ai-dynamo-runtime==1.6.1

# Ordinary dependencies, pinned to versions known to work together.
"$PIP" install \
  aiohappyeyeballs==2.7.1 aiohttp==3.14.5 aiosignal==1.4.0 annotated-doc==0.0.7 \
  annotated-types==0.8.0 anyio==4.16.0 attrs==26.1.0 certifi==2026.10.18 cffi==2.1.1 \
  charset-normalizer==3.5.2 click==8.5.1 cryptography==50.0.2 durationpy==0.11 \
  filelock==4.2.11 frozenlist==1.8.0 fsspec==2026.9.0 google-auth==2.62.2 h11==0.16.0 \
  hf-xet==1.8.0 httpcore2==2.16.2 httpx2==2.16.2 huggingface_hub==2.4.0 idna==3.20 \
  kubernetes==32.0.1 markdown-it-py==4.3.0 mdurl==0.1.2 msgspec==0.22.0 multidict==7.2.1 \
  numpy==2.4.6 oauthlib==4.0.1 packaging==26.3 prometheus_client==0.26.0 propcache==0.5.4 \
  pyasn1==0.6.5 pyasn1_modules==0.4.2 pycparser==3.12 pydantic==2.13.5 pydantic_core==2.46.5 \
  Pygments==2.21.0 python-dateutil==4.0.0 PyYAML==6.0.3 pyzmq==27.3.0 redis==8.1.0 \
  regex==2026.11.15 requests==2.34.2 requests-oauthlib==2.0.0 rich==15.0.0 safetensors==0.8.0 \
  shellingham==1.5.4 six==1.17.0 tokenizers==0.23.3 tqdm==4.70.1 transformers==5.23.0 \
  truststore==0.10.5 typer==0.29.2 typing-inspection==0.4.5 typing_extensions==4.16.0 \
  tzdata==2026.6 urllib3==2.8.0 uvloop==0.23.0 websocket-client==1.9.2 yarl==1.25.1 \
  zstandard==0.25.0

# The client the interop test speaks through.
"$PIP" install openai==3.54.0 jiter==0.19.0 sniffio==1.3.1
"$PIP" install anthropic==2.14.0 docstring_parser==0.18.0 opentelemetry-api==1.45.2

# nc, for raw-HTTP checks in scripts.
if ! command -v nc >/dev/null 2>&1; then
  apt-get update -qq && apt-get install -y -qq netcat-openbsd
fi

"$VENV/bin/python" -m dynamo.frontend --help >/dev/null
"$VENV/bin/python" -m dynamo.mocker --help >/dev/null
"$VENV/bin/python" -c 'import openai; assert openai.__version__ == "3.54.0", openai.__version__'
"$VENV/bin/python" -c 'import anthropic; assert anthropic.__version__ == "2.14.0", anthropic.__version__'
echo "dynamo 1.6.1 + openai 3.54.0 + anthropic 2.14.0 OK in $VENV"
