// Issue 25's figures on the multi-host test bed (tests/cluster/, docs/cluster-testbed.md), as
// root, with BMAS_BINARY set (bench/RESULTS.md, C1 to C3):
//   C1  bring-up: from bare namespaces (mgs1 and three nodes) to the end of the first GPU job,
//       as an admin does it: `bmas cluster init`, the join service, three `bmas node join`;
//   C2  a job across two nodes against the same job on one node (srun from mgs1);
//   C3  recovery after a node's link is cut at the bridge: until slurmctld marks it DOWN, and
//       from the link's return until it serves again (SlurmdTimeout as --slurmd-timeout-s).
// Each repetition runs on its own; the report gives every try and the median, and the load
// average before and after.
//
//   sudo BMAS_BINARY=$PWD/build/bmas build/bench/bmas_cluster_bed_bench --reps 5

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "net_bed.h"
#include "bed_cluster.h"

namespace {

using bmas::testbed::BedCluster;
using bmas::testbed::BedClusterOptions;
using bmas::testbed::BedOptions;
using bmas::testbed::NetBed;
using Clock = std::chrono::steady_clock;

constexpr auto kPatience = std::chrono::seconds(180);

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return fmt::format("{} {} {}", one, five, fifteen);
}

struct Series {
  std::string name;
  std::vector<double> ms;
  void Add(double v) { ms.push_back(v); }
  double Median() const {
    std::vector<double> v = ms;
    std::sort(v.begin(), v.end());
    if (v.empty()) return 0;
    return v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  }
  void Print() const {
    std::string tries;
    for (double v : ms) tries += fmt::format("{}{:.0f}", tries.empty() ? "" : ", ", v);
    fmt::print("  {:<44} median {:>8.0f} ms   tries: {}\n", name, Median(), tries);
  }
};

[[noreturn]] void Fail(const std::string& what) {
  fmt::print(stderr, "cluster_bed_bench: {}\n", what);
  std::exit(1);
}

template <typename T>
T Must(bmas::Result<T> r, const std::string& what) {
  if (!r) Fail(what + ": " + r.error().message);
  return std::move(*r);
}

void Must(bmas::Result<void> r, const std::string& what) {
  if (!r) Fail(what + ": " + r.error().message);
}

// Runs `args` in mgs1 and times it to its end; it must succeed.
double Timed(const NetBed& bed, const std::vector<std::string>& args) {
  const auto t0 = Clock::now();
  auto r = bed.Run(NetBed::kController, args, "", std::chrono::seconds(120));
  const double ms = Ms(Clock::now() - t0);
  if (!r || r->exit_code != 0) {
    Fail(fmt::format("`{}` in mgs1 failed: {}", fmt::join(args, " "),
                     r ? r->err + r->out : r.error().message));
  }
  return ms;
}

// C1: one bring-up from bare namespaces.
void BringUp(const std::string& bmas, int rep, std::vector<Series>& s) {
  NetBed bed;
  BedOptions options;
  options.name = fmt::format("bench-bringup-{}", rep);
  options.nodes = 3;
  const auto t_bed = Clock::now();
  Must(bed.Start(options), "the bed");
  const auto t0 = Clock::now();
  s[0].Add(Ms(t0 - t_bed));
  BedCluster cluster(bed, bmas);
  BedClusterOptions o;
  o.gpus_per_node = 4;
  cluster.WriteInventory(o);
  auto init = Must(cluster.Init(), "cluster init");
  const std::string token = BedCluster::Token(init);
  if (token.empty()) Fail("`bmas cluster init` printed no join line:\n" + init.out);
  Must(cluster.StartControllerDaemons(), "munged, slurmctld and the join service");
  const auto t_init = Clock::now();
  s[1].Add(Ms(t_init - t0));
  for (const std::string& node : bed.NodeNames()) {
    const auto t = Clock::now();
    auto joined = Must(cluster.Join(node, token), "node join " + node);
    if (joined.exit_code != 0) Fail(fmt::format("node join {}: {}", node, joined.err + joined.out));
    s[2].Add(Ms(Clock::now() - t));
  }
  for (const std::string& node : bed.NodeNames()) {
    if (std::string last = cluster.WaitState(node, "idle", kPatience); !last.empty()) {
      Fail(fmt::format("{} was not idle: {}", node, last));
    }
  }
  const auto t_idle = Clock::now();
  s[3].Add(Ms(t_idle - t_init));
  s[4].Add(Timed(bed, {"srun", "--gres=gpu:1", "--mem=64", "--chdir=/tmp", "/bin/true"}));
  s[5].Add(Ms(Clock::now() - t0));
  bed.Stop();
  if (!bed.Leftovers().empty()) Fail(fmt::format("the bed left {}", fmt::join(bed.Leftovers(), ", ")));
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  int slurmd_timeout_s = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--reps") {
      reps = std::atoi(argv[i + 1]);
    } else if (flag == "--slurmd-timeout-s") {
      slurmd_timeout_s = std::atoi(argv[i + 1]);
    } else {
      Fail("unknown flag " + flag + "; flags: --reps N, --slurmd-timeout-s S");
    }
  }
  if (geteuid() != 0) Fail("the test bed needs root (sudo)");
  const char* bmas = std::getenv("BMAS_BINARY");
  if (bmas == nullptr) Fail("set BMAS_BINARY to the bmas binary (BMAS_BINARY=$PWD/build/bmas)");
  const std::string load_before = LoadAverage();

  std::vector<Series> c1 = {{"bed: namespaces, bridge, 4 hosts"},
                            {"cluster init + munged + slurmctld + serve"},
                            {"bmas node join (per node)"},
                            {"3 joins, in turn, to all 3 nodes idle"},
                            {"first GPU job (srun --gres=gpu:1)"},
                            {"bare namespaces to first GPU job's end"}};
  for (int rep = 0; rep < reps; ++rep) BringUp(bmas, rep, c1);

  std::vector<Series> c2 = {{"srun -N1 -n2 /bin/true (one node)"},
                            {"srun -N2 -n2 /bin/true (two nodes)"}};
  std::vector<Series> c3 = {{"link cut at bridge to node DOWN"},
                            {"link restored to node serving"}};
  NetBed bed;
  BedOptions options;
  options.name = "bench-faults";
  options.nodes = 3;
  options.slurmd_timeout_s = slurmd_timeout_s;
  Must(bed.Start(options), "the bed");
  Must(bed.StartSlurm(std::chrono::seconds(60)), "Slurm on the bed");
  const std::vector<std::string> srun = {"srun", "--mem=64", "--chdir=/tmp", "-n2"};
  for (int rep = 0; rep < reps; ++rep) {
    std::vector<std::string> one = srun, two = srun;
    one.insert(one.end(), {"-N1", "/bin/true"});
    two.insert(two.end(), {"-N2", "/bin/true"});
    c2[0].Add(Timed(bed, one));
    c2[1].Add(Timed(bed, two));
  }
  for (int rep = 0; rep < reps; ++rep) {
    Must(bed.CutLink("oss02"), "cutting oss02's link");
    const auto t_cut = Clock::now();
    if (!bmas::WaitFor([&] { return bed.NodeState("oss02").starts_with("down"); }, 0,
                       kPatience)) {
      Fail("oss02 was not marked down: " + bed.NodeState("oss02"));
    }
    c3[0].Add(Ms(Clock::now() - t_cut));
    Must(bed.RestoreLink("oss02"), "restoring oss02's link");
    const auto t_back = Clock::now();
    if (!bmas::WaitFor([&] { return bed.NodeState("oss02") == "idle"; }, 0, kPatience)) {
      Fail("oss02 did not serve again: " + bed.NodeState("oss02"));
    }
    c3[1].Add(Ms(Clock::now() - t_back));
  }
  bed.Stop();

  fmt::print("cluster_bed_bench: {} repetitions, {} cores, load average before {}, after {}\n",
             reps, sysconf(_SC_NPROCESSORS_ONLN), load_before, LoadAverage());
  fmt::print("C1 bring-up, controller + 3 nodes (bmas cluster init, 3 x bmas node join):\n");
  for (const Series& s : c1) s.Print();
  fmt::print("C2 a job across two nodes against one node:\n");
  for (const Series& s : c2) s.Print();
  fmt::print("C3 recovery, SlurmdTimeout={} s:\n", slurmd_timeout_s);
  for (const Series& s : c3) s.Print();
  return 0;
}
