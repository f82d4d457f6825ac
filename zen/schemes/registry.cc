#include "zen/schemes/registry.h"

#include "zen/core/error.h"
#include "zen/schemes/agsparse.h"
#include "zen/schemes/dense_ring.h"
#include "zen/schemes/omnireduce.h"
#include "zen/schemes/sparcml.h"
#include "zen/schemes/sparse_ps.h"
#include "zen/schemes/zen.h"

namespace zen {

void SchemeRegistry::Add(SchemeInfo info) {
  if (Find(info.id)) throw InvalidArgument("scheme '" + info.id + "' is registered twice");
  schemes_.push_back(std::move(info));
}

const SchemeInfo* SchemeRegistry::Find(std::string_view id) const {
  for (const auto& s : schemes_) {
    if (s.id == id) return &s;
  }
  return nullptr;
}

std::unique_ptr<Scheme> SchemeRegistry::Create(std::string_view id,
                                               const SchemeOptions& options) const {
  const SchemeInfo* info = Find(id);
  if (!info) {
    std::string known;
    for (const auto& s : schemes_) known += (known.empty() ? "" : ", ") + s.id;
    throw InvalidArgument("unknown scheme '" + std::string(id) + "' (known: " + known + ")");
  }
  return info->factory(options);
}

std::vector<std::string> SchemeRegistry::ids() const {
  std::vector<std::string> out;
  for (const auto& s : schemes_) out.push_back(s.id);
  return out;
}

SchemeRegistry BuiltinSchemes() {
  SchemeRegistry r;
  r.Add(DenseRingInfo());
  r.Add(AgSparseInfo());
  r.Add(SparcmlInfo());
  r.Add(OmniReduceInfo());
  r.Add(SparsePsInfo());
  r.Add(ZenInfo());
  // Further schemes register here, one line each.
  return r;
}

}  // namespace zen
