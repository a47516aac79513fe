#!/usr/bin/env bash
# The backend seam holds: model and engine code reach a device only through backend/backend.h
# (no CPU kernel header, no cpu:: call), and there is one forward pass (one BatchRunner).
set -uo pipefail
cd "$(dirname "$(realpath "${BASH_SOURCE[0]}")")/../.."
status=0
if grep -rn --include='*.h' --include='*.cpp' '#include "backend/cpu/' src/model src/engine src/kv; then
  echo "layering: the lines above include a CPU kernel header outside src/backend" >&2
  status=1
fi
if grep -rnE --include='*.h' --include='*.cpp' '\bcpu::' src/model src/engine src/kv; then
  echo "layering: the lines above call the CPU backend directly instead of through backend.h" >&2
  status=1
fi
# The op harness and `bench ops` run whatever backend they are given: they reach it through
# backend.h only, so a CUDA backend joins them unchanged.
harness="src/backend/op_harness.h src/backend/op_harness.cpp src/backend/op_cases.cpp src/cli/cmd_bench_ops.cpp"
# shellcheck disable=SC2086
if grep -nE '#include "backend/cpu/|\bcpu::' $harness; then
  echo "layering: the lines above reach the CPU backend from the op harness instead of through backend.h" >&2
  status=1
fi
# One forward pass per architecture family: the files that implement BatchRunner. A new family
# (DeepSeek V4) adds its file here; a second copy of an existing pass does not belong.
forward_passes="src/model/arch/decoder.cpp src/model/arch/deepseek_v4.cpp"
found=$(grep -rlE --include='*.cpp' 'public BatchRunner\b' src/model | sort | tr '\n' ' ' | sed 's/ $//')
if [[ $found != "$forward_passes" ]]; then
  echo "layering: BatchRunner is implemented in '$found', expected '$forward_passes'" >&2
  status=1
fi
# The grammar layer sits between tokenizer and engine: it includes only core, model (for the
# tokenizer's metadata), tokenizer and itself, never the engine, recipe, server or cli above it.
if grep -rnE --include='*.h' --include='*.cpp' '#include "(engine|recipe|server|cli|kv|kvstore|router)/' src/grammar; then
  echo "layering: the lines above include a higher layer from src/grammar" >&2
  status=1
fi
# The router sits above the server (it uses its transport and client) and below the cli: no
# lower layer includes it, and it reaches no engine internals (it talks to replicas over HTTP).
if grep -rn --include='*.h' --include='*.cpp' '#include "router/' src/core src/backend src/model src/tokenizer \
    src/grammar src/recipe src/kv src/kvstore src/engine src/server; then
  echo "layering: the lines above include src/router from a lower layer" >&2
  status=1
fi
if grep -rnE --include='*.h' --include='*.cpp' '#include "(engine|kv|kvstore|model|backend|cli)/' src/router; then
  echo "layering: the lines above reach below the HTTP seam from src/router" >&2
  status=1
fi
((status == 0)) && echo "layering: ok"
exit $status
