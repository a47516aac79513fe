#include "model/model.h"

#include "model/arch/registry.h"

namespace deepinfer {

Result<std::unique_ptr<Model>> Model::load(const std::string& path) {
  DI_ASSIGN_OR_RETURN(std::unique_ptr<TensorSource> source, open_tensor_source(path));
  DI_ASSIGN_OR_RETURN(std::string arch, source->metadata().get_string("general.architecture"));
  const ArchEntry* entry = find_architecture(arch);
  if (entry == nullptr) {
    std::string known;
    for (const ArchEntry& e : registered_architectures()) known += (known.empty() ? "" : ", ") + std::string(e.name);
    return unimplemented(path + ": architecture '" + arch + "' is not supported (supported: " + known + ")");
  }
  return entry->create(std::move(source));
}

}  // namespace deepinfer
