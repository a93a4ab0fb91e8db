#!/usr/bin/env bash
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#
# bench/multicore/loc.sh: Table 4.5's shape (lines of code and McCabe
# cyclomatic complexity of the offload part and of the giant and fine
# executives), written into bench/multicore/RESULTS.md. Installs lizard
# (PyPI) if it is missing; pmccabe (Debian) is an optional cross-check for
# the C files. loc.py's docstring says what is counted.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
python3 -c 'import lizard' 2>/dev/null || python3 -m pip install -q lizard
exec python3 "$ROOT/bench/multicore/loc.py" --write "$@"
