#include "daemon/cost_table_cache.h"

#include "daemon/twirp.h"
#include "proto/json.h"

namespace edgecost::daemon {

std::string CostTableCache::Key(const HttpRequest& request) {
  if (request.target != kRoute) return "";
  v1::GetCostTableRequest decoded;
  const bool ok = IsJson(request.content_type) ? proto::FromJson(request.body, &decoded).ok()
                                               : decoded.ParseFromString(request.body);
  return ok ? request.content_type + '\n' + decoded.SerializeAsString() : std::string();
}

std::optional<HttpResponse> CostTableCache::Find(const std::string& key) {
  std::lock_guard lock(mutex_);
  auto it = responses_.find(key);
  if (it == responses_.end()) return std::nullopt;
  return it->second;
}

void CostTableCache::MarkAnalytic(const v1::GetCostTableRequest& request) {
  std::lock_guard lock(mutex_);
  if (analytic_requests_.size() < kMaxEntries) analytic_requests_.insert(request.SerializeAsString());
}

void CostTableCache::Offer(const std::string& key, const HttpResponse& response) {
  if (response.status != 200) return;
  std::lock_guard lock(mutex_);
  const std::string request_bytes = key.substr(key.find('\n') + 1);
  if (analytic_requests_.count(request_bytes) && responses_.size() < kMaxEntries) responses_.emplace(key, response);
}

void CostTableCache::Clear() {
  std::lock_guard lock(mutex_);
  analytic_requests_.clear();
  responses_.clear();
}

}  // namespace edgecost::daemon
