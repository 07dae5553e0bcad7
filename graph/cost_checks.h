// Every number that enters edgecost from outside (graph and schedule files,
// RPC, `db import`, the database itself) is checked before it is stored or
// solved on. One negative energy makes a schedule's energy unbounded below and
// a search accept equal moves forever; one size past 2^63 wraps to a negative
// budget. Errors name the origin, the node and the field.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/status.h"
#include "proto/edgecost.pb.h"

namespace edgecost::graph {

// The largest size in bytes edgecost accepts anywhere (budgets, workspaces):
// sums of many stay below 2^63.
inline constexpr uint64_t kMaxBytes = uint64_t{1} << 62;
// Bounds on what a graph may hold, so that every sum of sizes is exact in a
// signed 64-bit integer: 2^40 bytes (1 TiB) per tensor times 2^20 nodes is 2^60.
inline constexpr uint64_t kMaxTensorBytes = uint64_t{1} << 40;
inline constexpr int kMaxNodes = 1 << 20;

// What every consumer of a cost table relies on: node i has index i, inputs
// precede their readers, sizes at most kMaxTensorBytes, costs (if any) finite,
// non-negative and one per node, paging costs likewise.
Status ValidateCostTable(const v1::CostTable& table, std::string_view origin);
Status CheckOpCost(const v1::OpCost& cost, std::string_view origin);
Status CheckPagingCost(const v1::PagingCost& paging, std::string_view origin);
Status CheckEnergyCalibration(const v1::EnergyCalibration& calibration, std::string_view origin);
// A budget of bytes: 1 to kMaxBytes (0 is "none" where a caller allows it).
Status CheckRamBudget(uint64_t bytes, std::string_view what);

}  // namespace edgecost::graph
