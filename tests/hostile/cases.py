"""The hostile-input cases of run_hostile.py, grouped by verb (one ctest per group).

C(group, name, args, rc, err, files={}, dirs=(), outputs=(), setup=None, timeout=60)
  args     the command line after `tierflow`; {S} is the checkout, {fx} the fixtures directory;
           relative paths are in the case's own directory
  rc       the exit status: 1 (the input is wrong: not found, failed precondition, data loss) or 2
           (an invalid argument, a usage error); a tuple where either is right
  err      a regex stderr must match: it names the thing and the rule
  files    name -> content (str, bytes, or a function of the fixtures) written before the run
  dirs     directories made before the run
  outputs  paths the command may create or change (all others must stay as they were)
"""
import json
import os
import struct

FIXTURES = {
    # name: the tierflow arguments that make it ({out} is its path)
    "tiny.schedule.json": "plan {S}/scenarios/tiny-cpu.yaml -o {out}",
    "tiny.sim.jsonl": "sim {S}/scenarios/tiny-cpu.yaml -n 2 --records {out}",
}


class C:
    def __init__(self, group, name, args, rc, err, files=None, dirs=(), outputs=(), setup=None, timeout=60):
        self.group, self.name, self.args, self.rc, self.err = group, name, args, rc, err
        self.files, self.dirs, self.outputs, self.setup, self.timeout = files or {}, dirs, outputs, setup, timeout


TINY = "{S}/scenarios/tiny-cpu.yaml"
SMALL = "{S}/tests/cli/data/small.yaml"
DATA = "--data {S}/data/corpus/kjv-genesis.txt"
GOOD = """name: t
model: {preset: tiny}
hardware: {preset: cpu-host}
training: {micro_batch_size: 1, sequence_length: 128, data_parallel: 1}
policy: {name: zero-infinity}
"""


def scenario(**replace):
    """GOOD with lines replaced: scenario(training="training: {...}")."""
    lines = GOOD.split("\n")
    for key, value in replace.items():
        lines = [value if l.startswith(key + ":") else l for l in lines]
    return "\n".join(lines)


def schedule(edit):
    """The tiny schedule fixture, edited by edit(json) -> None."""
    def make(fx):
        j = json.loads(fx.text("tiny.schedule.json"))
        edit(j)
        return json.dumps(j)
    return make


def records(edit_lines):
    def make(fx):
        lines = fx.text("tiny.sim.jsonl").strip().split("\n")
        return "\n".join(edit_lines(lines)) + "\n"
    return make


def first_task(op):
    def pick(j):
        return next(t for t in j["tasks"] if t["op"] == op)
    return pick


CASES = []


def add(*a, **k):
    CASES.append(C(*a, **k))


# ---- scenario files (through sim: the loader is shared by plan, sim, run, tune, sweep) ----------
g = "scenario"
add(g, "missing_file", "sim nope.yaml", 1, r"scenario file 'nope\.yaml' cannot be opened")
add(g, "empty_file", "sim s.yaml", 2, r"s\.yaml", files={"s.yaml": ""})
add(g, "not_yaml", "sim s.yaml", 2, r"s\.yaml: not valid YAML: .*line 2", files={"s.yaml": "model: [preset: tiny\n"})
add(g, "a_list", "sim s.yaml", 2, r"s\.yaml", files={"s.yaml": "- 1\n- 2\n"})
add(g, "duplicate_key", "sim s.yaml", 2, r"line 6: key 'policy' appears twice", files={"s.yaml": GOOD + "policy: {name: ioc}\n"})
add(g, "non_utf8", "sim s.yaml", 2, r"byte \d+ \(0xFF\) is not UTF-8", files={"s.yaml": GOOD.encode() + b"# \xff\xfe\n"})
add(g, "unknown_top_key", "sim s.yaml", 2, r"unknown key 'polcy'", files={"s.yaml": GOOD + "polcy: {}\n"})
add(g, "unknown_model", "sim s.yaml", 2, r"unknown model preset 'llama9'", files={"s.yaml": scenario(model="model: {preset: llama9}")})
add(g, "unknown_hardware", "sim s.yaml", 2, r"unknown hardware preset 'dgx'", files={"s.yaml": scenario(hardware="hardware: {preset: dgx}")})
add(g, "learned_positions_past_max_seq", f"plan {TINY} --set model.position=learned --set model.max_seq=64 -o p.json", 2,
    r"training\.sequence_length 128 is above model\.max_seq 64: the model's learned positions end there")
add(g, "unknown_policy", "sim s.yaml", 2, r"unknown policy 'zero-five'", files={"s.yaml": scenario(policy="policy: {name: zero-five}")})
add(g, "unknown_knob", "sim s.yaml", 2, r"bufer_count", files={"s.yaml": scenario(policy="policy: {name: zero-infinity, bufer_count: 4}")})
add(g, "negative_micro_batch", "sim s.yaml", 2, r"micro_batch_size",
    files={"s.yaml": scenario(training="training: {micro_batch_size: -1}")})
add(g, "zero_sequence", "sim s.yaml", 2, r"sequence_length",
    files={"s.yaml": scenario(training="training: {sequence_length: 0}")})
add(g, "huge_accumulation", "sim s.yaml", 2, r"gradient_accumulation_steps",
    files={"s.yaml": scenario(training="training: {gradient_accumulation_steps: 100000}")})
add(g, "accumulation_past_2_64", "sim s.yaml", 2, r"gradient_accumulation_steps",
    files={"s.yaml": scenario(training="training: {gradient_accumulation_steps: 18446744073709551617}")})
add(g, "fractional_ranks", "sim s.yaml", 2, r"data_parallel",
    files={"s.yaml": scenario(training="training: {data_parallel: 1.5}")})
add(g, "ranks_past_the_gpus", "sim s.yaml", 2, r"data_parallel 3 exceeds",
    files={"s.yaml": scenario(training="training: {data_parallel: 3}")})
add(g, "nan_clipping", "sim s.yaml", 2, r"gradient_clipping",
    files={"s.yaml": scenario(training="training: {gradient_clipping: .nan}")})
add(g, "negative_clipping", "sim s.yaml", 2, r"gradient_clipping",
    files={"s.yaml": scenario(training="training: {gradient_clipping: -1}")})
add(g, "unknown_dtype", "sim s.yaml", 2, r"dtype",
    files={"s.yaml": scenario(training="training: {dtype: fp8}")})
add(g, "string_for_number", "sim s.yaml", 2, r"micro_batch_size",
    files={"s.yaml": scenario(training="training: {micro_batch_size: many}")})
add(g, "huge_layers", "sim s.yaml", 2, r"layers",
    files={"s.yaml": scenario(model="model: {preset: tiny, layers: 100000000000}")})
add(g, "zero_heads", "sim s.yaml", 2, r"heads",
    files={"s.yaml": scenario(model="model: {preset: tiny, heads: 0}")})
add(g, "heads_not_dividing_hidden", "sim s.yaml", 2, r"heads",
    files={"s.yaml": scenario(model="model: {preset: tiny, heads: 7}")})
add(g, "tiny_sub_group", "sim s.yaml", 2, r"sub_group_size",
    files={"s.yaml": scenario(policy="policy: {name: zero-infinity, sub_group_size: 0}")})
add(g, "negative_buffer_count", "sim s.yaml", 2, r"buffer_count",
    files={"s.yaml": scenario(policy="policy: {name: zero-infinity, buffer_count: -2}")})
add(g, "block_size_without_unit", "sim s.yaml", 2, r"block_size",
    files={"s.yaml": scenario(policy="policy: {name: zero-infinity, block_size: 1048576x}")})
add(g, "hardware_zero_bandwidth", "sim s.yaml", 2, r"read_bw.*positive",
    files={"s.yaml": scenario(hardware="hardware: {preset: cpu-host, node: {nvme: [{read_bw: 0 GB/s}]}}")})
add(g, "hardware_absurd_bandwidth", "sim s.yaml", 2, r"read_bw",
    files={"s.yaml": scenario(hardware="hardware: {preset: cpu-host, node: {nvme: [{read_bw: 1e-300 GB/s}]}}")})
add(g, "hardware_no_unit", "sim s.yaml", 2, r"read_bw.*no unit",
    files={"s.yaml": scenario(hardware="hardware: {preset: cpu-host, node: {nvme: [{read_bw: 7}]}}")})
add(g, "hardware_efficiency_above_one", "sim s.yaml", 2, r"compute_efficiency",
    files={"s.yaml": scenario(hardware="hardware: {preset: cpu-host, node: {gpu: {compute_efficiency: 1.5}}}")})
add(g, "hardware_measured_stream_not_block_by_depth", "sim s.yaml", 2, r"read_bw_by_request: '16k' is not BLOCKxDEPTH",
    files={"s.yaml": scenario(hardware="hardware: {preset: cpu-host, node: {nvme: [{read_bw_by_request: {16k: 2.5e8}}]}}")})
add(g, "hardware_zero_gpus", "sim s.yaml", 2, r"gpu_count",
    files={"s.yaml": scenario(hardware="hardware: {preset: cpu-host, node: {gpu_count: 0}}")})
add(g, "hardware_negative_nodes", "sim s.yaml", 2, r"nodes",
    files={"s.yaml": scenario(hardware="hardware: {preset: cpu-host, nodes: -1}")})
add(g, "hardware_not_a_map", "sim s.yaml", 2, r"hardware: expected a map",
    files={"s.yaml": scenario(hardware="hardware: nohw.yaml")})
add(g, "set_unknown_key", f"sim {TINY} --set training.micro_batchsize=2", 2, r"micro_batchsize")
add(g, "set_without_equals", f"sim {TINY} --set training.micro_batch_size", 2, r"--set 'training\.micro_batch_size': expected key\.path=value")
add(g, "set_bad_value", f"sim {TINY} --set training.micro_batch_size=-3", 2, r"micro_batch_size")
add(g, "set_bad_yaml", f"sim {TINY} --set 'policy={{name: ioc'", 2, r"--set 'policy=\{name: ioc': yaml-cpp: error")
add(g, "huge_error_input", "sim s.yaml", 2, r"s\.yaml",
    files={"s.yaml": GOOD.replace("policy:", "polic" + "y" * 100000 + ":")})

# A value of 100,000 characters is echoed as its first 40 and its length, never whole.
LONG = "9" * 100000
for name, args, want in [("number", f"--set training.micro_batch_size={LONG}", r"training\.micro_batch_size: '9{40}\.\.\.' \(100000 characters\) is above 1048576"),
                         ("policy_name", f"--set policy.name={LONG}", r"policy\.name: unknown policy '9{40}\.\.\.' \(100000 characters\)"),
                         ("key", f"--set training.{LONG}=1", r"unknown key '9{40}\.\.\.' \(100000 characters\)"),
                         ("enum", f"--set model.mlp={LONG}", r"model\.mlp: '9{40}\.\.\.' \(100000 characters\) is not one of swiglu, gelu"),
                         ("hardware_preset", f"--set hardware.preset=x{LONG}", r"unknown hardware preset 'x9{39}\.\.\.' \(100001 characters\)"),
                         ("size", f"--set hardware.node.cpu.host_memory={LONG}", r"host_memory: '9{40}\.\.\.' \(100000 characters\) has no unit \(write e\.g\. '80 ")]:
    add(g, f"long_{name}", f"plan {TINY} {args} -o p.json", (1, 2), want)
add(g, "long_storage", f"run {TINY} --disk d --storage x{LONG} {DATA}", 2, r"unknown storage back-end 'x9{39}\.\.\.' \(100001 characters\)", dirs=("d",))

# ---- plan -------------------------------------------------------------------------------------
g = "plan"
add(g, "output_is_the_input", "plan s.yaml -o s.yaml", 2, r"s\.yaml", files={"s.yaml": GOOD})
add(g, "failing_plan_keeps_the_output", "plan s.yaml -o out.json", 2, r"zero-five",
    files={"s.yaml": scenario(policy="policy: {name: zero-five}"), "out.json": "precious\n"})
add(g, "output_in_a_file", "plan s.yaml -o f/out.json", 1, r"create the directory 'f' of schedule file 'f/out\.json': Not a directory", files={"s.yaml": GOOD, "f": "a file\n"})
add(g, "schedule_as_input", "plan {fx}/tiny.schedule.json -o x.json", 2, r"plan takes a scenario \(YAML\), not a schedule")
add(g, "fuyou_on_four_ranks", f"plan {SMALL} --set 'policy={{name: fuyou}}' -o x.json", 2, r"fuyou.*one GPU")
add(g, "mlp_offload_without_remote", f"plan {SMALL} --set 'policy={{name: mlp-offload}}' -o x.json", 2, r"remote tier")
add(g, "ioc_more_disks_than_hardware", f"plan {TINY} --set policy.name=ioc --set policy.disks=9 -o x.json", 2, r"disks")
add(g, "memory_budget_too_small", f"plan {TINY} --set hardware.node.gpu.hbm=1KiB -o x.json", 1, r"larger than pool 'gpu0.hbm'")

# ---- schedule files (through sim and run) ------------------------------------------------------
g = "schedule"
add(g, "not_json", "sim s.json", 2, r"s\.json: schedule: not valid JSON at byte 12", files={"s.json": "{\"format\": "})
add(g, "truncated", "sim s.json", 2, r"s\.json: schedule: not valid JSON at byte \d+",
    files={"s.json": lambda fx: fx.text("tiny.schedule.json")[:5000]})
add(g, "wrong_format", "sim s.json", 2, r"format", files={"s.json": schedule(lambda j: j.update(format="tierflow.schedule/9"))})
add(g, "duplicate_key", "sim s.json", 2, r"key 'name' appears twice", files={"s.json": lambda fx: fx.text("tiny.schedule.json").replace(
    '"format"', '"name": "x", "format"', 1)})
add(g, "non_utf8", "sim s.json", 2, r"s\.json.*byte \d+", files={"s.json": lambda fx: fx.text("tiny.schedule.json").encode().replace(
    b'"name": "', b'"name": "\xff', 1)})
add(g, "dangling_dep", "sim s.json", 2, r"no-such-task",
    files={"s.json": schedule(lambda j: j["tasks"][3].setdefault("deps", []).append("no-such-task"))})
add(g, "cycle", "sim s.json", 2, r"cycle",
    files={"s.json": schedule(lambda j: j["tasks"][0].setdefault("deps", []).append(j["tasks"][-1]["id"]))})
add(g, "duplicate_task", "sim s.json", 2, r"task '[^']+' is defined twice",
    files={"s.json": schedule(lambda j: j["tasks"].append(dict(j["tasks"][0])))})
add(g, "unknown_op", "sim s.json", 2, r"teleport", files={"s.json": schedule(lambda j: j["tasks"][0].update(op="teleport"))})
add(g, "unknown_resource", "sim s.json", 2, r"warp\.drive",
    files={"s.json": schedule(lambda j: j["tasks"][0].update(resource="warp.drive"))})
add(g, "negative_bytes", "sim s.json", 2, r"bytes", files={"s.json": schedule(lambda j: j["tasks"][0].update(bytes=-5))})
add(g, "bytes_past_2_63", "sim s.json", 2, r"bytes",
    files={"s.json": lambda fx: schedule(lambda j: j["tasks"][0].update(bytes=123456789))(fx).replace("123456789", "99999999999999999999999", 1)})
add(g, "string_bytes", "sim s.json", 2, r"bytes", files={"s.json": schedule(lambda j: j["tasks"][0].update(bytes="lots"))})
add(g, "unknown_tensor", "sim s.json", 2, r"ghost",
    files={"s.json": schedule(lambda j: first_task("read")(j).update(tensors=["ghost"]))})
add(g, "unknown_buffer", "sim s.json", 2, r"phantom",
    files={"s.json": schedule(lambda j: first_task("read")(j).update(allocs=["phantom"]))})
add(g, "pool_too_small", "sim s.json", 1, r"larger than pool",
    files={"s.json": schedule(lambda j: [p.update(capacity_bytes=16) for p in j["pools"]])})
add(g, "negative_window", "sim s.json", 2, r"iteration_window", files={"s.json": schedule(lambda j: j.update(iteration_window=-1))})
add(g, "no_tasks", "sim s.json", 2, r"task", files={"s.json": schedule(lambda j: j.update(tasks=[]))})
add(g, "overlapping_tensors", "sim s.json", 2, r"share bytes",
    files={"s.json": schedule(lambda j: [t.update(offset_bytes=0) for t in j["tensors"] if t.get("device") == "nvme0"])})
add(g, "unknown_device", "sim s.json", 2, r"nvme7",
    files={"s.json": schedule(lambda j: j["tensors"][0].update(device="nvme7"))})
add(g, "unknown_key", "sim s.json", 2, r"colour", files={"s.json": schedule(lambda j: j["tasks"][0].update(colour="red"))})
add(g, "carried_distance_negative", "sim s.json", 2, r"distance",
    files={"s.json": schedule(lambda j: next(t for t in j["tasks"] if t.get("carried")).update(
        carried=[{"task": "step.end", "distance": -1}]))})
add(g, "run_dangling", "run s.json --disk d", 2, r"no-such-task", dirs=("d",),
    files={"s.json": schedule(lambda j: j["tasks"][3].setdefault("deps", []).append("no-such-task"))})


def tensor_on(kind, **fields):
    """The first tensor homed on a device of `kind` (nvme, host, gpu), with `fields` set."""
    def edit(j):
        kinds = {d["name"]: d["kind"] for d in j["devices"]}
        next(t for t in j["tensors"] if kinds[t["device"]] == kind).update(fields)
    return schedule(edit)


# Every size and offset a schedule names, past its device and past the training's own state.
add(g, "disk_offset_past_the_disk", "sim s.json", 2, r"tensor 'master\.r0\[0\+\d+\]@nvme0': its bytes \[4611686018427387904, \+\d+\) end past nvme0's capacity",
    files={"s.json": tensor_on("nvme", offset_bytes=2**62)})
add(g, "run_disk_offset_past_the_state", f"run s.json --disk d {DATA}", 2,
    r"tensor 'master\.r0\[0\+\d+\]@nvme0': its bytes \[4611686018427387904, \+\d+\) of device 'nvme0' end past the [0-9.]+ MiB",
    files={"s.json": tensor_on("nvme", offset_bytes=2**62)}, dirs=("d",))
add(g, "run_host_offset_past_the_state", f"run s.json --disk d {DATA}", 2,
    r"tensor 'param16\.r0\[\d+\+\d+\]@host': its bytes \[4611686018427387904, \+\d+\) of device 'host' end past the [0-9.]+ MiB that every kind",
    files={"s.json": tensor_on("host", offset_bytes=2**62)}, dirs=("d",))
add(g, "run_elements_past_the_partition", f"run s.json --disk d {DATA}", 2, r"its range is outside the \d+ parameters of a rank's partition",
    files={"s.json": tensor_on("nvme", element_offset=2**40)}, dirs=("d",))
add(g, "offset_past_2_63", "sim s.json", 2, r"offset_bytes",
    files={"s.json": lambda fx: tensor_on("nvme", offset_bytes=123456789)(fx).replace("123456789", "18446744073709551616", 1)})
add(g, "buffer_past_its_pool", "sim s.json", 1, r"larger than pool",
    files={"s.json": schedule(lambda j: j["buffers"][0].update(size_bytes=2**62))})
add(g, "task_bytes_past_its_tensors", "sim s.json", 2, r"task 'read\.[^']*': moves 4611686018427387904 bytes, but its tensors hold \d+ \(a read moves exactly the state it names\)",
    files={"s.json": schedule(lambda j: first_task("read")(j).update(bytes=2**62))})
# ---- sim ---------------------------------------------------------------------------------------
g = "sim"
add(g, "zero_iterations", f"sim {TINY} -n 0", 2, r"--iterations: '0' is below 1 \(an integer of at least 1\)")
add(g, "negative_iterations", f"sim {TINY} -n -4", 2, r"--iterations: '-4' is below 1 \(an integer of at least 1\)")
add(g, "huge_iterations", f"sim {TINY} -n 99999999999", 2, r"--iterations 99999999999: \d+ tasks per iteration would make more than")
add(g, "iterations_not_a_number", f"sim {TINY} -n lots", 2, r"usage: --iterations: 'lots' is not an integer \(an integer of at least 1\)")
add(g, "profile_missing", f"sim {TINY} --profile nope.yaml", 1, r"nope\.yaml")
add(g, "profile_not_yaml", f"sim {TINY} --profile p.yaml", 2, r"p\.yaml", files={"p.yaml": "nodes: [\n"})
add(g, "trace_into_a_file", f"sim {TINY} --trace f/t.json", 1, r"create the directory 'f' of Chrome trace file 'f/t\.json'", files={"f": "x\n"})
add(g, "records_onto_the_input", "sim s.yaml --records s.yaml", 2, r"s\.yaml", files={"s.yaml": GOOD})
add(g, "unknown_flag", f"sim {TINY} --fast", 2, r"--fast")
add(g, "no_input", "sim", 2, r"usage: input is required")
add(g, "beyond_host_memory", f"sim {SMALL} --set hardware.node.cpu.host_memory=4GiB --set hardware.node.cpu.host_reserve=1GiB", 1,
    r"the plan does not fit the machine, so its figures predict nothing: pinned host memory on host peaks at [0-9.]+ GiB, "
    r"and the node has 3\.00 GiB \(cpu\.host_memory less cpu\.host_reserve\): [0-9.]+ GiB short")
add(g, "beyond_gpu_memory", f"sim {SMALL} --set hardware.node.gpu.hbm=2GiB", 1, r"pool 'gpu0\.hbm'.*capacity is 2147483648")

# ---- run ---------------------------------------------------------------------------------------
g = "run"
add(g, "no_disk", f"run {TINY} {DATA}", 2, r"--disk")
add(g, "missing_disk_dir", f"run {TINY} --disk nodir {DATA}", 1, r"nodir")
add(g, "disk_is_a_file", f"run {TINY} --disk f {DATA}", 2, r"--disk 'f' is a file, not a directory: this command writes its files into a directory", files={"f": "x\n"})
add(g, "too_many_disks", f"run {TINY} --disk a --disk b --disk c --disk d {DATA}", 2, r"--disk 'b': the schedule has only 1 storage device", dirs=("a", "b", "c", "d"))
add(g, "unknown_disk_name", f"run {TINY} --disk nvme9=a {DATA}", 2, r"nvme9", dirs=("a",))
add(g, "same_dir_twice", f"run {TINY} --set policy.name=ioc --disk a --disk a {DATA}", 2, r"'a'", dirs=("a",))
add(g, "nan_lr", f"run {TINY} --disk d --lr nan {DATA}", 2, r"--lr", dirs=("d",))
add(g, "negative_lr", f"run {TINY} --disk d --lr -1 {DATA}", 2, r"--lr", dirs=("d",))
add(g, "inf_lr", f"run {TINY} --disk d --lr inf {DATA}", 2, r"--lr", dirs=("d",))
add(g, "negative_threads", f"run {TINY} --disk d --threads -3 {DATA}", 2, r"--threads", dirs=("d",))
add(g, "huge_threads", f"run {TINY} --disk d --threads 100000000 {DATA}", 2, r"--threads", dirs=("d",))
add(g, "zero_iterations", f"run {TINY} --disk d -n 0 {DATA}", 2, r"--iterations: '0' is below 1 \(an integer from 1 to 1000000000\)", dirs=("d",))
add(g, "huge_iterations", f"run {TINY} --disk d -n 99999999999 {DATA}", 2, r"--iterations: '99999999999' is above 1000000000 \(an integer from 1 to 1000000000\)", dirs=("d",))
add(g, "unknown_storage", f"run {TINY} --disk d --storage tape {DATA}", 2, r"tape", dirs=("d",))
add(g, "unknown_compute", f"run {TINY} --disk d --compute tpu {DATA}", 2, r"tpu", dirs=("d",))
add(g, "missing_data", f"run {TINY} --disk d --data nodata.txt", 1, r"nodata\.txt", dirs=("d",))
add(g, "empty_data", f"run {TINY} --disk d --data e.txt", 2, r"e\.txt", dirs=("d",), files={"e.txt": ""})
add(g, "checkpoint_every_without_dir", f"run {TINY} --disk d --checkpoint-every 1 {DATA}", 2, r"--checkpoint", dirs=("d",))
add(g, "checkpoint_every_negative", f"run {TINY} --disk d --checkpoint c --checkpoint-every -1 {DATA}", 2, r"--checkpoint-every", dirs=("d", "c"))
add(g, "resume_without_checkpoint", f"run {TINY} --disk d --resume {DATA}", 2, r"--resume need --checkpoint DIR", dirs=("d",))
add(g, "records_onto_the_scenario", f"run s.yaml --disk d --records s.yaml {DATA}", 2, r"s\.yaml", dirs=("d",), files={"s.yaml": GOOD})


def safetensors(header, payload=b""):
    """A safetensors file: its JSON header's length (8 bytes, little-endian), the header, the data."""
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + payload


add(g, "init_missing", f"run {TINY} --disk d --init none.safetensors {DATA}", 1, r"--init: cannot open safetensors 'none\.safetensors'", dirs=("d",))
add(g, "init_not_safetensors", f"run {TINY} --disk d --init w.safetensors {DATA}", 1, r"--init: safetensors 'w\.safetensors'", dirs=("d",),
    files={"w.safetensors": "not a safetensors file\n"})
add(g, "init_without_the_model", f"run {TINY} --disk d --init w.safetensors {DATA}", 1, r"--init: .*model\.embed_tokens\.weight", dirs=("d",),
    files={"w.safetensors": safetensors({})})
add(g, "init_wrong_shape", f"run {TINY} --disk d --init w.safetensors {DATA}", 2, r"--init: .*model\.embed_tokens\.weight.*shape", dirs=("d",),
    files={"w.safetensors": safetensors({"model.embed_tokens.weight": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}, bytes(16))})
add(g, "ranks_above_one", f"run {SMALL} --disk d {DATA}", 2, r"trains on 4 ranks \(training\.data_parallel\), but this run has 1: start one process per rank, mpirun -np 4", dirs=("d",))
add(g, "gpu_schedule_unknown_kernel", f"run s.json --disk d {DATA}", 2, r"kernel",
    dirs=("d",), files={"s.json": schedule(lambda j: first_task("compute")(j).update(kernel="fft"))})
add(g, "in_memory_with_records", f"run {TINY} --in-memory --records r.jsonl {DATA}", 2,
    r"--records with --in-memory: the in-memory reference runs no schedule, so it has no task records to write")
add(g, "in_memory_with_trace", f"run {TINY} --in-memory --trace t.json {DATA}", 2, r"--trace with --in-memory")
add(g, "in_memory_with_plain_loop", f"run {TINY} --in-memory --plain-loop {DATA}", 2, r"--in-memory ignores the schedule and --plain-loop runs it")

# ---- sweep -------------------------------------------------------------------------------------
g = "sweep"
SWEEP = f"base: {{S}}/scenarios/tiny-cpu.yaml\ngrid:\n  policy.buffer_count: [2, 4]\n"
add(g, "missing_file", "sweep nope.yaml", 1, r"nope\.yaml")
add(g, "no_base", "sweep w.yaml -o o.csv", 2, r"base", files={"w.yaml": "grid: {policy.buffer_count: [2]}\n"})
add(g, "unknown_key", "sweep w.yaml -o o.csv", 2, r"gird", files={"w.yaml": "base: x.yaml\ngird: {}\n"})
add(g, "grid_not_lists", "sweep w.yaml -o o.csv", 2, r"grid\.policy\.buffer_count: expected a list of values",
    files={"w.yaml": f"base: {TINY}\ngrid: {{policy.buffer_count: 4}}\n"})
add(g, "empty_grid_list", "sweep w.yaml -o o.csv", 2, r"grid\.policy\.buffer_count: empty list of values",
    files={"w.yaml": f"base: {TINY}\ngrid: {{policy.buffer_count: []}}\n"})
add(g, "huge_grid", "sweep w.yaml -o o.csv", 2, r"more than 10 million runs",
    files={"w.yaml": f"base: {TINY}\ngrid:\n" + "".join(f"  policy.k{i}: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n" for i in range(12))})
add(g, "bad_shard", "sweep w.yaml --shard 8/8 -o o.csv", 2, r"--shard", files={"w.yaml": SWEEP})
add(g, "shard_garbage", "sweep w.yaml --shard x -o o.csv", 2, r"--shard", files={"w.yaml": SWEEP})
add(g, "jobs_negative", "sweep w.yaml -j -1 -o o.csv", 2, r"-j", files={"w.yaml": SWEEP})
add(g, "output_onto_the_sweep", "sweep w.yaml -o w.yaml", 2, r"is the input", files={"w.yaml": SWEEP})
add(g, "negative_budget", "sweep w.yaml -o o.csv", 2, r"memory_budget: .*size '-1 GiB' is negative",
    files={"w.yaml": f"base: {TINY}\nmemory_budget: {{host: -1 GiB}}\n"})
add(g, "merge_nothing", "sweep merge -o all.csv", 2, r"sweep merge: error: usage: csv is required")
add(g, "merge_not_csv", "sweep merge a.csv -o all.csv", 2, r"a\.csv", files={"a.csv": "\x00\x01garbage"})
add(g, "merge_missing", "sweep merge nope.csv -o all.csv", 1, r"nope\.csv")

# ---- tune --------------------------------------------------------------------------------------
g = "tune"
add(g, "schedule_input", "tune {fx}/tiny.schedule.json", 2, r"scenario")
add(g, "unknown_policy", f"tune {TINY} --policy zero-five", 2, r"zero-five")
add(g, "bad_budget", f"tune {TINY} --memory-budget lots", 2, r"--memory-budget 'lots': expected host=SIZE,gpu=SIZE")
add(g, "negative_budget", f"tune {TINY} --memory-budget host=-1GiB,gpu=1GiB", 2, r"--memory-budget host: size '-1GiB' is negative")
add(g, "budget_nothing_fits", f"tune {TINY} --policy zero-infinity --memory-budget host=1KiB,gpu=1KiB -o x.json", 1,
    r"no configuration fits the memory budget")
add(g, "jobs_negative", f"tune {TINY} -j -1", 2, r"-j")
add(g, "beyond_host_memory", f"tune {SMALL} --policy zero-infinity --rounds 1 --set hardware.node.cpu.host_memory=2GiB "
    "--set hardware.node.cpu.host_reserve=1GiB -o x.json", 1, r"no configuration fits the memory budget \(host 1\.00 GiB", timeout=300)
add(g, "unrepairable_baseline", f"tune s.yaml --policy zero-infinity --rounds 1 -o x.json", 1,
    r"the baseline cannot be simulated, and no move of the knobs its reasons name makes it run: .*policy\.bufer_count",
    files={"s.yaml": scenario(policy="policy: {name: zero-infinity, bufer_count: 3}")}, timeout=120)
add(g, "iterations_zero", f"tune {TINY} -n 0", 2, r"--iterations: '0' is below 1 \(an integer from 1 to 1000\)")
add(g, "output_onto_the_scenario", "tune s.yaml -o s.yaml", 2, r"s\.yaml", files={"s.yaml": GOOD})

# ---- trace files -------------------------------------------------------------------------------
g = "trace"
add(g, "summary_missing", "trace summary nope.jsonl", 1, r"nope\.jsonl")
add(g, "summary_empty", "trace summary e.jsonl", 2, r"trace file 'e\.jsonl' holds no records", files={"e.jsonl": ""})
add(g, "summary_not_json", "trace summary t.jsonl", 2, r"t\.jsonl.*line 2", files={"t.jsonl": lambda fx: fx.text("tiny.sim.jsonl").split("\n")[0] + "\n{oops\n"})
add(g, "summary_missing_field", "trace summary t.jsonl", 2, r"t\.jsonl.*line 1.*end_s",
    files={"t.jsonl": records(lambda ls: [json.dumps({k: v for k, v in json.loads(ls[0]).items() if k != "end_s"})] + ls[1:])})
add(g, "summary_negative_iteration", "trace summary t.jsonl", 2, r"iteration",
    files={"t.jsonl": records(lambda ls: [json.dumps(dict(json.loads(ls[0]), iteration=-3))] + ls[1:])})
add(g, "summary_end_before_start", "trace summary t.jsonl", 2, r"line 1: end_s is before start_s",
    files={"t.jsonl": records(lambda ls: [json.dumps(dict(json.loads(ls[0]), start_s=5.0, end_s=1.0))] + ls[1:])})
add(g, "summary_time_past_1e9", "trace summary t.jsonl", 2,
    r"line 1: start_s 1e\+308 and end_s 1e\+308: each must be seconds from 0 to 1e9 \(31 years\) since the run began",
    files={"t.jsonl": records(lambda ls: [json.dumps(dict(json.loads(ls[0]), start_s=1e308, end_s=1e308))] + ls[1:])})
add(g, "summary_duplicate_record", "trace summary t.jsonl", 2, r"line \d+: repeats the record of line 4",
    files={"t.jsonl": records(lambda ls: ls + [ls[3]])})
add(g, "summary_non_utf8", "trace summary t.jsonl", 2, r"t\.jsonl' line 1.*byte \d+",
    files={"t.jsonl": lambda fx: fx.text("tiny.sim.jsonl").encode().replace(b'"task":"', b'"task":"\xff', 1)})
add(g, "summary_nan_time", "trace summary t.jsonl", 2, r"line 1: trace record: not valid JSON at byte \d+",
    files={"t.jsonl": records(lambda ls: [ls[0].replace('"start_s":', '"start_s":NaN,"x":', 1)] + ls[1:])})
add(g, "summary_cyclic_schedule", "trace summary {fx}/tiny.sim.jsonl --schedule s.json", 2, r"s\.json: task 'a' is on a dependency cycle",
    files={"s.json": lambda fx: open(os.path.join(fx.source, "tests/cli/data/cycle.schedule.json")).read()})
add(g, "chrome_output_onto_input", "trace chrome t.jsonl -o t.jsonl", 2, r"t\.jsonl",
    files={"t.jsonl": lambda fx: fx.text("tiny.sim.jsonl")})
add(g, "compare_missing", "trace compare {fx}/tiny.sim.jsonl nope.jsonl", 1, r"nope\.jsonl")
add(g, "compare_other_schedule", "trace compare {fx}/tiny.sim.jsonl q.jsonl", 2, r"have no task instance in common",
    files={"q.jsonl": records(lambda ls: [json.dumps(dict(json.loads(l), task="other." + json.loads(l)["task"])) for l in ls])})
add(g, "compare_negative_worst", "trace compare {fx}/tiny.sim.jsonl {fx}/tiny.sim.jsonl --worst -1", 2, r"--worst")
add(g, "chakra_prefix_with_a_slash", f"trace chakra {TINY} -o d --prefix ../x", 2,
    r"--prefix '\.\./x': a file name without '/' \(the files are <prefix>\.<rank>\.et in -o\)")
add(g, "chakra_out_is_the_input", "trace chakra s.yaml -o s.yaml", 2, r"-o 's\.yaml' is a file, not a directory", files={"s.yaml": GOOD})
add(g, "chakra_zero_iterations", f"trace chakra {TINY} -o d -n 0", 2, r"--iterations: '0' is below 1")
add(g, "chakra_schedule_without_sections", "trace chakra {S}/tests/traces/data/pipeline.schedule.json -o d", 2,
    r"the schedule has no 'model' section")

# ---- calibrate ---------------------------------------------------------------------------------
g = "calibrate"
add(g, "no_real_records", "calibrate {fx}/tiny.sim.jsonl -o p.yaml", 2, r"no measured records \(\d+ records, all from the simulator\)")
add(g, "missing_input", "calibrate nope.jsonl -o p.yaml", 1, r"nope\.jsonl")
add(g, "empty_dir", "calibrate d -o p.yaml", 2, r"directory 'd' holds no \*\.jsonl trace files", dirs=("d",))
add(g, "fio_not_json", "calibrate nvme0=f.json -o p.yaml", 2, r"f\.json", files={"f.json": "fio says hi"})
add(g, "fio_missing_bw", "calibrate nvme0=f.json -o p.yaml", 2, r"f\.json.*read\.runtime: missing",
    files={"f.json": json.dumps({"jobs": [{"jobname": "read-1m-qd4", "read": {"io_bytes": 1}}]})})
add(g, "fio_not_fio", "calibrate nvme9=f.json --base cpu-host -o p.yaml", 2, r"f\.json.*not fio",
    files={"f.json": "{}"})
add(g, "unknown_base", "calibrate {fx}/tiny.sim.jsonl --base dgx -o p.yaml", 1, r"dgx")
add(g, "output_onto_input", "calibrate t.jsonl -o t.jsonl", 2, r"t\.jsonl", files={"t.jsonl": lambda fx: fx.text("tiny.sim.jsonl")})

# ---- validate ----------------------------------------------------------------------------------
g = "validate"
add(g, "no_profile", f"validate {TINY} --disk d", 2, r"--profile", dirs=("d",))
add(g, "profile_missing", f"validate {TINY} --profile nope.yaml --disk d", 1, r"nope\.yaml", dirs=("d",))
add(g, "no_disk", f"validate {TINY} --data {{S}}/data/corpus/kjv-genesis.txt --profile {{S}}/tests/cli/data/cpu-host-1disk.profile.yaml", 2, r"--disk")

# ---- probes ------------------------------------------------------------------------------------
g = "probe"
add(g, "disk_zero_reps", "probe disk --dir d --reps 0", 2, r"probe disk: error: usage: --reps: '0' is below 1 \(an integer from 1 to 1000000\)", dirs=("d",))
add(g, "disk_negative_duration", "probe disk --dir d --duration -1", 2, r"--duration: '-1' is below 0\.001 \(a number from 0\.001 to 86400\)", dirs=("d",))
add(g, "disk_missing_dir", "probe disk --dir nodir", 1, r"nodir")
add(g, "disk_bad_sizes", "probe disk --dir d --sizes 4KiB,lots", 2, r"'lots' is not a size", dirs=("d",))
add(g, "disk_zero_size", "probe disk --dir d --sizes 0", 2, r"block size 0 is not a positive multiple of 4 KiB", dirs=("d",))
add(g, "disk_huge_size", "probe disk --dir d --sizes 1PiB", 2, r"larger than the largest request probed \(64 MiB\)", dirs=("d",))
add(g, "disk_huge_qd", "probe disk --dir d --qd 100000", 2, r"queue depth 100000 must be between 1 and 1024", dirs=("d",))
add(g, "disk_streams_not_a_pair", "probe disk --dir d --ops rw --streams 2", 2, r"--streams: '2' is not READERS:WRITERS", dirs=("d",))
add(g, "disk_streams_none", "probe disk --dir d --ops rw --streams 0:0", 2, r"streams 0:0: readers and writers must be >= 0, together 1..64", dirs=("d",))
add(g, "disk_unknown_op", "probe disk --dir d --ops erase", 2, r"erase", dirs=("d",))
add(g, "disk_huge_file", "probe disk --dir d --file-size 1EiB", 2, r"'1EiB' has unit 'EiB'", dirs=("d",))
add(g, "disk_unknown_backend", "probe disk --dir d --backend floppy", 2, r"floppy", dirs=("d",))
add(g, "copy_zero_reps", "probe copy --reps 0", 2, r"probe copy: error: usage: --reps: '0' is below 1 \(an integer from 1 to 1000000\)")
add(g, "copy_bad_size", "probe copy --sizes -4KiB", 2, r"size '-4KiB' is negative")
add(g, "compute_bad_scenario", "probe compute nope.yaml", 1, r"nope\.yaml")
add(g, "optimizer_zero_elements", "probe optimizer --elements 0", 2, r"element count 0 must be positive")
add(g, "memory_huge", "probe memory --bytes 1EiB", 2, r"'1EiB' has unit 'EiB'")
add(g, "all_no_out", "probe all --dir d", 2, r"probe all: error: usage: --out is required", dirs=("d",))
add(g, "all_out_is_a_file", "probe all --dir d -o f", 2, r"-o 'f' is a file, not a directory", dirs=("d",), files={"f": "x\n"})
add(g, "collective_zero_reps", "probe collective --reps 0", 2, r"probe collective: error: usage: --reps: '0' is below 1 \(an integer from 1 to 1000000\)")
add(g, "collective_unknown_backend", "probe collective --backend carrier-pigeon", 2, r"carrier-pigeon")
add(g, "collective_tiny_size", "probe collective --sizes 1", 2, r"size 1 B is below one fp32 element per rank")

# ---- checkpoints -------------------------------------------------------------------------------
g = "checkpoint"
add(g, "save_name_escapes", "checkpoint save --dir d --name ../../x --preset tiny", 2, r"name", dirs=("d",))
add(g, "save_name_non_utf8", b"checkpoint save --dir d --name \xff --preset tiny".decode("latin-1"), 2, r"name", dirs=("d",))
add(g, "save_zero_ranks", "checkpoint save --dir d --ranks 0 --preset tiny", 2, r"--ranks", dirs=("d",))
add(g, "save_huge_ranks", "checkpoint save --dir d --ranks 100000000 --preset tiny", 2, r"--ranks", dirs=("d",))
add(g, "save_unknown_preset", "checkpoint save --dir d --preset llama9", 1, r"llama9", dirs=("d",))
add(g, "save_unknown_strategy", "checkpoint save --dir d --strategy zip --preset tiny", 2, r"zip", dirs=("d",))
add(g, "save_zero_qd", "checkpoint save --dir d --qd 0 --preset tiny", 2, r"--qd: '0' is below 1 \(an integer from 1 to 4096\)", dirs=("d",))
add(g, "save_tiny_staging", "checkpoint save --dir d --staging 1 --preset tiny", 2, r"--staging 1\.00 B must be between 4 KiB and 1 GiB", dirs=("d",))
add(g, "save_negative_counts", "checkpoint save --dir d --small-count -1", 2, r"count", dirs=("d",))
add(g, "load_nothing", "checkpoint load --dir d", 1, r"checkpoint 'ckpt': no manifest 'd/ckpt\.manifest\.json'", dirs=("d",))
add(g, "load_manifest_not_json", "checkpoint load --dir d --name ck", 1, r"checkpoint manifest 'd/ck\.manifest\.json': not a tierflow\.checkpoint/1 document",
    files={"d/ck.manifest.json": "{not json"})
bench_dirs = ("d",)
add(g, "bench_zero_reps", "checkpoint bench --dir d --reps 0", 2, r"--reps: '0' is below 1 \(an integer from 1 to 1000000\)", dirs=bench_dirs)
add(g, "bench_uncoalesced_direct_unaligned", "checkpoint bench --dir d --no-coalesce --align 64", 2,
    r"--no-coalesce with O_DIRECT .* --align 64 must be a multiple of 4 KiB \(or add --buffered\)", dirs=bench_dirs)
add(g, "save_zero_align", "checkpoint save --dir d --align 0 --preset tiny", 2, r"--align 0 must be between 1 B and 1 GiB", dirs=("d",))
add(g, "save_preset_and_model", "checkpoint save --dir d --preset tiny --model m.yaml", 2, r"give --preset or --model, not both",
    dirs=("d",), files={"m.yaml": "preset: tiny\n"})
add(g, "tensors_model_missing", "checkpoint tensors --model nothere.yaml", 1, r"model file 'nothere\.yaml'")
add(g, "tensors_model_bad_key", "checkpoint tensors --model m.yaml", 2, r"model file 'm\.yaml': model\.hidden_size: unknown key",
    files={"m.yaml": "preset: tiny\nhidden_size: 5\n"})

# ---- DeepSpeed configs ---------------------------------------------------------------------------
g = "deepspeed"
DS = "{S}/tests/cli/data/deepspeed/"
IMPORT = "deepspeed import c.json --model tiny --hardware cpu-host -o o.yaml"
add(g, "not_json", f"deepspeed import {DS}not_json.json --model tiny --hardware cpu-host -o o.yaml", 2, r"not_json\.json: not valid JSON at byte 35")
add(g, "stage_2", f"deepspeed import {DS}stage2.json --model tiny --hardware cpu-host -o o.yaml", 2, r"stage.*3")
add(g, "unknown_device", f"deepspeed import {DS}unknown_device.json --model tiny --hardware cpu-host -o o.yaml", 2, r"device")
add(g, "negative_size", f"deepspeed import {DS}negative_size.json --model tiny --hardware cpu-host -o o.yaml", 2, r"offload_param\.buffer_size: '-5' is below 1 \(an integer of at least 1\)")
add(g, "a_list", IMPORT, 2, r"c\.json: expected a JSON object", files={"c.json": "[1, 2]"})
add(g, "duplicate_key", IMPORT, 2, r"key 'stage' appears twice", files={"c.json": '{"zero_optimization": {"stage": 3, "stage": 2}}'})
add(g, "fp32", IMPORT, 2, r"neither bf16\.enabled nor fp16\.enabled", files={"c.json": '{"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}}}'})
add(g, "batch_not_dividing", IMPORT, 2, r"train_batch_size",
    files={"c.json": '{"train_batch_size": 3, "train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": true}, '
                     '"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}}}'})
add(g, "unknown_model", f"deepspeed import {DS}quickstart.ds_config.json --model llama9 --hardware cpu-host -o o.yaml", 2, r"llama9")
add(g, "export_other_policy", "deepspeed export s.yaml -o c.json", 2, r"policy 'ioc' has no DeepSpeed config",
    files={"s.yaml": scenario(policy="policy: {name: ioc}")})
add(g, "export_onto_input", "deepspeed export s.yaml -o s.yaml", 2, r"s\.yaml", files={"s.yaml": GOOD})
HF = f"deepspeed import {DS}hf_auto.ds_config.json --model tiny --hardware cpu-host -o o.yaml"
add(g, "hf_unknown_field", HF + " --hf batch=4", 2, r"--hf batch: not a TrainingArguments field the DeepSpeed integration reads \(known: ")
add(g, "hf_not_name_value", HF + " --hf lots", 2, r"--hf lots: expected NAME=VALUE")
add(g, "hf_not_a_number", HF + " --hf learning_rate=fast", 2, r"--hf learning_rate=fast: expected a number")
add(g, "hf_contradicts_the_config", HF + " --hf gradient_accumulation_steps=8", 2,
    r"gradient_accumulation_steps is 4 in the config and --hf gradient_accumulation_steps=8: the Trainer refuses")
add(g, "export_base_missing", "deepspeed export s.yaml --base nope.json -o c.json", 1, r"nope\.json", files={"s.yaml": GOOD})
add(g, "export_base_stage_2", f"deepspeed export s.yaml --base {DS}stage2.json -o c.json", 2, r"stage2\.json: zero_optimization\.stage 2",
    files={"s.yaml": GOOD})
add(g, "export_onto_the_base", "deepspeed export s.yaml --base c.json -o c.json", 2, r"c\.json", files={"s.yaml": GOOD, "c.json": "{}"})

# ---- model and hardware --------------------------------------------------------------------------
g = "model"
add(g, "unknown_preset", "model llama9", 1, r"llama9")
add(g, "file_missing", "model --file nope.yaml", 1, r"nope\.yaml")
add(g, "file_bad", "model --file m.yaml", 2, r"model file 'm\.yaml': model\.hidden: '-1' is below 1 \(an integer from 1 to 1048576\)", files={"m.yaml": "name: m\nhidden: -1\n"})
add(g, "seq_negative", "model tiny --seq -5", 2, r"--seq: '-5' is below 0 \(an integer from 0 to 16777216\)")
add(g, "preset_and_file", "model tiny --file m.yaml", 2, r"give one of a preset, --file and --model-dir", files={"m.yaml": "name: m\n"})
add(g, "hardware_unknown", "hardware dgx", 1, r"dgx")
add(g, "hardware_file_bad", "hardware --file h.yaml", 2, r"hardware file 'h\.yaml': hardware\.node\.gpu\.hbm: size '-1 GiB' is negative", files={"h.yaml": "preset: cpu-host\nnode: {gpu: {hbm: -1 GiB}}\n"})
add(g, "hardware_json_and_yaml", "hardware cpu-host --json --yaml", 2, r"not both")

# ---- Hugging Face model directories in (--model-dir, model.hf_dir) and out (--save-model) ------
g = "hf"
HF_CONFIG = dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=32, intermediate_size=64,
                 num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                 max_position_embeddings=128, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                 hidden_act="silu", torch_dtype="bfloat16")


def hf_tensors(c):
    """(name, shape) of a Llama's tensors, as models::Layers() lists them."""
    h, f, d = c["hidden_size"], c["intermediate_size"], c["hidden_size"] // c["num_attention_heads"]
    kv = c["num_key_value_heads"] * d
    out = [("model.embed_tokens.weight", [c["vocab_size"], h])]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", [h]), (p + "self_attn.q_proj.weight", [h, h]),
                (p + "self_attn.k_proj.weight", [kv, h]), (p + "self_attn.v_proj.weight", [kv, h]),
                (p + "self_attn.o_proj.weight", [h, h]), (p + "post_attention_layernorm.weight", [h]),
                (p + "mlp.gate_proj.weight", [f, h]), (p + "mlp.up_proj.weight", [f, h]), (p + "mlp.down_proj.weight", [h, f])]
    out.append(("model.norm.weight", [h]))
    if not c["tie_word_embeddings"]:
        out.append(("lm_head.weight", [c["vocab_size"], h]))
    return out


def hf_safetensors(tensors):
    """A BF16 safetensors file of zeros for (name, shape) pairs."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in tensors:
        n = 2
        for dim in shape:
            n *= dim
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    return safetensors(header, bytes(offset))


def hf_dir(config=None, weights=True, **extra):
    """Files of a Hugging Face directory m/: config.json (HF_CONFIG updated with `config`), and its
    weights in model.safetensors unless weights is False; extra: more files by name."""
    c = dict(HF_CONFIG, **(config or {}))
    files = {"m/config.json": json.dumps(c)}
    if weights:
        files["m/model.safetensors"] = hf_safetensors(hf_tensors(c))
    files.update(extra)
    return files


RUN_HF = f"run {TINY} --model-dir m --disk d -n 1 {DATA}"
add(g, "dir_missing", "model --model-dir nope", 1, r"Hugging Face model directory 'nope': not a directory")
add(g, "config_missing", f"plan {TINY} --model-dir m -o p.json", 1, r"model\.hf_dir: 'm/config\.json': cannot open it", dirs=("m",))
add(g, "config_not_json", "model --model-dir m", 2, r"'m/config\.json': not valid JSON", files={"m/config.json": "{model_type: llama"})
add(g, "model_type_unsupported", f"sim {TINY} --model-dir m", 2, r"'model_type' 'gemma' is not supported \(llama, mistral and qwen2 are",
    files=hf_dir({"model_type": "gemma"}))
add(g, "rope_type_unsupported", f"tune {TINY} --model-dir m", 2, r"'rope_scaling' type 'yarn' is not supported \(default, linear and llama3 are\)",
    files=hf_dir({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}))
add(g, "llama3_rope_incomplete", "model --model-dir m", 2, r"'rope_parameters\.original_max_position_embeddings' is missing \(rope type llama3\)",
    files=hf_dir({"rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                                      "high_freq_factor": 4.0}}))
add(g, "biases_unsupported", "model --model-dir m", 2, r"'attention_bias' true is not supported \(the math has biases on q, k and v only",
    files=hf_dir({"attention_bias": True}))
add(g, "head_dim_of_its_own", "model --model-dir m", 2, r"'head_dim' 16 is not hidden_size / num_attention_heads", files=hf_dir({"head_dim": 16}))
add(g, "model_dir_and_schedule", "run {fx}/tiny.schedule.json --model-dir m --disk d", 2, r"--model-dir: .* is a schedule, already planned for its model",
    files=hf_dir(), dirs=("d",))
add(g, "weights_missing", RUN_HF, 1, r"'m': neither model\.safetensors nor model\.safetensors\.index\.json is there",
    files=hf_dir(weights=False), dirs=("d",))
add(g, "shapes_disagree_with_config", RUN_HF, 2,
    r"safetensors 'm/model\.safetensors' tensor 'model\.layers\.0\.mlp\.gate_proj\.weight': shape \[128,32\], expected \[64,32\]",
    files=hf_dir(**{"m/model.safetensors": hf_safetensors(hf_tensors(dict(HF_CONFIG, intermediate_size=128)))}), dirs=("d",))
add(g, "header_truncated", RUN_HF, 1, r"safetensors 'm/model\.safetensors'",
    files=hf_dir(**{"m/model.safetensors": struct.pack("<Q", 4096) + b'{"model.embed'}), dirs=("d",))
SHARDED_INDEX = json.dumps({"metadata": {"total_size": 0},
                            "weight_map": {name: "model-00001-of-00002.safetensors" if i < 4 else "model-00002-of-00002.safetensors"
                                           for i, (name, _) in enumerate(hf_tensors(HF_CONFIG))}})
add(g, "shard_missing", RUN_HF, 1, r"'m/model\.safetensors\.index\.json': shard 'model-00002-of-00002\.safetensors' \(of '.*'\) is missing",
    files=hf_dir(weights=False, **{"m/model.safetensors.index.json": SHARDED_INDEX,
                                   "m/model-00001-of-00002.safetensors": hf_safetensors(hf_tensors(HF_CONFIG)[:4])}), dirs=("d",))
add(g, "shard_outside_the_directory", RUN_HF, 2, r"names '\.\./w\.safetensors', not a file of the directory",
    files=hf_dir(weights=False, **{"m/model.safetensors.index.json": json.dumps(
        {"weight_map": {name: "../w.safetensors" for name, _ in hf_tensors(HF_CONFIG)}})}), dirs=("d",))
add(g, "save_over_the_input", RUN_HF + " --save-model m", 2, r"--save-model 'm' overlaps model\.hf_dir \(the input model's directory\) 'm': a directory replaced as a whole", files=hf_dir(), dirs=("d",))
add(g, "save_inside_the_input", RUN_HF + " --save-model m/out", 2, r"--save-model 'm/out' overlaps model\.hf_dir \(the input model's directory\) 'm'", files=hf_dir(), dirs=("d",))
add(g, "save_inside_a_disk", RUN_HF + " --save-model d/out", 2, r"--save-model 'd/out' overlaps --disk 'd': a directory replaced as a whole", files=hf_dir(), dirs=("d",))
add(g, "save_over_other_files", RUN_HF + " --save-model o", 1,
    r"--save-model: save model 'o': the directory holds files but no config\.json, so it is not a model a save may replace",
    files=hf_dir(**{"o/notes.txt": "mine\n"}), dirs=("d",))
add(g, "save_dtype_unknown", RUN_HF + " --save-model out --save-dtype fp8", 2, r"--save-dtype", files=hf_dir(), dirs=("d",))
add(g, "save_dtype_without_save", RUN_HF + " --save-dtype fp32", 2, r"--save-dtype and --save-every need --save-model DIR", files=hf_dir(), dirs=("d",))
add(g, "window_shorter_than_the_sequence", RUN_HF, 2,
    r"training\.sequence_length 128 is above the model's sliding_window 64: sliding-window attention is not implemented",
    files=hf_dir({"model_type": "mistral", "architectures": ["MistralForCausalLM"], "sliding_window": 64}), dirs=("d",))
add(g, "eval_every_negative", RUN_HF + " --eval-every -2", 2, r"--eval-every: '-2' is below 0 \(an integer from 0 to 1000000000\)", files=hf_dir(), dirs=("d",))
add(g, "eval_corpus_too_small", f"run {TINY} --disk d -n 1 --eval-every 1 --data c.txt", 2,
    r"--eval-every: the corpus: held-out split: 200 tokens, fewer than the 258 that a held-out batch and a training batch of 1 x 129 tokens need",
    files={"c.txt": "x" * 200}, dirs=("d",))

# ---- paths: every output flag against every input and every directory the command writes -----
g = "paths"
INPUT = r"is the input"
INSIDE = r"whose files this command writes: write it outside that directory"
ONE_FILE = r"are one file: each output needs its own"
ONE_DIR = r"are one directory: each needs its own"
SIM_RECORDS = lambda fx: fx.text("tiny.sim.jsonl")
for verb, flags in {"sim": ("--records", "--trace"), "run": ("--records", "--trace")}.items():
    extra = f" --disk d {DATA}" if verb == "run" else ""
    for flag in flags:
        add(g, f"{verb}_{flag[2:]}_onto_the_input", f"{verb} s.yaml {flag} s.yaml{extra}", 2, rf"{flag} 's\.yaml' {INPUT} 's\.yaml'",
            files={"s.yaml": GOOD}, dirs=("d",))
        add(g, f"{verb}_{flag[2:]}_through_a_link_to_the_input", f"{verb} s.yaml {flag} l.yaml{extra}", 2, rf"{flag} 'l\.yaml' {INPUT} 's\.yaml'",
            files={"s.yaml": GOOD}, dirs=("d",), setup=lambda d, fx: os.symlink("s.yaml", os.path.join(d, "l.yaml")))
    add(g, f"{verb}_records_and_trace_one_file", f"{verb} {TINY} --records o.json --trace ./o.json{extra}", 2, ONE_FILE, dirs=("d",))
add(g, "sim_records_onto_the_profile", f"sim {TINY} --profile p.yaml --records p.yaml", 2, rf"--records 'p\.yaml' {INPUT} --profile 'p\.yaml'",
    files={"p.yaml": "nodes: 1\n"})
# The data loss of issue 60: the records over the run's own store file, and into its checkpoint.
add(g, "run_records_onto_its_store_file", f"run {TINY} --disk d --records d/tierflow-run.store {DATA}", 2,
    rf"--records 'd/tierflow-run\.store' is inside --disk 'd', {INSIDE}", files={"d/tierflow-run.store": "the training state\n"})
add(g, "run_trace_into_the_checkpoint", f"run {TINY} --disk d --checkpoint c --trace c/t.json {DATA}", 2,
    rf"--trace 'c/t\.json' is inside --checkpoint 'c', {INSIDE}", dirs=("d", "c"))
add(g, "run_records_into_the_disk_root", f"run {TINY} --disk-root r --records r/nvme0/x.jsonl {DATA}", 2,
    rf"--records 'r/nvme0/x\.jsonl' is inside --disk-root 'r', {INSIDE}", dirs=("r",))
add(g, "run_records_onto_the_data", f"run {TINY} --disk d --data c.txt --records c.txt", 2, rf"--records 'c\.txt' {INPUT} --data 'c\.txt'",
    files={"c.txt": "text " * 400}, dirs=("d",))
add(g, "run_trace_onto_init", f"run {TINY} --disk d --init w.safetensors --trace w.safetensors {DATA}", 2,
    rf"--trace 'w\.safetensors' {INPUT} --init 'w\.safetensors'", files={"w.safetensors": "x"}, dirs=("d",))
add(g, "run_checkpoint_is_the_disk", f"run {TINY} --disk d --checkpoint d {DATA}", 2, rf"--disk 'd' and --checkpoint 'd' {ONE_DIR}", dirs=("d",))
add(g, "run_checkpoint_is_the_disk_by_a_link", f"run {TINY} --disk d --checkpoint l {DATA}", 2, rf"--disk 'd' and --checkpoint 'l' {ONE_DIR}",
    dirs=("d",), setup=lambda d, fx: os.symlink("d", os.path.join(d, "l")))
add(g, "run_save_model_is_the_checkpoint", f"run {TINY} --disk d --checkpoint c --save-model c {DATA}", 2,
    r"--save-model 'c' overlaps --checkpoint 'c'", dirs=("d", "c"))
add(g, "run_save_model_holds_the_disk", f"run {TINY} --disk m/d --save-model m {DATA}", 2, r"--save-model 'm' overlaps --disk 'm/d'", dirs=("m/d",))
add(g, "validate_trace_onto_the_input", "validate s.yaml --profile {S}/tests/cli/data/cpu-host-1disk.profile.yaml --disk d --trace s.yaml",
    2, rf"--trace 's\.yaml' {INPUT} 's\.yaml'", files={"s.yaml": GOOD}, dirs=("d",))
add(g, "validate_records_dir_is_the_disk", "validate {S}/scenarios/tiny-cpu.yaml --profile {S}/tests/cli/data/cpu-host-1disk.profile.yaml "
    "--disk d --records-dir d", 2, rf"--records-dir 'd' and --disk 'd' {ONE_DIR}", dirs=("d",))
add(g, "plan_onto_the_scenario_by_a_link", "plan s.yaml -o l.yaml", 2, rf"-o 'l\.yaml' {INPUT} 's\.yaml'", files={"s.yaml": GOOD},
    setup=lambda d, fx: os.symlink("s.yaml", os.path.join(d, "l.yaml")))
add(g, "tune_onto_the_scenario_through_dotdot", "tune s.yaml -o x/../s.yaml", 2, rf"-o 'x/\.\./s\.yaml' {INPUT} 's\.yaml'",
    files={"s.yaml": GOOD}, dirs=("x",))
add(g, "sweep_plot_onto_the_sweep", "sweep w.yaml -o o.csv --plot w.yaml", 2, rf"--plot 'w\.yaml' {INPUT} 'w\.yaml'", files={"w.yaml": SWEEP})
add(g, "sweep_plot_and_output_one_file", "sweep w.yaml -o o.csv --plot o.csv", 2, ONE_FILE, files={"w.yaml": SWEEP})
add(g, "sweep_merge_onto_a_shard", "sweep merge a.csv b.csv -o b.csv", 2, rf"-o 'b\.csv' {INPUT} 'b\.csv'",
    files={"a.csv": "x\n", "b.csv": "x\n"})
add(g, "calibrate_onto_the_base", "calibrate {fx}/tiny.sim.jsonl --base b.yaml -o b.yaml", 2, rf"-o 'b\.yaml' {INPUT} --base 'b\.yaml'",
    files={"b.yaml": "nodes: 1\n"})
add(g, "calibrate_onto_a_trace", "calibrate t.jsonl -o t.jsonl", 2, rf"-o 't\.jsonl' {INPUT} 't\.jsonl'", files={"t.jsonl": SIM_RECORDS})
add(g, "deepspeed_import_onto_the_model_file", f"deepspeed import {DS}negative_size.json --model m.yaml --hardware cpu-host -o m.yaml", 2,
    rf"-o 'm\.yaml' {INPUT} --model 'm\.yaml'", files={"m.yaml": "preset: tiny\n"})
add(g, "deepspeed_export_onto_the_base", f"deepspeed export {TINY} --base b.json -o b.json", 2, rf"-o 'b\.json' {INPUT} --base 'b\.json'",
    files={"b.json": "{}"})
add(g, "trace_chrome_onto_the_schedule", "trace chrome t.jsonl --schedule s.json -o s.json", 2, rf"-o 's\.json' {INPUT} --schedule 's\.json'",
    files={"t.jsonl": SIM_RECORDS, "s.json": lambda fx: fx.text("tiny.schedule.json")})
add(g, "probe_disk_dir_twice", "probe disk --dir d --dir ./d", 2, rf"--dir 'd' and --dir '\./d' {ONE_DIR}", dirs=("d",))
add(g, "probe_disk_trace_into_the_dir", "probe disk --dir d --trace d/t.jsonl", 2, rf"--trace 'd/t\.jsonl' is inside --dir 'd', {INSIDE}", dirs=("d",))
add(g, "probe_all_out_is_a_dir", "probe all --dir d -o d", 2, rf"-o 'd' and --dir 'd' {ONE_DIR}", dirs=("d",))
add(g, "probe_compute_trace_onto_the_scenario", "probe compute s.yaml --trace s.yaml", 2, rf"--trace 's\.yaml' {INPUT} 's\.yaml'",
    files={"s.yaml": GOOD})
add(g, "checkpoint_save_dir_twice", "checkpoint save --dir d --dir d/ --preset tiny", 2, rf"--dir 'd' and --dir 'd/' {ONE_DIR}", dirs=("d",))


# ---- numbers: every numeric field and flag at 0, -1, 2^31, 2^63, 2^64, 1e308 and NaN ------------
# Each value past a field's range gets core's one rule (ParseInteger, ParseReal): the field, at most
# 40 characters of the value, and the range. A value in the range is either accepted (skipped
# here: plan or the verb would run) or refused by a rule of its own that names the field.
g = "numbers"
VALUES = {"0": 0, "-1": -1, "2147483648": 2**31, "9223372036854775808": 2**63, "18446744073709551616": 2**64, "1e308": 1e308, "nan": None}
I64 = 2**63 - 1
I32 = 2**31 - 1
# field: (integer?, lo, hi, values in range that the field accepts)
FIELDS = {
    "model.hidden": (True, 1, 2**20, ()), "model.ffn": (True, 1, 2**22, ()), "model.layers": (True, 1, 10000, ()),
    "model.heads": (True, 1, 2**16, ()), "model.kv_heads": (True, 1, 2**16, ()), "model.vocab": (True, 1, 2**24, ()),
    "model.max_seq": (True, 1, 2**24, ()), "model.sliding_window": (True, 0, I64, ("0", "2147483648")),
    "training.micro_batch_size": (True, 1, 2**20, ()), "training.sequence_length": (True, 1, 2**24, ()),
    "training.gradient_accumulation_steps": (True, 1, 1024, ()), "training.data_parallel": (True, 0, 2**20, ("0",)),
    "training.seed": (True, 0, 2**53, ("0", "2147483648")),
    "training.lr_schedule.warmup_steps": (True, 0, 2**40, ("0", "2147483648")),
    "training.lr_schedule.total_steps": (True, 0, 2**40, ("0", "2147483648")),
    "training.optimizer.lr": (False, 0, 1000, ()), "training.optimizer.eps": (False, 0, 1, ()),
    "training.optimizer.weight_decay": (False, 0, 1, ("0",)), "training.gradient_clipping": (False, 0, None, ("0", "2147483648", "9223372036854775808", "18446744073709551616", "1e308")),
    "training.lr_schedule.min_lr_ratio": (False, 0, 1, ("0",)),
    "hardware.nodes": (True, 0, I32, ()), "hardware.node.gpu_count": (True, 0, I32, ()), "hardware.node.cpu.cores": (True, 0, I32, ()),
    "policy.buffer_count": (True, 1, 65536, ()), "policy.buffer_size": (True, 1, 2**40, ("2147483648",)),
    "policy.optimizer_buffer_count": (True, 1, 65536, ()), "policy.sub_group_size": (True, 1, 2**40, ("2147483648",)),
    "policy.queue_depth": (True, 1, 4096, ()), "policy.param_persistence_threshold": (True, 0, 2**40, ("0", "2147483648")),
    "policy.cpu_threads": (True, 0, 1024, ("0",)), "policy.max_in_cpu": (True, 0, 2**50, ("0", "2147483648")),
    "policy.reduce_bucket_size": (True, 1, 2**50, ("2147483648",)), "policy.max_live_parameters": (True, 1, 2**50, ("2147483648",)),
    "policy.max_reuse_distance": (True, 0, 2**50, ("0", "2147483648")),
}
# flag: (the command before it, integer?, lo, hi, values in range it accepts, files and dirs the case needs)
FLAGS = {
    "run --iterations": (f"run {TINY} --disk d {DATA}", True, 1, 10**9, ()), "run --threads": (f"run {TINY} --disk d {DATA} -n 1", True, 0, 1024, ("0",)),
    "run --lr": (f"run {TINY} --disk d {DATA} -n 1", False, 0, 1000, ("0",)),
    "run --checkpoint-every": (f"run {TINY} --disk d --checkpoint c {DATA} -n 1", True, 0, 10**9, ("0", "2147483648")),
    "run --eval-every": (f"run {TINY} --disk d {DATA} -n 1", True, 0, 10**9, ("0",)),
    "sim --iterations": (f"sim {TINY}", True, 1, I64, ()),
    "tune --iterations": (f"tune {TINY} --rounds 1", True, 1, 1000, ()), "tune --jobs": (f"tune {TINY} --rounds 1", True, 0, 1024, ("0",)),
    "tune --rounds": (f"tune {TINY}", True, 1, 1000, ()),
    "sweep --jobs": ("sweep w.yaml -o o.csv", True, 0, 1024, ("0",)), "sweep --top": ("sweep w.yaml -o o.csv", True, 0, I32, ("0",)),
    "model --seq": ("model tiny", True, 0, 2**24, ("0",)),
    "checkpoint save --ranks": ("checkpoint save --dir d --preset tiny", True, 1, 65536, ()),
    "checkpoint save --qd": ("checkpoint save --dir d --preset tiny", True, 1, 4096, ()),
    "probe disk --reps": ("probe disk --dir d", True, 1, 10**6, ()), "probe disk --duration": ("probe disk --dir d", False, 0.001, 86400, ()),
    "probe disk --passes": ("probe disk --dir d", True, 1, 1000, ()),
    "trace compare --worst": ("trace compare {fx}/tiny.sim.jsonl {fx}/tiny.sim.jsonl", True, 0, I32, ("0",)),
    "validate --repeats": ("validate {S}/scenarios/tiny-cpu.yaml --profile {S}/tests/cli/data/cpu-host-1disk.profile.yaml --disk d", True, 1, 1000, ()),
}


def number_rule(what, text, integer, lo, hi):
    """The error core's one rule gives for `text` in [lo, hi], or None when it is in the range."""
    kind = "an integer" if integer else "a number"
    big = lambda v: str(v) if integer or v != int(v) or abs(v) >= 1e15 else str(int(v))
    rng = (f"an integer of at least {lo}" if hi == I64 else f"an integer from {lo} to {hi}") if integer else \
          (f"a number of at least {big(lo)}" if hi is None else f"a number from {big(lo)} to {big(hi)}")
    value = VALUES[text]
    if value is None:
        return rf"{what}: 'nan' is not {kind} \({rng}\)"
    if hi is not None and value > hi:
        return rf"{what}: '{text}' is above {hi if integer else big(hi)} \({rng}\)"
    if value < lo:
        return rf"{what}: '{text}' is below {lo if integer else big(lo)} \({rng}\)"
    return None


for field, (integer, lo, hi, accepted) in FIELDS.items():
    for text in VALUES:
        if text in accepted:
            continue
        rule = number_rule(field, text, integer, lo, hi)
        key = field.split(".")[-1]
        add(g, f"{field}={text}", f"plan {TINY} --set {field}={text} -o p.json", 2, rule if rule else rf"{key}", timeout=30)
for flag, (command, integer, lo, hi, accepted) in FLAGS.items():
    name = flag.split()[-1]
    for text in VALUES:
        if text in accepted:
            continue
        rule = number_rule(name, text, integer, lo, hi)
        add(g, f"{flag.replace(' ', '_')}={text}", f"{command} {name} {text}", (2,) if rule else (1, 2),
            (r"error: usage: " + rule) if rule else rf"{name[2:]}", dirs=("d", "c"), files={"w.yaml": SWEEP}, timeout=60)
