#!/usr/bin/env bash
# Wheels for benchmarks/ray_encode.py on the lent GPU machine (Python 3.12, no network, no ray).
# Run once, here, in the project root, after ../shared/device/prep.sh:
#     bash benchmarks/ray_wheels.sh
# It fills the git-ignored folder .raywhl/ (carry it with .gl and .whl) with
#   ray-trim.tar.xz  ray 2.60.0 for cp312 without its Java jars, rllib and serve: the wheel is
#                    79 MB, over the 64 MiB a device run carries; this is ~31 MB
#   *.whl            ray[data]'s and aiohttp's pure/cp312 dependencies (numpy, pandas, pyarrow:
#                    the GPU machine has them)
#   env.sh           source it after .gl/env.sh: unpacks ray and installs the wheels into /tmp/site
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
excl=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$excl")"
grep -qxF /.raywhl/ "$excl" 2>/dev/null || echo /.raywhl/ >> "$excl"
mkdir -p .raywhl
tmp=$(mktemp -d)
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$tmp" "ray[data]==2.60.0" aiohttp
rm -f "$tmp"/numpy-* "$tmp"/pandas-* "$tmp"/pyarrow-* "$tmp"/python_dateutil-* "$tmp"/pytz-* \
  "$tmp"/tzdata-* "$tmp"/six-*
mkdir "$tmp/x"
(cd "$tmp/x" && unzip -q "$tmp"/ray-2.60.0-*.whl && rm -rf ray/jars ray/rllib ray/serve \
  && tar -cf - . | xz -T0 -6 > "$root/.raywhl/ray-trim.tar.xz")
rm -f .raywhl/*.whl
mv "$tmp"/*.whl .raywhl/ && rm -f .raywhl/ray-2.60.0-*.whl
rm -rf "$tmp"
cat > .raywhl/env.sh <<'ENV'
# source after .gl/env.sh in a device run that carries .raywhl
mkdir -p /tmp/site && tar -xJf .raywhl/ray-trim.tar.xz -C /tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .raywhl/*.whl
# bytecode once, here, rather than in every Ray worker at once (each would compile ray.data)
python3 -m compileall -q -j 0 /tmp/site >/dev/null 2>&1 || true

export PATH=/tmp/site/bin:$PATH RAY_USAGE_STATS_ENABLED=0
ENV
du -sh .raywhl
