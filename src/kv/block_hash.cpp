#include "kv/block_hash.h"

#include <openssl/evp.h>

#include <memory>

namespace deepinfer::kv {

BlockHash hash_block(const BlockHash* parent, std::span<const int32_t> tokens, std::string_view extras) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr);
  const uint8_t has_parent = parent != nullptr;
  EVP_DigestUpdate(ctx.get(), &has_parent, 1);
  if (parent) EVP_DigestUpdate(ctx.get(), parent->bytes.data(), parent->bytes.size());
  const uint64_t n_tokens = tokens.size();
  EVP_DigestUpdate(ctx.get(), &n_tokens, sizeof(n_tokens));
  EVP_DigestUpdate(ctx.get(), tokens.data(), tokens.size_bytes());
  const uint64_t n_extras = extras.size();
  EVP_DigestUpdate(ctx.get(), &n_extras, sizeof(n_extras));
  EVP_DigestUpdate(ctx.get(), extras.data(), extras.size());
  BlockHash out;
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), out.bytes.data(), &len);
  return out;
}

}  // namespace deepinfer::kv
