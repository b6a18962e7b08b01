#!/usr/bin/env bash
# The GPU check: relay's llama.cpp layout on a real NVIDIA GPU, in one call, without network or Node.
#
#   bash scripts/gpu-check.sh [--dry-run]
#
# On the GPU machine (an H200 with 16 cores, cmake, ninja, nvcc 13, Python): it
#   1. builds llama-server + ggml-rpc-server + the CUDA module from the pinned source tarball with relay's
#      flags (shared, GGML_BACKEND_DL, $ORIGIN) and -DCMAKE_CUDA_ARCHITECTURES=90;
#   2. records `llama-server --list-devices`, `nvidia-smi -q -x` and the --query-gpu CSV relay parses
#      (test/fixtures/gpu/ keeps them for the device-parser tests);
#   3. writes a multi-GB llama GGUF (scripts/gpu-check/gguf_fixture.py, stdlib only), loads it fully on
#      CUDA0 with each KV type (f16, q8_0, q4_0) and prints relay's fit-formula prediction against the memory
#      nvidia-smi reports for that llama-server (the ratio);
#   4. runs the GPU-hub-last shard invocation relay's planner emits (scripts/gpu-check/plan.json: a CPU
#      ggml-rpc-server first, CUDA0 last with the output) and compares its text at temperature 0 with the
#      single-device run.
# Inputs (≤ 64 MiB): this scripts/ folder and node-llama-cpp-3.21.1.tgz (35 MB; `npm pack node-llama-cpp@3.21.1`)
# in $GPU_CHECK_INPUTS (default .gpu-check/). Results go to $OUT (default ./gpu-check-out): summary.md + raw files.
#
# --dry-run (here, no GPU): skips the build and uses relay's cached build ($LLAMA_BIN, default
# ~/.cache/relay/llama.cpp/v0.4.0-shared/bin) with $GGML_BACKEND_PATH (e.g. the Vulkan module on lavapipe,
# GGML_VK_VISIBLE_DEVICES=0) or the CPU alone; a small fixture; measured memory = llama-server's own buffer
# report instead of nvidia-smi.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
DRY=0
[ "${1:-}" = "--dry-run" ] && DRY=1
OUT="${OUT:-$PWD/gpu-check-out}"
INPUTS="${GPU_CHECK_INPUTS:-$PWD/.gpu-check}"
WORK="${GPU_CHECK_WORK:-/tmp/relay-gpu-check}"
mkdir -p "$OUT" "$WORK"
summary="$OUT/summary.md"
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
t0=$(date +%s)
elapsed() { echo "$(( $(date +%s) - t0 ))s"; }

# ---- 1. build (or, dry run, the cached build) ----
if [ "$DRY" = 1 ]; then
  BIN="${LLAMA_BIN:-$HOME/.cache/relay/llama.cpp/v0.4.0-shared/bin}"
  VOCAB="${LLAMA_VOCAB:-$(dirname "$BIN")/models/ggml-vocab-llama-spm.gguf}"
  if [ -n "${GGML_BACKEND_PATH:-}" ]; then DEV="${GPU_CHECK_DEVICE:-Vulkan0}"; else DEV=""; fi
  say "# relay GPU check (dry run: $BIN, ${GGML_BACKEND_PATH:-CPU only})"
else
  SRC="$WORK/src"
  if [ ! -f "$SRC/CMakeLists.txt" ]; then
    tar -xzf "$INPUTS/node-llama-cpp-3.21.1.tgz" -C "$WORK" package/llama/gitRelease.bundle package/llama/llama.cpp.info.json
    git -c advice.detachedHead=false clone --quiet "$WORK/package/llama/gitRelease.bundle" "$SRC"
  fi
  gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  # relay's flags (src/main/core/llama/install.ts cmakeFlags) + the CUDA module for this GPU only.
  cmake -S "$SRC" -B "$WORK/build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DGGML_RPC=ON -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_DL=ON \
    -DGGML_CPU_ALL_VARIANTS=OFF -DCMAKE_PLATFORM_NO_VERSIONED_SONAME=ON '-DCMAKE_INSTALL_RPATH=$ORIGIN' \
    -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON -DLLAMA_USE_PREBUILT_UI=OFF -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > "$OUT/cmake.log" 2>&1
  cmake --build "$WORK/build" -j "$(nproc)" --target llama-server ggml-rpc-server ggml-cuda > "$OUT/build.log" 2>&1
  BIN="$WORK/build/bin"
  VOCAB="$SRC/models/ggml-vocab-llama-spm.gguf"
  export GGML_BACKEND_PATH="$BIN/libggml-cuda.so"
  export CUDA_DEVICE_ORDER=PCI_BUS_ID
  DEV=CUDA0
  say "# relay GPU check ($(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1))"
  say "- build (llama-server, ggml-rpc-server, libggml-cuda.so, sm_90, $(nproc) cores): $(elapsed)"
fi

# ---- 2. device records ----
"$BIN/llama-server" --list-devices > "$OUT/list-devices.txt" 2>&1 || true
say "- llama-server --list-devices:"
sed -n '/Available devices/,$p' "$OUT/list-devices.txt" | sed 's/^/    /' | tee -a "$summary"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi -q -x > "$OUT/nvidia-smi.xml"
  nvidia-smi --query-gpu=index,name,memory.total,memory.free,utilization.gpu,pci.bus_id,uuid --format=csv,noheader,nounits > "$OUT/nvidia-smi.csv"
  say "- nvidia-smi --query-gpu (relay's parser input): $(head -1 "$OUT/nvidia-smi.csv")"
fi
if command -v node >/dev/null && [ -f "$here/../dist/src/main/core/llama/devices.js" ]; then
  node --input-type=module -e "
    const { parseListDevices } = await import('$here/../dist/src/main/core/llama/devices.js');
    const { parseNvidiaSmi } = await import('$here/../dist/src/main/core/gpu/smi.js');
    const fs = await import('node:fs');
    const csv = fs.existsSync('$OUT/nvidia-smi.csv') ? fs.readFileSync('$OUT/nvidia-smi.csv', 'utf8') : '';
    console.log(JSON.stringify({ listed: parseListDevices(fs.readFileSync('$OUT/list-devices.txt', 'utf8')), smi: parseNvidiaSmi(csv) }, null, 2));
  " > "$OUT/relay-parsed.json"
  say "- relay's parsing: relay-parsed.json"
fi

# ---- 3. fit formula vs. measured memory ----
if [ "$DRY" = 1 ]; then FIX=(--layers 4 --embd 256 --ff 512 --heads 4 --kv-heads 2); CTX=512; SLOTS=1
else FIX=(--layers 16 --embd 4096 --ff 11008 --heads 32 --kv-heads 8); CTX=8192; SLOTS=2; fi
info=$(python3 "$here/gpu-check/gguf_fixture.py" --vocab "$VOCAB" --out "$WORK/big.gguf" "${FIX[@]}")
echo "$info" > "$OUT/fixture.json"
say "- fixture: $info ($(elapsed))"
port=18431
ngl=(); [ -n "$DEV" ] && ngl=(--device "$DEV" --n-gpu-layers 999)
serve() { # serve LOG ARGS...: start llama-server, wait for /health; sets PID
  local log=$1; shift
  "$BIN/llama-server" --host 127.0.0.1 --port $port --no-webui --log-verbosity 4 "$@" > "$log" 2>&1 &
  PID=$!
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
    kill -0 $PID 2>/dev/null || { tail -20 "$log"; return 1; }
    sleep 0.5
  done
  return 1
}
stop() { kill $PID 2>/dev/null || true; wait $PID 2>/dev/null || true; PID=""; }
PID=""; RPID=""
# Whatever fails, no llama-server or ggml-rpc-server is left behind.
trap 'kill $PID $RPID 2>/dev/null || true' EXIT
say ""
USED0=0
[ "$DRY" = 0 ] && USED0=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 | head -1)
say "| KV type | relay predicts (MiB) | measured (MiB) | measured ÷ predicted | measured by |"
say "|---|---|---|---|---|"
for kv in f16 q8_0 q4_0; do
  fa=auto; [ "$kv" != f16 ] && fa=on
  log="$OUT/fit-$kv.log"
  serve "$log" --model "$WORK/big.gguf" --ctx-size $((CTX * SLOTS)) --parallel $SLOTS --cache-type-k $kv --cache-type-v $kv --flash-attn $fa "${ngl[@]}"
  pred=$(python3 - "$OUT/fixture.json" "$kv" "$CTX" "$SLOTS" <<'PY'
import json, math, sys
# relay's fit (src/main/core/scheduler/decide/fit.ts), MB = MiB: the spec's formula, then the measured additions.
f = json.load(open(sys.argv[1])); kv_type, ctx, slots = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
scale = {'f16': 1.0, 'q8_0': 0.5, 'q4_0': 0.28}[kv_type]
row = {'f16': 1.0, 'q8_0': 34 / 64, 'q4_0': 18 / 64}[kv_type]
cells = math.ceil(ctx / 256) * 256
w = f['size'] / 2**20
kv16 = f['kv_bytes_per_token'] * cells * slots / 2**20
kv = kv16 * scale
blocks = kv16 * (row - scale)
logits = max(0, f['vocab'] * 512 * 4 / 2**20 - 128)
copies = cells * slots * f['kv_per_layer'] * 2 / 2**20 if kv_type != 'f16' else 0
print(round(w + kv + w * 0.03 + 384 + kv * 0.05 + blocks + logits + copies))
PY
)
  if [ "$DRY" = 0 ]; then
    meas=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | awk -F', ' -v p=$PID '$1==p {print $2}' | head -1)
    # In a container nvidia-smi may show host pids: then the device's used memory before/after stands in.
    [ -n "$meas" ] || meas=$(( $(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 | head -1) - USED0 ))
    by="nvidia-smi (process)"
  else
    meas=$({ grep -E "(model|KV|compute) buffer size" "$log" || true; } | sed -E 's/.*= *([0-9.]+) MiB.*/\1/' | awk '{s+=$1} END {printf "%d", s}')
    by="llama-server's buffer report"
  fi
  ratio=$(python3 -c "print(f'{${meas:-0}/$pred:.2f}')")
  say "| $kv | $pred | ${meas:-?} | $ratio | $by |"
  stop
done

# ---- 4. the GPU-hub-last shard vs. one device ----
if [ -n "$DEV" ]; then
  say ""
  rport=18432
  "$BIN/ggml-rpc-server" --host 127.0.0.1 --port $rport --device CPU > "$OUT/rpc.log" 2>&1 &
  RPID=$!
  for _ in $(seq 1 60); do (exec 3<>/dev/tcp/127.0.0.1/$rport) 2>/dev/null && break; sleep 0.5; done
  complete() { curl -sf "http://127.0.0.1:$port/completion" -H 'content-type: application/json' \
    -d '{"prompt":"The quick brown fox","n_predict":32,"temperature":0,"top_k":1,"seed":42,"ignore_eos":true}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["content"])'; }
  serve "$OUT/single.log" --model "$WORK/big.gguf" --ctx-size 512 --parallel 1 --device "$DEV" --n-gpu-layers 999
  complete > "$OUT/single.txt"; stop
  # relay's planner's flags for this shape (scripts/gpu-check/plan.json, kept equal to shardFlags by a unit test).
  mapfile -t flags < <(python3 - "$here/gpu-check/plan.json" "$OUT/fixture.json" "127.0.0.1:$rport" "$DEV" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))[str(json.load(open(sys.argv[2]))['block_count'])]
for a in p['argv']:
    print(a.replace('{RPC_ENDPOINT}', sys.argv[3]).replace('{HUB_DEVICE}', sys.argv[4]))
PY
)
  [ ${#flags[@]} -gt 0 ] || { say "- shard: no plan for this fixture in plan.json"; exit 1; }
  serve "$OUT/shard.log" --model "$WORK/big.gguf" --ctx-size 512 --parallel 1 "${flags[@]}"
  complete > "$OUT/shard.txt"; stop
  kill $RPID 2>/dev/null || true
  say "- shard (${flags[*]}): $({ grep -E 'model buffer size' "$OUT/shard.log" || true; } | sed -E 's/.*load_tensors: *//' | tr '\n' ';')"
  if cmp -s "$OUT/single.txt" "$OUT/shard.txt"; then say "- shard text == single-device text: yes"; else say "- shard text == single-device text: NO"; diff "$OUT/single.txt" "$OUT/shard.txt" | tee -a "$summary" || true; fi
fi
say "- total: $(elapsed)"
