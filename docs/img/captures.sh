#!/usr/bin/env bash
# Regenerate docs/img from the repository root: the drawn graphs, terminal captures at 80, 120 and
# 200 columns, and screenshots of the HTML report (headless Chromium: `apt-get install chromium`).
# Nothing here is edited by hand. Usage: bash docs/img/captures.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
kt() { python3 -m tracer "$@"; }
img=docs/img
gpu=tests/fixtures/gpu
bug=$gpu/glm5_cast_whole_stack.json.gz
fix=$gpu/glm5_gather_then_cast_stack.json.gz
nostack=$gpu/glm5_cast_whole_nostack.json.gz
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for ext in svg png; do
  kt graph $bug --source . --top 5 -o $img/glm5_cast_whole.$ext >/dev/null
  kt diff $bug $fix --source . --top 6 -o $img/glm5_fix_diff.$ext >/dev/null
  kt graph tests/fixtures/transformers/hf_llama_generate_stack.json.gz \
    --source build/src/transformers-5.17.0 --top 10 -o $img/llama_generate.$ext >/dev/null
done

# Terminal captures: what a terminal of that width shows (piped, COLUMNS says the width).
for width in 80 120 200; do
  COLUMNS=$width kt explain $bug --source . --top 6 > $img/explain_${width}.txt
  COLUMNS=$width kt explain $nostack --source examples --top 4 > $img/explain_ranked_${width}.txt
  COLUMNS=$width kt diff $bug $fix --source . --top 6 > $img/diff_${width}.txt
  COLUMNS=$width kt scan --preset sglang-hot --top 10 --platform cuda > $img/scan_${width}.txt
done
COLUMNS=80 kt rules > $img/rules_80.txt

# The report, screenshotted: the top (summary and table), the graph fitted and at full size, a detail.
kt report $bug --source . -o "$work/glm5.report.html" >/dev/null
kt report $nostack --source examples -o "$work/ranked.report.html" >/dev/null
sed 's/id="graph-full" hidden>/id="graph-full" hidden checked>/' "$work/glm5.report.html" > "$work/full.report.html"
shot() {  # shot OUT.png HTML HEIGHT
  chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,"$3" \
    --screenshot="$1" "file://$2" 2>/dev/null
}
shot "$work/top.png" "$work/glm5.report.html" 6000
shot "$work/full.png" "$work/full.report.html" 4000
shot "$work/ranked.png" "$work/ranked.report.html" 1500
python3 - "$work" "$img" <<'EOF'
import sys
from PIL import Image

work, img = sys.argv[1:]
top = Image.open(f"{work}/top.png")
top.crop((0, 0, 1400, 1400)).save(f"{img}/report_top.png", optimize=True)
top.crop((0, 1560, 1400, 3000)).save(f"{img}/report_graph_and_detail.png", optimize=True)
Image.open(f"{work}/full.png").crop((0, 1640, 1400, 2900)).save(f"{img}/report_graph_full_size.png", optimize=True)
Image.open(f"{work}/ranked.png").crop((0, 0, 1400, 1100)).save(f"{img}/report_ranked.png", optimize=True)
EOF
echo "wrote $img"
