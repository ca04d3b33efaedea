#!/usr/bin/env bash
# The GPU tier in one command (docs/gpu-tier.md): tests/gpu against the real NVIDIA driver,
# then its report (report.json, report.md, junit.xml, facts.json) in a folder.
#
#   tools/gpu-tier.sh [REPORT_DIR]        run the tier; REPORT_DIR defaults to
#                                         $PODRES_GPU_REPORT_DIR, else $OUT, else gpu-report
#   tools/gpu-tier.sh --make-venv [DIR]   build the slim virtual environment the tier travels
#                                         with (DIR: .venv-gpu) and print its size
#
# Where no driver answers, every test of the tier is skipped with one message, the report
# says "no GPU", and the exit status is 0. The tier only reads: it changes no GPU setting
# (MIG is tested only where it is already on). The run is bounded by $PODRES_GPU_TIMEOUT
# seconds (480); the report is written whatever the tests did.
#
# Which Python: $PODRES_GPU_PYTHON when set; else the first of $PODRES_GPU_VENV, .venv-gpu,
# .venv whose interpreter starts, run as VENV/bin/python. The project is not installed in
# the slim venv: PYTHONPATH puts this tree's src/ and tests first, so a tree copied anywhere
# runs its own code. A venv copied to a machine where its base interpreter is not at the
# same path is used through a python of the same version found on PATH, with the venv's
# site-packages on PYTHONPATH.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

make_venv() {
    local dir=${1:-.venv-gpu} python=${PYTHON:-python3}
    local -a deps pip
    mapfile -t deps < <("$python" -c 'import tomllib
print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))')
    rm -rf "$dir"
    "$python" -m venv --without-pip "$dir"
    # The pip of the project's venv where there is one (it installs into another
    # interpreter with --python); the venv itself carries no pip.
    if [ -x .venv/bin/pip ]; then pip=(.venv/bin/pip); else pip=("$python" -m pip); fi
    "${pip[@]}" --python "$dir/bin/python" install -q --no-compile --disable-pip-version-check \
        "${deps[@]}" "pytest>=8" "pytest-timeout>=2.3"
    find "$dir" -name __pycache__ -prune -exec rm -rf {} +
    echo "$dir: $(du -sh "$dir" | cut -f1) ($(du -sb "$dir" | cut -f1) bytes), Python $("$dir/bin/python" -c 'import sys; print(sys.version.split()[0])')"
}

pick_python() {
    EXTRA_PATH=""
    if [ -n "${PODRES_GPU_PYTHON:-}" ]; then
        PY=$PODRES_GPU_PYTHON
        return 0
    fi
    local venv version
    for venv in "${PODRES_GPU_VENV:-}" .venv-gpu .venv; do
        [ -n "$venv" ] && [ -f "$venv/pyvenv.cfg" ] || continue
        if "$venv/bin/python" -c '' 2>/dev/null; then
            PY="$venv/bin/python"
            return 0
        fi
        version=$(sed -n 's/^version *= *\([0-9]*\.[0-9]*\).*/\1/p' "$venv/pyvenv.cfg")
        if command -v "python$version" >/dev/null; then
            PY="python$version"
            EXTRA_PATH="$(cd "$venv" && pwd)/lib/python$version/site-packages"
            echo "gpu tier: $venv's interpreter is not at its path here; using $PY with its packages"
            return 0
        fi
        echo "gpu tier: $venv was built for Python $version, which this machine lacks" \
            "(build it with PYTHON=python3.X make gpu-venv)" >&2
    done
    echo "gpu tier: no Python: set PODRES_GPU_PYTHON or PODRES_GPU_VENV, or run make gpu-venv" >&2
    exit 2
}

if [ "${1:-}" = "--make-venv" ]; then
    make_venv "${2:-}"
    exit 0
fi

REPORT_DIR=${1:-${PODRES_GPU_REPORT_DIR:-${OUT:-gpu-report}}}
mkdir -p "$REPORT_DIR"
REPORT_DIR=$(cd "$REPORT_DIR" && pwd)
pick_python
export PYTHONPATH="$ROOT/src:$ROOT${EXTRA_PATH:+:$EXTRA_PATH}${PYTHONPATH:+:$PYTHONPATH}"
export PODRES_GPU_REPORT_DIR="$REPORT_DIR"
export PYTHONDONTWRITEBYTECODE=1
# Only the plugins the tier needs: a Python found on PATH may have others installed.
export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
rm -f "$REPORT_DIR/facts.json" "$REPORT_DIR/junit.xml"

"$PY" -m tests.gpu.probe
bound=()
if command -v timeout >/dev/null; then
    bound=(timeout -k 15 "${PODRES_GPU_TIMEOUT:-480}")
fi
status=0
"${bound[@]}" "$PY" -m pytest tests/gpu -m gpu -p pytest_timeout -p no:cacheprovider -q -rs \
    --junitxml "$REPORT_DIR/junit.xml" || status=$?
"$PY" -m tests.gpu.report --out "$REPORT_DIR"
exit "$status"
