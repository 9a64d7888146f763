#include "ceilings_cache.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

namespace mxmoe::cli {
namespace {

nlohmann::json identity_json(const DeviceIdentity& id) {
  return {{"name", id.name}, {"uuid", id.uuid}, {"pci_bus_id", id.pci_bus_id}, {"driver", id.driver}};
}

std::string today_utc() {
  const std::time_t t = std::time(nullptr);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&t));
  return buf;
}

}  // namespace

std::string ceilings_cache_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/mxmoe";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/mxmoe";
  return "";
}

std::string ceilings_cache_file(const std::string& dir, const DeviceIdentity& id) {
  std::string uuid;
  for (char ch : id.uuid)
    if ((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '-') uuid += ch;
  return dir + "/ceilings-" + uuid + ".json";
}

bool load_cached_ceilings(const std::string& dir, const DeviceIdentity& id, DeviceCeilings* out) {
  const std::string path = ceilings_cache_file(dir, id);
  std::ifstream f(path);
  if (!f) return false;
  const nlohmann::json j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return false;
  try {
    if (j.at("format").get<int>() != kCeilingsCacheFormat || j.at("identity") != identity_json(id)) return false;
    DeviceCeilings c = j.at("ceilings").get<DeviceCeilings>();
    c.cached_on = j.at("measured_on").get<std::string>();
    c.cache_file = path;
    *out = c;
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

Status store_ceilings(const std::string& dir, const DeviceIdentity& id, const DeviceCeilings& c) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IoError(fmt::format("{}: {}", dir, ec.message()));
  const std::string path = ceilings_cache_file(dir, id);
  const std::string tmp = fmt::format("{}.{}.tmp", path, getpid());
  {
    std::ofstream f(tmp);
    f << nlohmann::json{{"format", kCeilingsCacheFormat},
                        {"identity", identity_json(id)},
                        {"measured_on", today_utc()},
                        {"ceilings", c}}
             .dump(2)
      << "\n";
    if (!f) {
      std::remove(tmp.c_str());
      return Status::IoError(tmp + ": write failed");
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    return Status::IoError(fmt::format("{}: {}", path, ec.message()));
  }
  return Status::Ok();
}

}  // namespace mxmoe::cli
