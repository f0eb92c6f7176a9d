# Sourced by scripts that use the real tritonclient[grpc]: `triton_venv` creates (once) the
# venv in $TRITON_VENV (default ~/.cache/switchyard-triton-venv) with the versions the scripts
# were checked with.
TRITON_VENV=${TRITON_VENV:-${HOME:-/root}/.cache/switchyard-triton-venv}
triton_venv() {
  # SWITCHYARD_SETUP_DONE: installed already by the caller (.ci/run).
  [ -n "${SWITCHYARD_SETUP_DONE:-}" ] && [ -x "$TRITON_VENV/bin/python" ] && return 0
  [ -x "$TRITON_VENV/bin/python" ] || python3 -m venv "$TRITON_VENV"
  "$TRITON_VENV/bin/pip" install -q tritonclient[grpc]==2.73.0 grpcio==1.85.1 protobuf==6.33.6 \
    numpy==2.4.6 python-rapidjson==1.25 packaging==26.3 urllib3==2.8.0
}
