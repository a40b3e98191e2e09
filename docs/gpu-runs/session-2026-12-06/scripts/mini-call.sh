#!/usr/bin/env bash
# The last minutes: install the wheel into a venv that sees the image's packages, run .gpu/mini.py.
v=/tmp/mv; python3 -m venv $v
python3 -c 'import site; print("\n".join(site.getsitepackages()))' > "$($v/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/img.pth"
$v/bin/python -m pip install -q --no-index --no-deps .gpu/house/*.whl
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cd /tmp && timeout "${1:-200}" $v/bin/python "$OLDPWD/.gpu/mini.py" g4t+d3t g8w8+d4w8 g8w64+d4w64 g4t+d4w64 g8w32+d4w64 2>&1 | tee "$OUT/mini.log"
