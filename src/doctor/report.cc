#include "doctor/report.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/json_object.h"

namespace bmas::doctor {
namespace {

const Check* Find(const std::vector<Check>& checks, const std::string& name) {
  auto it = std::find_if(checks.begin(), checks.end(),
                         [&](const Check& c) { return c.name == name; });
  return it == checks.end() ? nullptr : &*it;
}

// A part that runs when every one of `needs` holds; else why not, from the first that fails.
Part Needing(std::string name, const std::vector<std::pair<bool, std::string>>& needs) {
  Part p{std::move(name), true, ""};
  for (const auto& [holds, why] : needs) {
    if (!holds) {
      p.can = false;
      p.why += (p.why.empty() ? "" : "; ") + why;
    }
  }
  return p;
}

std::pair<bool, std::string> Passes(const std::vector<Check>& checks, const std::string& name) {
  const Check* c = Find(checks, name);
  if (c == nullptr) return {false, name + " not checked"};
  return {c->ok, fmt::format("{}: {}", name, c->found)};
}

std::vector<Part> Parts(const NodeFacts& f, const Result<std::vector<GpuReading>>& gpus,
                        const std::vector<Check>& checks) {
  const std::pair<bool, std::string> root{f.is_root, "needs root"};
  const bool any_gpu = gpus && !gpus->empty();
  const std::string no_gpu =
      !gpus ? "no GPU/driver: " + gpus.error().message : std::string("no GPU/driver");
  const bool mig = any_gpu && std::any_of(gpus->begin(), gpus->end(),
                                          [](const GpuReading& g) { return g.mig_capable; });
  const bool rdma = std::any_of(f.rdma.begin(), f.rdma.end(), [](const RdmaPort& p) {
    return p.link_layer == "InfiniBand" ||
           std::find(p.gid_types.begin(), p.gid_types.end(), "RoCE v2") != p.gid_types.end();
  });
  return {
      Part{"simulated engines", true, ""},
      Part{"gateway", true, ""},
      Needing("local Slurm (fake GPUs)",
              {root, Passes(checks, "slurm"), Passes(checks, "cgroups"),
               {f.munge_uid.has_value(), "no munge account"}}),
      Needing("LXD workspaces", {root, Passes(checks, "lxd"), Passes(checks, "lxcfs"),
                                 Passes(checks, "cgroups")}),
      Needing("real GPU jobs", {{any_gpu, no_gpu}}),
      Needing("MIG partitions", {{mig, any_gpu ? "no MIG-capable GPU" : no_gpu}}),
      Needing("NCCL over RDMA",
              {{rdma, f.rdma.empty() ? "no RDMA NIC" : "no RoCE v2 GID or InfiniBand port"}}),
  };
}

}  // namespace

Report Diagnose(const NodeFacts& f, const Result<std::vector<GpuReading>>& gpus, int users,
                const InventoryNode* inventory) {
  Report r;
  r.checks = GpuChecks(gpus);
  if (inventory != nullptr) r.checks.push_back(MigLayoutCheck(gpus, *inventory));
  for (Check c : {RdmaCheck(f.rdma), RoceCheck(f.rdma), RamCheck(f.meminfo),
                  BareMetalCheck(f.virt), CgroupCheck(f.mounts, f.cgroup_controllers),
                  KernelCheck(f.kernel_release), LxdCheck(f.lxd), SlurmCheck(f.slurm),
                  MungeKeyCheck(f.munge_keys, f.munge_uid), LxcfsCheck(f.lxcfs),
                  SubIdsCheck(f.subuid, f.subgid, users), ClockCheck(f.clock),
                  ClockSkewCheck(f.slurm_clock)}) {
    r.checks.push_back(std::move(c));
  }
  std::stable_sort(r.checks.begin(), r.checks.end(), [](const Check& a, const Check& b) {
    return static_cast<int>(a.kind) < static_cast<int>(b.kind);
  });
  r.parts = Parts(f, gpus, r.checks);
  r.ok = AllRequiredPass(r.checks);
  return r;
}

std::string FormatText(const Report& report) {
  static const char* kHeadings[] = {"The cluster's hardware specification:",
                                    "What bmas needs on this node:", "For information:"};
  std::string out;
  int kind = -1;
  for (const Check& c : report.checks) {
    if (static_cast<int>(c.kind) != kind) {
      kind = static_cast<int>(c.kind);
      out += fmt::format("{}{}\n", out.empty() ? "" : "\n", kHeadings[kind]);
    }
    if (c.ok) {
      out += fmt::format("  ✓ {}: {}\n", c.name, c.found);
    } else {
      out += fmt::format("  ✗ {}: {} (required: {}{})\n", c.name, c.found, c.required,
                         c.fix.empty() ? "" : "; fix: " + c.fix);
    }
  }
  std::string can, cannot;
  for (const Part& p : report.parts) {
    if (p.can) {
      can += (can.empty() ? "" : ", ") + p.name;
    } else {
      cannot += fmt::format("  {}: {}\n", p.name, p.why);
    }
  }
  out += fmt::format("\ncan run here: {}\n", can.empty() ? "nothing" : can);
  if (!cannot.empty()) out += "cannot run here:\n" + cannot;
  out += report.ok ? "\nThis node meets the specification and has what bmas needs.\n"
                   : "\nThis node does not pass every spec and bmas check (exit code 1).\n";
  return out;
}

std::string FormatJson(const Report& report) {
  return JsonObject([&](JsonWriter& w) {
    auto member = [&w](const char* key, const std::string& value) {
      w.Key(key);
      w.String(value.c_str());
    };
    Member(w, "ok", report.ok);
    w.Key("checks");
    w.StartArray();
    for (const Check& c : report.checks) {
      w.StartObject();
      member("name", c.name);
      member("kind", KindName(c.kind));
      Member(w, "ok", c.ok);
      member("required", c.required);
      member("found", c.found);
      member("fix", c.fix);
      w.EndObject();
    }
    w.EndArray();
    w.Key("can_run");
    w.StartArray();
    for (const Part& p : report.parts) {
      if (p.can) w.String(p.name.c_str());
    }
    w.EndArray();
    w.Key("cannot_run");
    w.StartArray();
    for (const Part& p : report.parts) {
      if (p.can) continue;
      w.StartObject();
      member("part", p.name);
      member("why", p.why);
      w.EndObject();
    }
    w.EndArray();
  }) + "\n";
}

}  // namespace bmas::doctor
