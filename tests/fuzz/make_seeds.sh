#!/usr/bin/env bash
# Writes the seed inputs of the fuzz targets: a valid call of every route, in
# JSON and protobuf (protoc --encode), and valid graph and schedule files.
# Byte 0 of a services seed is the route's index in fuzz_services.cc (bit 7
# set for protobuf); byte 0 of a files seed is 0 for a graph, 1 for a schedule, 2 for a model
# file, 3 for choices that build an ONNX model, 4 for a cost export; byte 0 of a data seed is 0 for
# a .npy, 1 for an .npz, 2 for an image, 3 for a checkpoint (fuzz_data.cc).
# Reproducers of crashes the fuzzers found are kept as crash_* seeds.
# Usage: tests/fuzz/make_seeds.sh build/cli/edgecost
set -euo pipefail
cd "$(dirname "$0")/../.."
edgecost=$1
out=tests/fuzz/seeds_services
find "$out" -type f ! -name 'crash_*' -delete  # found crashes stay as seeds
seed() {  # index name message text-format json
  printf "\\x$(printf %02x "$1")%s" "$5" > "$out/$2.json"
  { printf "\\x$(printf %02x $(( $1 | 128 )))"; printf '%s' "$4" | protoc --encode="edgecost.v1.$3" proto/edgecost.proto; } > "$out/$2.bin"
}
seed 0 list_devices ListDevicesRequest '' '{}'
seed 1 get_device GetDeviceRequest 'name: "a72"' '{"name":"a72"}'
seed 2 list_models ListModelsRequest '' '{}'
seed 3 get_cost_table GetCostTableRequest 'model: "resnet18_cifar" device: "m4" batch_size: 2 trainable: "last:2"' \
  '{"model":"resnet18_cifar","device":"m4","batchSize":2,"trainable":"last:2"}'
seed 4 get_paging_costs GetPagingCostsRequest 'device: "a72"' '{"device":"a72"}'
seed 5 solve ScheduleRequest 'model: "linear" device: "a72" activation_budget_bytes: 4000 runtime_budget_multiple: 2' \
  '{"model":"linear","device":"a72","activationBudgetBytes":"4000","runtimeBudgetMultiple":2}'
seed 6 get_schedule GetScheduleRequest 'id: 1' '{"id":"1"}'
seed 7 list_schedules ListSchedulesRequest 'model: "linear"' '{"model":"linear"}'
seed 8 start_profile StartProfileRequest 'model: "linear" threads: 1' '{"model":"linear","threads":1}'
seed 9 get_job GetJobRequest 'id: 1' '{"id":"1"}'
seed 10 cancel_job CancelJobRequest 'id: 1' '{"id":"1"}'
seed 11 list_jobs ListJobsRequest 'limit: 5' '{"limit":5}'
seed 12 watch_events WatchEventsRequest 'after_sequence: 0 wait_s: 0.01' '{"afterSequence":"0","waitS":0.01}'
seed 14 start_train StartTrainRequest 'model: "linear" steps: 1 threads: 1' '{"model":"linear","steps":1,"threads":1}'
seed 15 get_trace GetTraceRequest 'schedule_id: 1' '{"scheduleId":"1"}'
seed 16 list_runs ListRunsRequest '' '{}'
chain='{"directed": true, "graph": {"name": "chain"}, "nodes": [{"id": 0, "cost_cpu": 1.0, "cost_ram": 100}, {"id": 1, "cost_cpu": 2.0, "cost_ram": 50, "backward": true}], "links": [{"source": 0, "target": 1}]}'
seed 17 add_model AddModelRequest "name: \"chain\" model: \"$(printf '%s' "$chain" | sed 's/"/\\"/g')\"" \
  "{\"name\":\"mlp\",\"model\":\"$(base64 -w0 tests/graph/data/mlp.onnx)\"}"
seed 18 remove_model RemoveModelRequest 'name: "chain"' '{"name":"chain"}'

out=tests/fuzz/seeds_files
find "$out" -type f ! -name 'crash_*' -delete  # found crashes stay as seeds
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
{ printf '\x00'; cat tests/data/poet-instances/linear.a72.json; } > "$out/graph_linear.json"
{ printf '\x00'; cat <<'JSON'; } > "$out/graph_node_link.json"
{"directed": true, "graph": {"name": "chain"}, "nodes": [{"id": 0, "cost_cpu": 1.0, "cost_ram": 100},
 {"id": 1, "cost_cpu": 2.0, "cost_ram": 50}, {"id": 2, "cost_cpu": 1.5, "cost_ram": 80, "backward": true}],
 "links": [{"source": 0, "target": 1}, {"source": 1, "target": 2}, {"source": 0, "target": 2}]}
JSON
{ printf '\x02'; cat tests/graph/data/mlp.onnx; } > "$out/model_mlp.onnx"
{ printf '\x02'; cat "$out/graph_node_link.json" | tail -c +2; } > "$out/model_node_link.json"
# Kind 3: choices for an ONNX model of supported ops (fuzz_files.cc, OnnxFromChoices): Relu of a
# (2, 3) input; Gemm by a (3, 4) weight; MaxPool with strides 0, which crashes ONNX's inference.
printf '\x03\x06\x01\x01\x02\x00\x00\x00\x01\x00\x00' > "$out/onnx_relu"
printf '\x03\x06\x01\x01\x02\x00\x0a\x01\x01\x00\x00\x01\x02\x03\x04\x03\x03\x03\x03\x03\x03\x03\x03\x03\x03\x03\x03\x00' \
  > "$out/onnx_gemm"
printf '\x03\x06\x03\x01\x02\x03\x03\x00\x0c\x00\x01\x00\x02\x00\x02\x02\x05\x05\x00\x03\x02\x03\x03' \
  > "$out/onnx_maxpool_stride0"
# The ONNX files that crash ONNX's shape inference (issue 26), as model files.
for model in tests/graph/data/hostile_*.txtpb; do
  { printf '\x02'; protoc --encode=onnx.ModelProto -I/usr/include /usr/include/onnx/onnx.proto < "$model"; } \
    > "$out/model_$(basename "$model" .txtpb).onnx"
done
EDGECOST_DB="$tmp/costs.db" "$edgecost" solve --model linear --platform a72 --activation-budget 4kB --runtime-budget 2x \
  --no-store --out "$tmp/schedule.json" > /dev/null
{ printf '\x01'; cat "$tmp/schedule.json"; } > "$out/schedule_linear.json"
# Kind 4: cost exports as `db import` reads them: a small JSON export of two op costs, and the same
# with one op listed twice with other figures (refused whole).
EDGECOST_DB="$tmp/costs.db" "$edgecost" profile --model linear --isolated-only --threads 1 > /dev/null
device=$(EDGECOST_DB="$tmp/costs.db" "$edgecost" db info | awk '/^-+$/ {getline; print $1; exit}')
EDGECOST_DB="$tmp/costs.db" "$edgecost" db export "$device" --out "$tmp/export.json" > /dev/null
/usr/bin/python3 - "$tmp/export.json" "$out" <<'PY'
import copy, json, sys
export = json.load(open(sys.argv[1]))
small = {"device": export["device"], "opCosts": export["opCosts"][:2]}
for cost in small["opCosts"]:
    cost["repetitions"] = cost.get("repetitions", [])[:3]
with open(sys.argv[2] + "/export_two_ops.json", "w") as f:
    f.write("\x04" + json.dumps(small))
twice = copy.deepcopy(small["opCosts"][0])
twice["runtime"]["medianS"] *= 3
small["opCosts"].append(twice)
with open(sys.argv[2] + "/export_op_twice.json", "w") as f:
    f.write("\x04" + json.dumps(small))
PY

out=tests/fuzz/seeds_data
# Kind 3: a checkpoint of two steps of the zoo's linear model at batch 2, as fuzz_data.cc restores it.
EDGECOST_DB="$tmp/costs.db" "$edgecost" train --model linear --batch-size 2 --steps 2 --threads 1 --no-store \
  --checkpoint "$tmp/linear.ckpt" > /dev/null
{ printf '\x03'; cat "$tmp/linear.ckpt"; } > "$out/checkpoint_linear"
# Kind 1: an .npz whose directory names one deflated member 200 times (a zip bomb).
/usr/bin/python3 - "$out/npz_bomb" <<'PY'
import io, struct, sys, zipfile
b = io.BytesIO()
with zipfile.ZipFile(b, "w", zipfile.ZIP_DEFLATED) as z:
    z.writestr("x.npy", bytes(1 << 20))
d = b.getvalue()
end = d.rindex(b"PK\x05\x06")
at = struct.unpack("<I", d[end + 16:end + 20])[0]
entries = b"".join(d[at:end].replace(b"x.npy", b"%05d" % i) for i in range(200))
tail = d[end:end + 8] + struct.pack("<HHII", 200, 200, len(entries), at) + d[end + 20:]
open(sys.argv[1], "wb").write(b"\x01" + d[:at] + entries + tail)
PY
