#include "tierflow/core/schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>

#include "test_schedules.h"

namespace tierflow {
namespace {

using testing::Builder;

std::string ErrorOf(const std::string& json) {
  auto s = ScheduleFromJson(json);
  return s.ok() ? std::string("OK") : s.status().ToString();
}

const char* kValid = R"({
  "format": "tierflow.schedule/1", "name": "pipe", "iteration_window": 2, "meta": {"policy": "test"},
  "devices": [{"name": "host", "kind": "host"}, {"name": "nvme0", "kind": "nvme"}],
  "resources": [{"name": "nvme0.read", "device": "nvme0", "concurrency": 2},
                {"name": "gpu0.compute", "device": "host", "concurrency": 1}],
  "pools": [{"name": "host.pinned", "device": "host", "capacity_bytes": 100}],
  "buffers": [{"name": "b0", "pool": "host.pinned", "size_bytes": 60}],
  "tensors": [{"name": "w", "kind": "param16", "dtype": "bf16", "shape": [2, 3], "device": "nvme0", "size_bytes": 12}],
  "tasks": [
    {"id": "read", "op": "read", "resource": "nvme0.read", "bytes": 12, "tensors": ["w"], "allocs": ["b0"], "block_bytes": 4096, "queue_depth": 8},
    {"id": "fwd", "op": "compute", "resource": "gpu0.compute", "kernel": "fwd", "flops": 1.5e9, "uses": ["b0"], "deps": ["read"], "phase": "forward", "layer": 0},
    {"id": "done", "op": "free", "frees": ["b0"], "deps": ["fwd"], "carried": [{"task": "fwd", "distance": 1}]}
  ]
})";

TEST(ScheduleFile, ParsesAValidSchedule) {
  auto s = ScheduleFromJson(kValid);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->tasks().size(), 3u);
  const TaskSpec& fwd = s->tasks()[s->FindTask("fwd")];
  EXPECT_EQ(fwd.op, Op::kCompute);
  EXPECT_EQ(fwd.deps, std::vector<int32_t>{s->FindTask("read")});
  EXPECT_DOUBLE_EQ(fwd.flops, 1.5e9);
  EXPECT_EQ(fwd.phase, Phase::kForward);
  EXPECT_EQ(s->tasks()[2].carried[0].distance, 1);
  EXPECT_EQ(s->resources()[0].concurrency, 2);
}

TEST(ScheduleFile, RoundTripsExactly) {
  auto s = ScheduleFromJson(kValid);
  ASSERT_TRUE(s.ok());
  const std::string once = ScheduleToJson(*s);
  auto back = ScheduleFromJson(once);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(*back == *s);
  EXPECT_EQ(ScheduleToJson(*back), once);
}

// Names are written as JSON strings whatever bytes they hold: each byte that must be escaped
// (or checked as UTF-8), at every position of a name longer than the writer's eight-byte test,
// gives what nlohmann writes for it, and reads back as it was.
TEST(ScheduleFile, EscapesEveryByteThatNeedsIt) {
  auto s = ScheduleFromJson(kValid);
  ASSERT_TRUE(s.ok());
  const std::string plain = "abcdefghijklmnopqrstu";  // 21 bytes: two words and a tail
  for (const std::string& odd : std::vector<std::string>{"\"", "\\", "\n", std::string(1, '\x01'), std::string(1, '\x1f'), std::string(1, '\x7f'), "\xc3\xa9"}) {
    for (size_t at = 0; at <= plain.size(); ++at) {
      Schedule named = *s;
      named.name = plain.substr(0, at) + odd + plain.substr(at);
      const std::string json = ScheduleToJson(named);
      EXPECT_NE(json.find("\"name\": " + nlohmann::json(named.name).dump() + ","), std::string::npos) << json.substr(0, 80);
      auto back = ScheduleFromJson(json);
      ASSERT_TRUE(back.ok()) << back.status().ToString();
      EXPECT_EQ(back->name, named.name);
    }
  }
}

// The typed sections are JSON objects kept as they are (models/ reads them): written back as
// read, equal as JSON values, and anything but an object refused.
TEST(ScheduleFile, TypedSectionsRoundTripAsObjects) {
  std::string json = kValid;
  const std::string anchor = R"("meta": {"policy": "test"},)";
  json.replace(json.find(anchor), anchor.size(),
               anchor + R"( "model": {"preset": "tiny", "layers": 2}, "hardware": {"preset": "cpu-host"}, "training": {"dtype": "bf16"},)");
  auto s = ScheduleFromJson(json);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->sections.model, R"({"preset":"tiny","layers":2})");
  EXPECT_EQ(s->sections.hardware, R"({"preset":"cpu-host"})");
  EXPECT_EQ(s->sections.training, R"({"dtype":"bf16"})");
  const std::string once = ScheduleToJson(*s);
  EXPECT_NE(once.find(R"(  "model": {"preset":"tiny","layers":2},)"), std::string::npos) << once;
  auto back = ScheduleFromJson(once);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(*back == *s);
  EXPECT_EQ(ScheduleToJson(*back), once);
  Schedule spaced = *s;
  spaced.sections.model = R"({ "layers": 2, "preset": "tiny" })";
  EXPECT_TRUE(spaced == *s) << "the same object";
  spaced.sections.model = R"({"preset": "tiny", "layers": 3})";
  EXPECT_FALSE(spaced == *s);
  json.replace(json.find(R"("training": {"dtype": "bf16"})"), 29, R"("training": "bf16")");
  EXPECT_EQ(ErrorOf(json), "invalid argument: schedule: key 'training' must be an object (docs/schedule-format.md)");
}

// Micro-steps (gradient accumulation) are a task field, absent at 0; the schedule has one more
// than the largest.
TEST(ScheduleFile, MicroStepsRoundTripAndCount) {
  auto s = ScheduleFromJson(kValid);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->MicroSteps(), 1);
  std::string json = kValid;
  json.replace(json.find(R"("layer": 0})"), 11, R"("layer": 0, "micro_step": 3})");
  auto with = ScheduleFromJson(json);
  ASSERT_TRUE(with.ok()) << with.status().ToString();
  EXPECT_EQ(with->tasks()[with->FindTask("fwd")].micro_step, 3);
  EXPECT_EQ(with->MicroSteps(), 4);
  EXPECT_NE(ScheduleToJson(*with).find(R"("micro_step":3)"), std::string::npos);
  EXPECT_EQ(ScheduleToJson(*s).find("micro_step"), std::string::npos);
  json.replace(json.find(R"("micro_step": 3)"), 15, R"("micro_step": -1)");
  EXPECT_EQ(ErrorOf(json), "invalid argument: task 'fwd': block_bytes, queue_depth, ranks and micro_step must be >= 0");
}

// A task's rank: round-trips, absent means every rank; a collective or barrier has none, and a
// rank's task names only tensors of its rank.
TEST(ScheduleFile, TaskRanksRoundTripAndAreChecked) {
  std::string json = kValid;
  json.replace(json.find(R"("layer": 0})"), 11, R"("layer": 0, "rank": 0})");
  auto with = ScheduleFromJson(json);
  ASSERT_TRUE(with.ok()) << with.status().ToString();
  EXPECT_EQ(with->tasks()[with->FindTask("fwd")].rank, 0);
  EXPECT_EQ(with->tasks()[with->FindTask("read")].rank, kEveryRank);
  EXPECT_NE(ScheduleToJson(*with).find(R"("rank":0)"), std::string::npos);
  auto again = ScheduleFromJson(ScheduleToJson(*with));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *with);

  std::string negative = kValid;
  negative.replace(negative.find(R"("layer": 0})"), 11, R"("layer": 0, "rank": -2})");
  EXPECT_EQ(ErrorOf(negative), "invalid argument: task 'fwd': rank must be >= 0 (or absent: every rank)");
  std::string barrier = kValid;
  barrier.replace(barrier.find(R"("op": "free")"), 12, R"("op": "barrier", "rank": 1)");
  EXPECT_EQ(ErrorOf(barrier), "invalid argument: task 'done': a barrier runs on every rank, so it has no rank");
  std::string other = kValid;  // tensor 'w' is rank 0's
  other.replace(other.find(R"("block_bytes": 4096)"), 19, R"("block_bytes": 4096, "rank": 1)");
  EXPECT_EQ(ErrorOf(other), "invalid argument: task 'read' runs on rank 1 but names tensor 'w' of rank 0");
}

TEST(ScheduleFile, RejectsMalformedFilesWithOneClearError) {
  // Where the text stops being JSON, and a key given twice (the parser would keep the last).
  EXPECT_EQ(ErrorOf("{"), "invalid argument: schedule: not valid JSON at byte 2: expected string literal");
  EXPECT_EQ(ErrorOf(std::string(kValid).substr(0, 40)).rfind("invalid argument: schedule: not valid JSON at byte 41", 0), 0u) << ErrorOf(std::string(kValid).substr(0, 40));
  EXPECT_EQ(ErrorOf(R"({"format": "tierflow.schedule/1", "name": "a", "meta": {"k": "1", "k": "2"}})"),
            "invalid argument: schedule: key 'k' appears twice in one object (the last would be used silently)");
  EXPECT_NE(ErrorOf(R"({"format": "other/9"})").find("expected 'tierflow.schedule/1'"), std::string::npos);
  std::string s = kValid;
  auto with = [&](const std::string& from, const std::string& to) {
    std::string t = s;
    auto pos = t.find(from);
    EXPECT_NE(pos, std::string::npos) << from;
    return ErrorOf(t.replace(pos, from.size(), to));
  };
  EXPECT_EQ(with(R"("deps": ["read"])", R"("deps": ["nope"])"),
            "invalid argument: task 'fwd': dep 'nope' does not exist");
  EXPECT_EQ(with(R"("kernel": "fwd")", R"("colour": "red")"),
            "invalid argument: task 'fwd': unknown key 'colour'");
  EXPECT_EQ(with(R"("bytes": 12, "tensors")", R"("bytes": "12", "tensors")"),
            "invalid argument: task 'read': key 'bytes' must be an integer");
  EXPECT_EQ(with(R"("bytes": 12, "tensors")", R"("bytes": -12, "tensors")"),
            "invalid argument: task 'read': bytes must be >= 0");
  EXPECT_EQ(with(R"("op": "read")", R"("op": "teleport")"), "invalid argument: task 'read': unknown op 'teleport'");
  // Kernels and state kinds are a fixed vocabulary (core/ops.h), checked when the file is read.
  EXPECT_EQ(with(R"("kernel": "fwd")", R"("kernel": "layer_fwd")"),
            "invalid argument: task 'fwd': unknown kernel 'layer_fwd' (fwd, bwd, adam, overflow_check_and_norm, fp32_to_bf16, bf16_to_fp32)");
  EXPECT_EQ(with(R"("kernel": "fwd")", R"("kernel": "adam")"),
            "invalid argument: task 'fwd': op 'compute' takes fwd, bwd, not 'adam'");
  EXPECT_EQ(with(R"("op": "read",)", R"("op": "read", "kernel": "adam",)"),
            "invalid argument: task 'read': op 'read' takes no kernel, not 'adam'");
  EXPECT_EQ(with(R"("kind": "param16")", R"("kind": "weights")"),
            "invalid argument: tensor 'w': unknown kind 'weights' (param16, grad16, grad, master, adam_m, adam_v)");
  EXPECT_EQ(with(R"("kind": "param16")", R"("kind": "master")"), "invalid argument: tensor 'w': dtype 'bf16', but master is fp32");
  EXPECT_EQ(with(R"("size_bytes": 12}])", R"("size_bytes": 13}])"),
            "invalid argument: tensor 'w': size_bytes 13 is not whole param16 elements of 2 bytes");
  EXPECT_EQ(with(R"("resource": "gpu0.compute", "kernel")", R"("resource": "gpu9.compute", "kernel")"),
            "invalid argument: task 'fwd': resource 'gpu9.compute' does not exist");
  EXPECT_EQ(with(R"("concurrency": 2)", R"("concurrency": 0)"),
            "invalid argument: resource 'nvme0.read': concurrency must be >= 1");
  EXPECT_EQ(with(R"("size_bytes": 60)", R"("size_bytes": 160)"),
            "resource exhausted: buffer 'b0' (160 bytes) is larger than pool 'host.pinned' (100 bytes)");
  EXPECT_EQ(with(R"("distance": 1)", R"("distance": 0)"),
            "invalid argument: task 'done': carried dep on 'fwd' needs distance >= 1");
  EXPECT_EQ(with(R"({"id": "read", "op": "read")", R"({"id": "fwd", "op": "read")"),
            "invalid argument: task 'fwd' is defined twice");
}

TEST(ScheduleValidate, RejectsACycleNamingATaskOnIt) {
  Builder b;
  b.Resource("r").Task("a", "r").Task("b", "r", {"a"}).Task("c", "r", {"b"});
  b.s.mutable_tasks()[0].deps.push_back(2);  // a <- c closes the cycle
  Status st = b.s.Validate();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("dependency cycle"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("task '"), std::string::npos);
}

TEST(ScheduleValidate, BufferLifetimes) {
  // Use without depending on the allocating task.
  Builder use;
  use.Resource("r").Pool("p", 10).Buffer("x", "p", 4).Task("alloc", "", {}, {"x"}).Task("user", "r");
  use.s.mutable_tasks()[1].uses.push_back(0);
  use.Task("free", "", {"alloc", "user"}, {}, {"x"});
  Status st = use.s.Validate();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(), "task 'user' uses buffer 'x' without depending on task 'alloc' that allocates it");

  // Free that may run before a user finishes.
  Builder early;
  early.Resource("r").Pool("p", 10).Buffer("x", "p", 4).Task("alloc", "", {}, {"x"}).Task("user", "r", {"alloc"});
  early.s.mutable_tasks()[1].uses.push_back(0);
  early.Task("free", "", {"alloc"}, {}, {"x"});
  st = early.s.Validate();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("frees buffer 'x' before task 'user'"), std::string::npos) << st.message();

  // Several users, the free after some through a chain: the first user in order that the free
  // does not follow is named (the check searches back from the free for all users at once).
  Builder several;
  several.Resource("r").Pool("p", 10).Buffer("x", "p", 4).Task("alloc", "", {}, {"x"});
  several.Task("u1", "r", {"alloc"}).Task("mid", "r", {"u1"}).Task("u2", "r", {"alloc"}).Task("u3", "r", {"alloc"});
  for (const char* u : {"u1", "u2", "u3"}) several.s.mutable_tasks()[several.s.FindTask(u)].uses.push_back(0);
  several.Task("free", "", {"mid", "u3"}, {}, {"x"});
  EXPECT_EQ(several.s.Validate().ToString(),
            "invalid argument: task 'free' frees buffer 'x' before task 'u2' that uses it has completed (missing dep)");
  several.s.mutable_tasks()[several.s.FindTask("free")].deps.push_back(several.s.FindTask("u2"));
  EXPECT_TRUE(several.s.Validate().ok()) << several.s.Validate().ToString();

  // Allocated, never freed.
  Builder leak;
  leak.Resource("r").Pool("p", 10).Buffer("x", "p", 4).Task("alloc", "", {}, {"x"});
  st = leak.s.Validate();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("no task frees it"), std::string::npos);

  // The correct shape passes.
  Builder ok;
  ok.Resource("r").Pool("p", 10).Buffer("x", "p", 4).Task("alloc", "", {}, {"x"}).Task("user", "r", {"alloc"});
  ok.s.mutable_tasks()[1].uses.push_back(0);
  ok.Task("free", "", {"user"}, {}, {"x"});
  EXPECT_TRUE(ok.s.Validate().ok()) << ok.s.Validate().ToString();
}

// The lifetime checks against plain reachability, on random schedules: each buffer allocated by
// one task, used by a few, freed by one, with deps that make some uses and frees unordered. The
// verdict, and the first error's words, are what a check of every (user, buffer) pair in the
// buffers' order and then the users' gives.
TEST(ScheduleValidate, BufferLifetimesMatchPlainReachability) {
  std::mt19937 rng(59);
  int errors = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 4 + static_cast<int>(rng() % 30), buffers = 1 + static_cast<int>(rng() % 3);
    // Tasks in a random order; deps only to tasks earlier in a hidden order, so no cycle.
    std::vector<int> rank(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) rank[static_cast<size_t>(i)] = i;
    std::shuffle(rank.begin(), rank.end(), rng);
    Schedule s;
    s.name = "random";
    s.AddDevice({"host", DeviceKind::kHost});
    s.AddPool({"p", 0, int64_t{1} << 40});
    for (int b = 0; b < buffers; ++b) s.AddBuffer({"b" + std::to_string(b), 0, 1, false});
    std::vector<std::vector<bool>> reach(static_cast<size_t>(n), std::vector<bool>(static_cast<size_t>(n), false));
    for (int i = 0; i < n; ++i) {
      TaskSpec t;
      t.id = "t" + std::to_string(i);
      t.op = Op::kBarrier;
      for (int j = 0; j < n; ++j) {
        // Mostly a chain through the hidden order (long paths, as a schedule's), plus random deps.
        const int gap = rank[static_cast<size_t>(i)] - rank[static_cast<size_t>(j)];
        if ((gap == 1 && rng() % 8 != 0) || (gap > 1 && rng() % 5 == 0)) t.deps.push_back(j);
      }
      s.AddTask(std::move(t));
    }
    // reach[a][b]: a path a -> ... -> b, by the hidden order.
    std::vector<int> by_rank(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) by_rank[static_cast<size_t>(rank[static_cast<size_t>(i)])] = i;
    for (int k = 0; k < n; ++k) {
      const int i = by_rank[static_cast<size_t>(k)];
      reach[static_cast<size_t>(i)][static_cast<size_t>(i)] = true;
      for (int d : s.tasks()[static_cast<size_t>(i)].deps) {
        for (int a = 0; a < n; ++a) {
          if (reach[static_cast<size_t>(a)][static_cast<size_t>(d)]) reach[static_cast<size_t>(a)][static_cast<size_t>(i)] = true;
        }
      }
    }
    auto& tasks = s.mutable_tasks();
    std::vector<int> alloc(static_cast<size_t>(buffers)), free(static_cast<size_t>(buffers));
    for (int b = 0; b < buffers; ++b) {
      // The allocation early and the free late in the hidden order, users anywhere.
      alloc[static_cast<size_t>(b)] = by_rank[static_cast<size_t>(rng() % static_cast<unsigned>(std::max(1, n / 3)))];
      free[static_cast<size_t>(b)] = by_rank[static_cast<size_t>(n - 1 - static_cast<int>(rng() % static_cast<unsigned>(std::max(1, n / 3))))];
      if (rng() % 6 == 0) free[static_cast<size_t>(b)] = alloc[static_cast<size_t>(b)];  // one task allocates and frees it
      tasks[static_cast<size_t>(alloc[static_cast<size_t>(b)])].allocs.push_back(b);
      tasks[static_cast<size_t>(free[static_cast<size_t>(b)])].frees.push_back(b);
      for (int u = 0, users = static_cast<int>(rng() % 5); u < users; ++u) {
        // A buffer one task allocates and frees is used by that task, or (an error) another.
        // Else mostly a task between the two in the hidden order, now and then any task.
        const int a = rank[static_cast<size_t>(alloc[static_cast<size_t>(b)])], f = rank[static_cast<size_t>(free[static_cast<size_t>(b)])];
        int user = by_rank[static_cast<size_t>(a + static_cast<int>(rng() % static_cast<unsigned>(f - a + 1)))];
        if (a == f) user = rng() % 4 != 0 ? alloc[static_cast<size_t>(b)] : static_cast<int>(rng() % static_cast<unsigned>(n));
        if (rng() % 10 == 0) user = static_cast<int>(rng() % static_cast<unsigned>(n));
        tasks[static_cast<size_t>(user)].uses.push_back(b);
      }
    }
    // The expected verdict: buffers in order; a buffer's users are the tasks that use or free it,
    // by task, uses before frees (as Validate lists them).
    std::string expected;
    for (int b = 0; b < buffers && expected.empty(); ++b) {
      const int a = alloc[static_cast<size_t>(b)], f = free[static_cast<size_t>(b)];
      std::vector<int> users;
      for (int i = 0; i < n; ++i) {
        for (int x : tasks[static_cast<size_t>(i)].uses) {
          if (x == b) users.push_back(i);
        }
        for (int x : tasks[static_cast<size_t>(i)].frees) {
          if (x == b) users.push_back(i);
        }
      }
      const std::string name = "'b" + std::to_string(b) + "'";
      for (int u : users) {
        if (u != a && !reach[static_cast<size_t>(a)][static_cast<size_t>(u)] && expected.empty()) {
          expected = "invalid argument: task 't" + std::to_string(u) + "' uses buffer " + name + " without depending on task 't" +
                     std::to_string(a) + "' that allocates it";
        }
      }
      for (int u : users) {
        if (u != f && !reach[static_cast<size_t>(u)][static_cast<size_t>(f)] && expected.empty()) {
          expected = "invalid argument: task 't" + std::to_string(f) + "' frees buffer " + name + " before task 't" + std::to_string(u) +
                     "' that uses it has completed (missing dep)";
        }
      }
    }
    const Status st = s.Validate();
    EXPECT_EQ(st.ok() ? std::string() : st.ToString(), expected) << "trial " << trial;
    errors += expected.empty() ? 0 : 1;
  }
  RecordProperty("errors", errors);
  EXPECT_GT(errors, 30);  // both verdicts were tried, many times
  EXPECT_LT(errors, 270);
}

// What one task holds while it runs (uses, allocs and frees, each buffer once) must fit its pool
// beside the persistent buffers: otherwise no order of the other tasks lets it start.
TEST(ScheduleValidate, OneTasksBuffersFitTheirPoolTogether) {
  auto build = [](int64_t capacity) {
    Builder b;
    b.Resource("r").Pool("gpu0.hbm", capacity).Buffer("resident", "gpu0.hbm", 30, /*persistent=*/true);
    b.Buffer("w", "gpu0.hbm", 40).Buffer("grad", "gpu0.hbm", 25).Buffer("act", "gpu0.hbm", 5);
    b.Task("h2d", "r", {}, {"w"}).Task("step", "r", {"h2d"}, {"grad", "act"}, {"w", "act"});
    b.s.mutable_tasks()[1].uses = {1, 2};  // w and grad again: counted once
    b.Task("d2h", "r", {"step"}, {}, {"grad"});
    b.s.mutable_tasks()[2].uses = {0};  // the persistent buffer: already counted
    return b;
  };
  // step holds w, grad and act: 70 bytes beside 30 persistent ones.
  EXPECT_TRUE(build(100).s.Validate().ok()) << build(100).s.Validate().ToString();
  EXPECT_EQ(build(99).s.Validate().ToString(),
            "resource exhausted: task 'step' holds 3 buffers of pool 'gpu0.hbm' at once (70 bytes, the largest 'w') "
            "beside 30 persistent bytes: needs 100 bytes, capacity is 99");
}

// Tensors may share a device's bytes only where they name the same elements of the same kind
// and rank (a unit inside its sub-group); any other overlap would train on clobbered state.
TEST(ScheduleValidate, TensorsShareBytesOnlyWhereTheyNameTheSameState) {
  Schedule s;
  s.AddDevice({"nvme0", DeviceKind::kNvme});
  auto tensor = [&](const std::string& name, StateKind kind, int32_t rank, int64_t element, int64_t elements, int64_t offset) {
    TensorSpec t;
    t.name = name;
    t.kind = kind;
    t.rank = rank;
    t.device = 0;
    t.element_offset = element;
    t.size_bytes = elements * StateKindBytes(kind);
    t.offset_bytes = offset;
    s.AddTensor(t);
  };
  tensor("subgroup", StateKind::kGrad, 0, 0, 1000, 8192);
  tensor("unit", StateKind::kGrad, 0, 100, 50, 8192 + 400);      // elements 100..149 of the same grad
  tensor("next", StateKind::kGrad, 0, 1000, 10, 8192 + 4000);   // right after, touching only
  EXPECT_TRUE(s.Validate().ok()) << s.Validate().ToString();
  tensor("master", StateKind::kMaster, 0, 0, 10, 8192 + 3000);  // another kind inside the sub-group's bytes
  const Status st = s.Validate();
  EXPECT_EQ(st.message(), "tensors 'subgroup' and 'master' share bytes [11192, 11232) of device 'nvme0' but name different state: "
                          "each byte of a device's store holds one element of one kind of one rank");
  Schedule shifted;
  shifted.AddDevice({"nvme0", DeviceKind::kNvme});
  s = shifted;
  tensor("a", StateKind::kGrad, 0, 0, 100, 0);
  tensor("b", StateKind::kGrad, 0, 10, 100, 4);  // element 10 at byte 4: not where 'a' keeps it
  EXPECT_FALSE(s.Validate().ok());
}

TEST(ScheduleValidate, TopologicalOrderKeepsScheduleOrderAmongTies) {
  Builder b;
  b.Resource("r").Task("a", "r").Task("b", "r").Task("c", "r", {"b"}).Task("d", "r", {"a"});
  auto order = b.s.TopologicalOrder();
  EXPECT_EQ(order, (std::vector<int32_t>{0, 1, 2, 3}));
}


// The name indices (NameIndex) past many rebuilds: every name is found at its position, a name
// never added is not, and a copy of the schedule finds the same (a file with an id twice:
// RejectsMalformedFilesWithOneClearError).
TEST(ScheduleNames, EveryNameIsFoundAtItsPositionThroughGrowthAndCopies) {
  Schedule s;
  s.AddDevice({"host", DeviceKind::kHost});
  s.AddResource({"host.cpu", 0, 1});
  constexpr int kTasks = 5000;
  for (int i = 0; i < kTasks; ++i) {
    TaskSpec t;
    t.id = "fwd.L" + std::to_string(i) + (i % 2 ? ".a_name_past_the_small_string_buffer" : "");
    t.op = Op::kFree;
    EXPECT_EQ(s.AddTask(t), i);
  }
  const Schedule copy = s;
  for (const Schedule* x : {static_cast<const Schedule*>(&s), &copy}) {
    for (int i = 0; i < kTasks; ++i) ASSERT_EQ(x->FindTask(x->tasks()[i].id), i) << x->tasks()[i].id;
    EXPECT_EQ(x->FindTask("fwd.L5000"), kNoIndex);
    EXPECT_EQ(x->FindTask("fwd.L1"), kNoIndex);  // L1 carries the long suffix
    EXPECT_EQ(x->FindTask(""), kNoIndex);
    EXPECT_EQ(x->FindDevice("host"), 0);
    EXPECT_EQ(x->FindResource("host.cpu"), 0);
    EXPECT_EQ(x->FindResource("host"), kNoIndex);  // each kind of thing has its own names
    EXPECT_EQ(x->FindPool("host"), kNoIndex);
  }
}

// A builder's deferred indexes (DeferNameIndexes, then IndexNames): names added before, while
// deferred and after are each found at their position, as when indexed one by one; and so are
// those of a schedule deferred from its first add (a builder's), whose table is first made, and
// grown, while every name is pending.
TEST(ScheduleNames, DeferredNamesAreFoundOnceIndexed) {
  auto add = [](Schedule* s, int i) {
    const std::string name = "x" + std::to_string(i) + (i % 3 ? ".a_name_past_the_small_string_buffer" : "");
    TaskSpec t;
    t.id = "task." + name;
    t.op = Op::kFree;
    EXPECT_EQ(s->AddTask(t), i);
    EXPECT_EQ(s->AddBuffer({"buffer." + name, 0, 64, false}), i);
    TensorSpec x;
    x.name = "tensor." + name;
    x.device = 0;
    EXPECT_EQ(s->AddTensor(x), i);
  };
  constexpr int kEach = 3000;
  Schedule mixed, deferred;
  for (Schedule* s : {&mixed, &deferred}) {
    s->AddDevice({"host", DeviceKind::kHost});
    s->AddPool({"host.pinned", 0, 1 << 20});
  }
  for (int i = 0; i < kEach; ++i) add(&mixed, i);  // indexed as added
  mixed.DeferNameIndexes();
  deferred.DeferNameIndexes();
  for (int i = kEach; i < 2 * kEach; ++i) add(&mixed, i);  // pending
  for (int i = 0; i < 2 * kEach; ++i) add(&deferred, i);   // pending, every one
  mixed.AddDevice({"nvme0", DeviceKind::kNvme});           // devices are indexed as added, deferred or not
  EXPECT_EQ(mixed.FindDevice("nvme0"), 1);
  mixed.IndexNames();
  deferred.IndexNames();
  for (int i = 2 * kEach; i < 3 * kEach; ++i) add(&mixed, i);  // indexed as added again
  const Schedule copy = mixed;
  for (const Schedule* x : {static_cast<const Schedule*>(&mixed), &copy, static_cast<const Schedule*>(&deferred)}) {
    const int added = static_cast<int>(x->tasks().size());
    for (int i = 0; i < added; ++i) {
      ASSERT_EQ(x->FindTask(x->tasks()[i].id), i) << x->tasks()[i].id;
      ASSERT_EQ(x->FindBuffer(x->buffers()[i].name), i) << x->buffers()[i].name;
      ASSERT_EQ(x->FindTensor(x->tensors()[i].name), i) << x->tensors()[i].name;
    }
    EXPECT_EQ(x->FindTask("task.x1"), kNoIndex);      // x1 carries the long suffix
    EXPECT_EQ(x->FindBuffer("task.x0"), kNoIndex);    // a task's name, not a buffer's
    EXPECT_EQ(x->FindTensor("tensor.x" + std::to_string(added)), kNoIndex);  // one past the last
  }
}

// Every length's path through the hash (under eight bytes, whole words, a tail read from the last
// eight): each prefix of one name, and the name with each byte changed in turn, are told apart.
TEST(ScheduleNames, PrefixesAndOneByteChangesAreDifferentNames) {
  Schedule s;
  const std::string base = "d2h.grad.layers.12.mlp.r3";
  std::vector<std::string> names;
  for (size_t n = 1; n <= base.size(); ++n) names.push_back(base.substr(0, n));
  for (size_t i = 0; i < base.size(); ++i) {
    std::string changed = base;
    changed[i] = static_cast<char>(changed[i] ^ 1);
    names.push_back(changed);
  }
  for (size_t i = 0; i < names.size(); ++i) ASSERT_EQ(s.AddDevice({names[i], DeviceKind::kHost}), static_cast<int32_t>(i)) << names[i];
  for (size_t i = 0; i < names.size(); ++i) EXPECT_EQ(s.FindDevice(names[i]), static_cast<int32_t>(i)) << names[i];
  EXPECT_EQ(s.FindDevice(""), kNoIndex);
  EXPECT_EQ(s.FindDevice(base + "x"), kNoIndex);
}

}  // namespace
}  // namespace tierflow
