// Encoded GetCostTable answers. Encoding a table as JSON costs far more than
// computing an analytic one (0.31 ms against 0.06 ms for linear) and reading a
// measured one from the database costs more still, so encoded responses are kept:
// - an analytic table (a zoo model on a board preset) depends on its request
//   alone, and is kept until a model is replaced or removed;
// - any other table is read from the database, and is kept under the database's
//   costs version (CostDb::CostsVersion) read before it was built: it is served
//   again only while that version is still current, so that a profile's new op
//   costs, a new cost table, a replaced or removed model and a changed
//   fingerprint, by this process or another, are never answered from before.
#pragma once

#include <cstdint>
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
  // Kept responses hold at most this much body in all: a stored model's table may be large.
  static constexpr size_t kMaxBodyBytes = size_t{64} << 20;

  // The cache key of a GetCostTable call: its encoding and its decoded request,
  // so that equal requests spelled differently share an entry. Empty for
  // another route or a body that does not decode.
  static std::string Key(const HttpRequest& request);

  // An analytic table's response.
  std::optional<HttpResponse> Find(const std::string& key);
  // A table read from the database while the costs version was `costs_version`, still current.
  std::optional<HttpResponse> Find(const std::string& key, int64_t costs_version);
  // The service says which requests it answered with an analytic table ...
  void MarkAnalytic(const v1::GetCostTableRequest& request);
  // ... and only their successful responses are kept by this one;
  void Offer(const std::string& key, const HttpResponse& response);
  // this one also keeps any other successful response, under the costs version read before the
  // request was answered (a table built from a later state is then never served: the version moved on).
  void Offer(const std::string& key, const HttpResponse& response, int64_t costs_version);
  // Forgets everything: a stored model was replaced or removed, so a name's table may change.
  void Clear();

 private:
  struct Versioned {
    int64_t costs_version = 0;
    HttpResponse response;
  };
  bool RoomLocked(const HttpResponse& response) const;

  std::mutex mutex_;
  std::set<std::string> analytic_requests_;        // serialized requests
  std::map<std::string, HttpResponse> responses_;  // analytic, by Key()
  std::map<std::string, Versioned> versioned_;     // read from the database, by Key()
  int64_t newest_version_ = 0;                     // entries of older versions can never be served
  size_t body_bytes_ = 0;                          // of responses_ and versioned_
};

}  // namespace edgecost::daemon
