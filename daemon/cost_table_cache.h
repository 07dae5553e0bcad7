// Encoded GetCostTable answers of analytic tables. An analytic table depends
// on its request alone, and encoding one as JSON costs far more than computing
// it (0.31 ms against 0.06 ms for linear), so its encoded response is kept.
// Measured tables change as profiles store costs, so they are never kept.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "daemon/http_server.h"
#include "proto/edgecost.pb.h"

namespace edgecost::daemon {

class CostTableCache {
 public:
  static constexpr char kRoute[] = "/twirp/edgecost.v1.CostService/GetCostTable";
  static constexpr size_t kMaxEntries = 256;

  // The cache key of a GetCostTable call: its encoding and its decoded request,
  // so that equal requests spelled differently share an entry. Empty for
  // another route or a body that does not decode.
  static std::string Key(const HttpRequest& request);

  std::optional<HttpResponse> Find(const std::string& key);
  // The service says which requests it answered with an analytic table ...
  void MarkAnalytic(const v1::GetCostTableRequest& request);
  // ... and only their successful responses are kept.
  void Offer(const std::string& key, const HttpResponse& response);
  // Forgets everything: a stored model was replaced or removed, so a name's table may change.
  void Clear();

 private:
  std::mutex mutex_;
  std::set<std::string> analytic_requests_;        // serialized requests
  std::map<std::string, HttpResponse> responses_;  // by Key()
};

}  // namespace edgecost::daemon
