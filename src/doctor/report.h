#pragma once

// `bmas doctor`'s verdict on a node: every check, which bmas parts can run here, and the
// report as text or JSON. Pure: facts in, report out.

#include <string>
#include <vector>

#include "common/result.h"
#include "doctor/checks.h"
#include "doctor/mig_check.h"
#include "doctor/node_facts.h"
#include "gpu/gpu_telemetry.h"

namespace bmas::doctor {

// A part of bmas and whether this node can run it (when not, why).
struct Part {
  std::string name;  // "simulated engines", "real GPU jobs", ...
  bool can = false;
  std::string why;  // for a part that cannot run
};

struct Report {
  std::vector<Check> checks;  // spec checks first, then bmas's, then informational ones
  std::vector<Part> parts;
  bool ok = false;  // AllRequiredPass(checks): the exit code is 0 exactly then
};

// `gpus`: what GpuTelemetry::Read() gave. `users`: the workspaces LXD's id ranges are sized
// for (config [lxd] users). `inventory`, when given (--cluster), adds "mig-layout".
Report Diagnose(const NodeFacts& facts, const Result<std::vector<GpuReading>>& gpus, int users,
                const InventoryNode* inventory = nullptr);

// One line per check, "✓ name: found" or "✗ name: found (required: ...; fix: ...)", grouped
// by kind, then what can and cannot run here.
std::string FormatText(const Report& report);

// {"ok", "checks": [{"name", "kind", "ok", "required", "found", "fix"}], "can_run": [...],
//  "cannot_run": [{"part", "why"}]}
std::string FormatJson(const Report& report);

}  // namespace bmas::doctor
