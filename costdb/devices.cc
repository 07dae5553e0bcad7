// Devices and their fingerprints, with history.
#include <string>
#include <vector>

#include "costdb/costdb.h"
#include "costdb/internal.h"

namespace edgecost::costdb {
using namespace internal;

Result<CostDb::FingerprintRow> CostDb::FindFingerprint(const std::string& hash) {
  EC_ASSIGN_OR_RETURN(
      Statement stmt,
      db_.Prepare("SELECT f.id, d.name FROM fingerprints f JOIN devices d ON d.id = f.device_id WHERE f.hash = ?"));
  EC_ASSIGN_OR_RETURN(bool row, stmt.Bind(1, hash).Step());
  if (!row) {
    return NotFound("no device with fingerprint " + hash + " in " + path() +
                    ": profile the device first (`edgecost profile`)");
  }
  return FingerprintRow{stmt.Int(0), stmt.Text(1)};
}

Result<int64_t> CostDb::UpsertDevice(const v1::Device& device) {
  if (device.name().empty()) return InvalidArgument("a device needs a name");
  EC_ASSIGN_OR_RETURN(std::string kind, DeviceKindText(device));
  const std::string& hash = device.fingerprint().hash();
  if (hash.empty()) return InvalidArgument("device '" + device.name() + "' has no fingerprint hash");
  const std::string now = NowUtc();

  EC_ASSIGN_OR_RETURN(Transaction tx, Write());
  EC_ASSIGN_OR_RETURN(
      Statement insert,
      db_.Prepare("INSERT INTO devices (name, kind, created_at) VALUES (?, ?, ?) ON CONFLICT (name) DO NOTHING"));
  EC_RETURN_IF_ERROR(insert.Bind(1, device.name()).Bind(2, kind).Bind(3, now).Run());
  EC_ASSIGN_OR_RETURN(Statement select, db_.Prepare("SELECT id, kind FROM devices WHERE name = ?"));
  EC_ASSIGN_OR_RETURN(bool found, select.Bind(1, device.name()).Step());
  if (!found) return Internal("device '" + device.name() + "' vanished from " + path());
  const int64_t device_id = select.Int(0);
  if (select.Text(1) != kind) {
    return InvalidArgument("device '" + device.name() + "' is recorded as " + select.Text(1) + ", not " + kind +
                           ": give the " + kind + " device another name");
  }

  EC_ASSIGN_OR_RETURN(Statement existing,
                      db_.Prepare("SELECT f.device_id, d.name, f.superseded_at IS NOT NULL FROM fingerprints f "
                                  "JOIN devices d ON d.id = f.device_id WHERE f.hash = ?"));
  EC_ASSIGN_OR_RETURN(bool known, existing.Bind(1, hash).Step());
  if (known && existing.Int(0) != device_id) {
    return InvalidArgument("fingerprint " + hash + " is already recorded for device '" + existing.Text(1) +
                           "': use that name for this device");
  }
  if (!known || existing.Int(2) != 0) {
    // Supersede the current fingerprint before another becomes current (one current per device).
    EC_ASSIGN_OR_RETURN(
        Statement supersede,
        db_.Prepare("UPDATE fingerprints SET superseded_at = ? WHERE device_id = ? AND superseded_at IS NULL"));
    EC_RETURN_IF_ERROR(supersede.Bind(1, now).Bind(2, device_id).Run());
    if (known) {  // the hardware went back to an earlier state; its costs apply again
      EC_ASSIGN_OR_RETURN(Statement revive, db_.Prepare("UPDATE fingerprints SET superseded_at = NULL WHERE hash = ?"));
      EC_RETURN_IF_ERROR(revive.Bind(1, hash).Run());
    } else {
      EC_ASSIGN_OR_RETURN(
          Statement add,
          db_.Prepare("INSERT INTO fingerprints (device_id, hash, fingerprint, first_seen_at) VALUES (?, ?, ?, ?)"));
      EC_RETURN_IF_ERROR(
          add.Bind(1, device_id).Bind(2, hash).BindBlob(3, Serialize(device.fingerprint())).Bind(4, now).Run());
    }
  }
  EC_RETURN_IF_ERROR(tx.Commit());
  return device_id;
}

Result<std::vector<v1::Device>> CostDb::ReadDevices(const std::optional<std::string>& name) {
  EC_ASSIGN_OR_RETURN(Statement stmt,
                      db_.Prepare("SELECT d.name, d.kind, f.fingerprint, f.superseded_at IS NOT NULL FROM devices d "
                                  "JOIN fingerprints f ON f.device_id = d.id WHERE CAST(?1 AS TEXT) IS NULL OR d.name = ?1 "
                                  "ORDER BY d.name, f.superseded_at IS NOT NULL, f.superseded_at DESC, f.id DESC"));
  stmt.Bind(1, name);
  std::vector<v1::Device> devices;
  EC_RETURN_IF_ERROR(ForEachRow(stmt, [&]() -> Status {
    if (devices.empty() || devices.back().name() != stmt.Text(0)) {
      devices.emplace_back().set_name(stmt.Text(0));
      devices.back().set_kind(stmt.Text(1) == "preset" ? v1::Device::KIND_PRESET : v1::Device::KIND_MEASURED);
    }
    v1::Device& device = devices.back();
    EC_ASSIGN_OR_RETURN(v1::Fingerprint fingerprint, Parse<v1::Fingerprint>(stmt.Blob(2), "fingerprint", path()));
    *(stmt.Int(3) == 0 ? device.mutable_fingerprint() : device.add_history()) = std::move(fingerprint);
    return Status::Ok();
  }));
  return devices;
}

Result<v1::Device> CostDb::GetDevice(const std::string& name) {
  EC_ASSIGN_OR_RETURN(std::vector<v1::Device> devices, ReadDevices(name));
  if (devices.empty()) return NotFound("no device '" + name + "' in " + path() + ": see `edgecost db info`");
  return std::move(devices.front());
}

Result<std::vector<v1::Device>> CostDb::ListDevices() { return ReadDevices(std::nullopt); }

Result<std::optional<std::string>> CostDb::DeviceWithFingerprint(const std::string& fingerprint_hash) {
  EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare("SELECT d.name FROM fingerprints f JOIN devices d ON d.id = "
                                                  "f.device_id WHERE f.hash = ?"));
  EC_ASSIGN_OR_RETURN(bool found, stmt.Bind(1, fingerprint_hash).Step());
  return found ? std::optional<std::string>(stmt.Text(0)) : std::nullopt;
}

Result<std::vector<FingerprintRecord>> CostDb::ListFingerprintHistory(const std::string& device) {
  EC_ASSIGN_OR_RETURN(Statement stmt,
                      db_.Prepare("SELECT f.fingerprint, f.first_seen_at, coalesce(f.superseded_at, '') FROM "
                                  "fingerprints f JOIN devices d ON d.id = f.device_id WHERE d.name = ? "
                                  "ORDER BY f.first_seen_at DESC, f.id DESC"));
  stmt.Bind(1, device);
  std::vector<FingerprintRecord> history;
  EC_RETURN_IF_ERROR(ForEachRow(stmt, [&]() -> Status {
    FingerprintRecord& record = history.emplace_back();
    EC_ASSIGN_OR_RETURN(record.fingerprint, Parse<v1::Fingerprint>(stmt.Blob(0), "fingerprint", path()));
    record.first_seen_at = stmt.Text(1);
    record.superseded_at = stmt.Text(2);
    return Status::Ok();
  }));
  return history;
}

}  // namespace edgecost::costdb
