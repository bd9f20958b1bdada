#!/usr/bin/env bash
# The dependency rules of ../shared/DESIGN.md, checked on the sources (a CTest entry):
#   * core/zero (the ZeRO mechanism) includes nothing from core/booster (the plugins that drive it);
#   * core/ names no model library (llama/, vit/, bert/, sora/, recsys/); models never include apps/;
#   * text/ (tokenizers) builds on core/ only: no model library, no apps/;
#   * library code never shells out (std::system / popen): std::filesystem, errors named.
set -u
root="${1:?usage: check_layering.sh SOURCE_ROOT}"
cd "$root"
status=0
fail() { echo "layering: $*"; status=1; }
hits=$(grep -rn '#include "core/booster/' core/zero || true)
[ -z "$hits" ] || fail "core/zero includes core/booster:"$'\n'"$hits"
hits=$(grep -rnE '#include "(llama|vit|bert|sora|recsys|apps)/' core kernels || true)
[ -z "$hits" ] || fail "core/ or kernels/ include a model or an app:"$'\n'"$hits"
hits=$(grep -rnE '#include "(llama|vit|bert|sora|recsys|apps)/' text || true)
[ -z "$hits" ] || fail "text/ includes a model or an app:"$'\n'"$hits"
hits=$(grep -rnE '#include "apps/' llama vit bert sora recsys 2>/dev/null || true)
[ -z "$hits" ] || fail "a model library includes apps/:"$'\n'"$hits"
hits=$(grep -rnE 'std::system\(|[^a-z_]popen\(' core kernels text llama vit bert sora recsys 2>/dev/null || true)
[ -z "$hits" ] || fail "library code shells out:"$'\n'"$hits"
[ $status -eq 0 ] && echo "layering: ok"
exit $status
