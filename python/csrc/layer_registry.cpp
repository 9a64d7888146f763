#include "layer_registry.h"

#include <mutex>
#include <unordered_map>

namespace mxmoe::python {
namespace {

struct Registry {
  std::mutex mutex;
  std::unordered_map<int64_t, std::shared_ptr<const MoeLayer>> layers;
  int64_t next = 1;
};
Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

int64_t register_layer(std::unique_ptr<MoeLayer> layer) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const int64_t h = r.next++;
  r.layers.emplace(h, std::move(layer));
  return h;
}

std::shared_ptr<const MoeLayer> find_layer(int64_t handle) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = r.layers.find(handle);
  return it == r.layers.end() ? nullptr : it->second;
}

void release_layer(int64_t handle) {
  std::shared_ptr<const MoeLayer> gone;  // destroyed outside the lock (it frees device memory)
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    const auto it = r.layers.find(handle);
    if (it == r.layers.end()) return;
    gone = std::move(it->second);
    r.layers.erase(it);
  }
}

}  // namespace mxmoe::python
