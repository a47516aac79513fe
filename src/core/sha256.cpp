#include "core/sha256.h"

#include <openssl/evp.h>

#include <cstdio>
#include <memory>
#include <vector>

namespace deepinfer {

namespace {
std::string to_hex(const unsigned char* digest, unsigned int n) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  out.reserve(n * 2);
  for (unsigned int i = 0; i < n; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 15]);
  }
  return out;
}
using Ctx = std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)>;
}  // namespace

std::string sha256_hex(std::span<const uint8_t> bytes) {
  Ctx ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr);
  EVP_DigestUpdate(ctx.get(), bytes.data(), bytes.size());
  EVP_DigestFinal_ex(ctx.get(), digest, &n);
  return to_hex(digest, n);
}

Result<std::string> sha256_file_hex(const std::string& path) {
  std::unique_ptr<FILE, decltype(&std::fclose)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return not_found("cannot read '" + path + "'");
  Ctx ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr);
  std::vector<unsigned char> buf(1 << 20);
  size_t got;
  while ((got = std::fread(buf.data(), 1, buf.size(), f.get())) > 0) {
    EVP_DigestUpdate(ctx.get(), buf.data(), got);
  }
  if (std::ferror(f.get())) return data_loss("read error on '" + path + "'");
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx.get(), digest, &n);
  return to_hex(digest, n);
}

}  // namespace deepinfer
