#!/usr/bin/env bash
# Opens the quickstart's Chakra execution traces (`tierflow trace chakra`) in Chakra's own tools:
# its jsonizer (every message through the full upstream schema, et_def.proto) and its visualizer
# (the dependency graph, as GraphML), and checks that each rank's file has the nodes and edges
# tierflow wrote. Not part of CI: Chakra is not packaged (neither Debian nor PyPI has MLCommons'
# Chakra), so it takes a checkout of github.com/mlcommons/chakra, installed without its
# HolisticTraceAnalysis dependency (only its converter needs it) into a virtual environment.
# Usage: bench/chakra_tools.sh CHAKRA_CHECKOUT [BUILD_DIR]   (VENV: where the venv goes)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
chakra=${1:?usage: bench/chakra_tools.sh CHAKRA_CHECKOUT [BUILD_DIR]}
build=${2:-$root/build}
tierflow="$build/cli/tierflow"
venv=${VENV:-$build/chakra-venv}
[ -x "$tierflow" ] || { echo "chakra_tools: $tierflow not built" >&2; exit 1; }
[ -f "$chakra/schema/protobuf/et_def.proto" ] || { echo "chakra_tools: $chakra is not a Chakra checkout (no schema/protobuf/et_def.proto)" >&2; exit 1; }
if [ ! -x "$venv/bin/chakra_jsonizer" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q setuptools wheel setuptools-grpc grpcio-tools protobuf graphviz networkx pydot
  "$venv/bin/pip" install -q --no-deps --no-build-isolation "$chakra"
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$tierflow" trace chakra "$root/scenarios/quickstart.yaml" -o "$out/et" --json > "$out/written.json"
python3 - "$out" "$venv" <<'PY'
import json, subprocess, sys
out, venv = sys.argv[1], sys.argv[2]
written = json.load(open(f"{out}/written.json"))
failed = 0
for f in written["files"]:
    j = f"{out}/rank{f['rank']}.json"
    subprocess.run([f"{venv}/bin/chakra_jsonizer", "--input_filename", f["path"], "--output_filename", j], check=True)
    text, dec, pos, objs = open(j).read(), json.JSONDecoder(), 0, []
    while pos < len(text):
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos == len(text):
            break
        obj, pos = dec.raw_decode(text, pos)
        objs.append(obj)
    meta, nodes = objs[0], objs[1:]
    edges = sum(len(n.get("dataDeps", [])) + len(n.get("ctrlDeps", [])) for n in nodes)
    g = f"{out}/rank{f['rank']}.graphml"
    subprocess.run([f"{venv}/bin/chakra_visualizer", "--input_filename", f["path"], "--output_filename", g], check=True)
    graph = open(g).read()
    g_nodes, g_edges = graph.count("<node "), graph.count("<edge ")
    ok = meta.get("version") == "0.0.4" and len(nodes) == f["nodes"] == g_nodes and g_edges <= edges
    failed += not ok
    print(f"rank {f['rank']}: tierflow wrote {f['nodes']} nodes; chakra_jsonizer read {len(nodes)} nodes, "
          f"{edges} edges (version {meta.get('version')}); chakra_visualizer drew {g_nodes} nodes, {g_edges} edges: "
          f"{'ok' if ok else 'MISMATCH'}")
sys.exit(1 if failed else 0)
PY
