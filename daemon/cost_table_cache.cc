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

std::optional<HttpResponse> CostTableCache::Find(const std::string& key, int64_t costs_version) {
  std::lock_guard lock(mutex_);
  if (auto it = responses_.find(key); it != responses_.end()) return it->second;
  auto it = versioned_.find(key);
  if (it == versioned_.end()) return std::nullopt;
  if (it->second.costs_version == costs_version) return it->second.response;
  if (it->second.costs_version < costs_version) {  // a write since: never served again
    body_bytes_ -= it->second.response.body.size();
    versioned_.erase(it);
  }
  return std::nullopt;
}

void CostTableCache::MarkAnalytic(const v1::GetCostTableRequest& request) {
  std::lock_guard lock(mutex_);
  if (analytic_requests_.size() < kMaxEntries) analytic_requests_.insert(request.SerializeAsString());
}

bool CostTableCache::RoomLocked(const HttpResponse& response) const {
  return responses_.size() + versioned_.size() < kMaxEntries && body_bytes_ + response.body.size() <= kMaxBodyBytes;
}

void CostTableCache::Offer(const std::string& key, const HttpResponse& response) {
  if (response.status != 200) return;
  std::lock_guard lock(mutex_);
  const std::string request_bytes = key.substr(key.find('\n') + 1);
  if (analytic_requests_.count(request_bytes) && !responses_.count(key) && RoomLocked(response)) {
    body_bytes_ += response.body.size();
    responses_.emplace(key, response);
  }
}

void CostTableCache::Offer(const std::string& key, const HttpResponse& response, int64_t costs_version) {
  if (response.status != 200) return;
  std::lock_guard lock(mutex_);
  const std::string request_bytes = key.substr(key.find('\n') + 1);
  if (analytic_requests_.count(request_bytes)) {
    if (!responses_.count(key) && RoomLocked(response)) {
      body_bytes_ += response.body.size();
      responses_.emplace(key, response);
    }
    return;
  }
  if (costs_version < newest_version_) return;  // answered from before a write: stale already
  if (costs_version > newest_version_) {        // entries of older versions can never be served
    newest_version_ = costs_version;
    for (auto it = versioned_.begin(); it != versioned_.end();) {
      if (it->second.costs_version < costs_version) {
        body_bytes_ -= it->second.response.body.size();
        it = versioned_.erase(it);
      } else {
        ++it;
      }
    }
  }
  if (auto it = versioned_.find(key); it != versioned_.end()) {
    body_bytes_ -= it->second.response.body.size();
    versioned_.erase(it);
  }
  if (!RoomLocked(response)) return;
  body_bytes_ += response.body.size();
  versioned_.emplace(key, Versioned{costs_version, response});
}

void CostTableCache::Clear() {
  std::lock_guard lock(mutex_);
  analytic_requests_.clear();
  responses_.clear();
  versioned_.clear();
  body_bytes_ = 0;
}

}  // namespace edgecost::daemon
