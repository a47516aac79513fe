// GGUF reader. Layout of a file (little-endian):
//
//   "GGUF"  uint32 version  uint64 n_tensors  uint64 n_kv
//   n_kv x      { string key, uint32 value type, value }
//   n_tensors x { string name, uint32 n_dims, uint64 dims[n_dims] (innermost first),
//                 uint32 ggml type, uint64 offset (relative to the data section) }
//   padding to general.alignment (default 32), then the data section.
//
// A string is uint64 length + bytes; an array is uint32 element type + uint64 count + items.
// Every count and length is checked against the bytes left before anything is allocated for
// it, and all offset arithmetic is checked for overflow, so a damaged or hostile file gives
// one error naming the file and never a crash or an out-of-bounds read.
#include "model/loader/gguf.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <optional>
#include <unordered_map>
#include <utility>

#include "core/mapped_file.h"
#include "model/loader/ds4_gguf.h"
#include "model/loader/gguf_parse.h"

namespace deepinfer {

static_assert(std::endian::native == std::endian::little, "GGUF tensors are used in place: little-endian only");

namespace {

// Tensor data offsets are multiples of the alignment, so a multiple of 8 keeps every block
// field (halves, floats) naturally aligned; the GGUF specification requires it.
constexpr uint64_t kMinAlignment = 8;
constexpr uint64_t kMaxAlignment = uint64_t{1} << 31;  // general.alignment is a uint32
constexpr uint64_t kMaxTensors = uint64_t{1} << 20;

// Smallest encodings, to bound a count by the bytes left before trusting it.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;              // empty key, value type, one-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // empty name, n_dims 0, type, offset

std::optional<uint64_t> meta_type_size(uint32_t raw) {
  switch (static_cast<MetaType>(raw)) {
    case MetaType::kU8:
    case MetaType::kI8:
    case MetaType::kBool: return 1;
    case MetaType::kU16:
    case MetaType::kI16: return 2;
    case MetaType::kU32:
    case MetaType::kI32:
    case MetaType::kF32: return 4;
    case MetaType::kU64:
    case MetaType::kI64:
    case MetaType::kF64: return 8;
    case MetaType::kString: return 8;  // at least its length
    case MetaType::kArray: return 12;  // at least its element type and count
  }
  return std::nullopt;
}

bool is_integer(MetaType t) {
  switch (t) {
    case MetaType::kU8:
    case MetaType::kI8:
    case MetaType::kU16:
    case MetaType::kI16:
    case MetaType::kU32:
    case MetaType::kI32:
    case MetaType::kU64:
    case MetaType::kI64: return true;
    default: return false;
  }
}

// Printable ASCII as is, anything else as \xNN: for magic bytes and names in messages.
std::string quoted_bytes(const uint8_t* p, size_t n) {
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\\') {
      s += static_cast<char>(p[i]);
    } else {
      s += "\\x";
      s += kHex[p[i] >> 4];
      s += kHex[p[i] & 15];
    }
  }
  return s;
}

std::string printable(const std::string& s) {
  constexpr size_t kMaxShown = 80;
  std::string out = quoted_bytes(reinterpret_cast<const uint8_t*>(s.data()), std::min(s.size(), kMaxShown));
  if (s.size() > kMaxShown) out += "...";
  return out;
}

class Parser {
 public:
  Parser(std::span<const uint8_t> bytes, const std::string& path) : bytes_(bytes), path_(path) {}

  Result<GgufContents> parse() {
    DI_RETURN_IF_ERROR(read_header());
    for (uint64_t i = 0; i < n_kv_; ++i) DI_RETURN_IF_ERROR(read_kv(i));
    DI_RETURN_IF_ERROR(read_alignment());
    if (n_tensors_ > remaining() / kMinTensorInfoBytes) {
      return truncated_count("tensor infos", n_tensors_, kMinTensorInfoBytes);
    }
    for (uint64_t i = 0; i < n_tensors_; ++i) DI_RETURN_IF_ERROR(read_tensor_info(i));
    DI_RETURN_IF_ERROR(place_tensors());
    return std::move(out_);
  }

 private:
  uint64_t size() const { return bytes_.size(); }
  uint64_t remaining() const { return size() - pos_; }

  // ---- primitive reads: false when the bytes run out (nothing consumed; the failed read's
  // start and length are kept for the message) ----

  bool take(uint64_t n, const uint8_t** p) {
    if (n > remaining()) {
      fail_start_ = pos_;
      fail_len_ = n;
      fail_is_string_ = false;
      return false;
    }
    *p = bytes_.data() + pos_;
    pos_ += n;
    return true;
  }

  template <typename T>
  bool read(T* v) {
    const uint8_t* p;
    if (!take(sizeof(T), &p)) return false;
    std::memcpy(v, p, sizeof(T));
    return true;
  }

  bool read_string(std::string* s) {
    const uint64_t start = pos_;
    uint64_t len;
    if (!read(&len)) return false;
    const uint8_t* p;
    if (!take(len, &p)) {
      fail_start_ = start;
      fail_len_ = len;  // reported as a string of `len` bytes after its 8-byte length
      fail_is_string_ = true;
      pos_ = start;
      return false;
    }
    s->assign(reinterpret_cast<const char*>(p), len);
    return true;
  }

  // ---- errors ----

  Status error(StatusCode code, const std::string& msg) const { return {code, path_ + ": " + msg}; }

  // "model.gguf: truncated: tensor info 12 ('blk.1.attn_q.weight') runs past the end of the
  //  file (offset 1234, file size 1000)"
  Status truncated(const std::string& what) const {
    std::string where;
    uint64_t end;
    const uint64_t extra = fail_is_string_ ? 8 : 0;
    if (!__builtin_add_overflow(fail_start_, fail_len_, &end) && !__builtin_add_overflow(end, extra, &end)) {
      where = "offset " + std::to_string(end);
    } else {
      where = "offset " + std::to_string(fail_start_) + " + " + std::to_string(fail_len_);
    }
    std::string detail;
    if (fail_is_string_) detail = " (a string of " + std::to_string(fail_len_) + " bytes)";
    return error(StatusCode::kDataLoss, "truncated: " + what + detail + " runs past the end of the file (" + where +
                                            ", file size " + std::to_string(size()) + ")");
  }

  Status truncated_count(const std::string& what, uint64_t count, uint64_t min_bytes) const {
    return error(StatusCode::kDataLoss, "truncated: the file claims " + std::to_string(count) + " " + what +
                                            " (at least " + std::to_string(min_bytes) + " bytes each), but only " +
                                            std::to_string(remaining()) + " bytes are left at offset " +
                                            std::to_string(pos_) + " (file size " + std::to_string(size()) + ")");
  }

  // "metadata entry 3 ('tokenizer.ggml.scores') item 17"
  std::string kv_where() const {
    std::string s = "metadata entry " + std::to_string(kv_index_);
    if (have_key_) s += " ('" + printable(key_) + "')";
    for (uint64_t i : item_path_) s += " item " + std::to_string(i);
    return s;
  }

  std::string tensor_where(uint64_t index, const std::string* name) const {
    std::string s = "tensor info " + std::to_string(index);
    if (name) s += " ('" + printable(*name) + "')";
    return s;
  }

  // ---- header ----

  Status read_header() {
    const uint8_t* magic;
    if (!take(4, &magic)) return truncated("the header");
    if (std::memcmp(magic, "GGUF", 4) != 0) {
      return error(StatusCode::kDataLoss,
                   "not a GGUF file (it starts with '" + quoted_bytes(magic, 4) + "', expected 'GGUF')");
    }
    uint32_t version;
    if (!read(&version)) return truncated("the header");
    const uint32_t swapped = __builtin_bswap32(version);
    if (version != 2 && version != 3 && swapped >= 1 && swapped <= 3) {
      return error(StatusCode::kUnimplemented, "big-endian GGUF files are not supported");
    }
    if (version != 2 && version != 3) {
      return error(StatusCode::kUnimplemented,
                   "GGUF version " + std::to_string(version) + " is not supported (only versions 2 and 3)");
    }
    out_.version = version;
    if (!read(&n_tensors_) || !read(&n_kv_)) return truncated("the header");
    // Both counts must fit in what is left, together, before any loop trusts them.
    if (n_kv_ > remaining() / kMinKvBytes) return truncated_count("metadata entries", n_kv_, kMinKvBytes);
    if (n_tensors_ > remaining() / kMinTensorInfoBytes) {
      return truncated_count("tensor infos", n_tensors_, kMinTensorInfoBytes);
    }
    if (n_kv_ * kMinKvBytes + n_tensors_ * kMinTensorInfoBytes > remaining()) {
      return error(StatusCode::kDataLoss, "truncated: the file claims " + std::to_string(n_kv_) +
                                              " metadata entries and " + std::to_string(n_tensors_) +
                                              " tensor infos, more than its " + std::to_string(size()) +
                                              " bytes can hold");
    }
    if (n_tensors_ > kMaxTensors) {
      return error(StatusCode::kResourceExhausted, "the file claims " + std::to_string(n_tensors_) +
                                                       " tensors; this reader accepts at most " +
                                                       std::to_string(kMaxTensors));
    }
    return {};
  }

  // ---- metadata ----

  Status read_kv(uint64_t index) {
    kv_index_ = index;
    have_key_ = false;
    item_path_.clear();
    if (!read_string(&key_)) return truncated(kv_where() + " key");
    have_key_ = true;
    if (out_.metadata.has(key_)) {
      return error(StatusCode::kDataLoss, kv_where() + ": duplicate key '" + printable(key_) + "'");
    }
    uint32_t type;
    if (!read(&type)) return truncated(kv_where());
    DI_RETURN_IF_ERROR(count_values(1));
    DI_ASSIGN_OR_RETURN(MetaValue value, read_value(type, 0));
    out_.metadata.set(key_, std::move(value));
    return {};
  }

  Status count_values(uint64_t n) {
    if (n > kGgufMaxMetadataValues - n_values_) {
      return error(StatusCode::kResourceExhausted, kv_where() + ": more than " +
                                                       std::to_string(kGgufMaxMetadataValues) +
                                                       " metadata values in the file");
    }
    n_values_ += n;
    return {};
  }

  template <typename T>
  Result<T> read_scalar() {
    T v;
    if (!read(&v)) return truncated(kv_where());
    return v;
  }

  Result<MetaValue> read_value(uint32_t raw_type, int depth) {
    const auto type = static_cast<MetaType>(raw_type);
    switch (type) {
      case MetaType::kU8: {
        DI_ASSIGN_OR_RETURN(uint8_t v, read_scalar<uint8_t>());
        return MetaValue::of_uint(v, type);
      }
      case MetaType::kI8: {
        DI_ASSIGN_OR_RETURN(int8_t v, read_scalar<int8_t>());
        return MetaValue::of_int(v, type);
      }
      case MetaType::kU16: {
        DI_ASSIGN_OR_RETURN(uint16_t v, read_scalar<uint16_t>());
        return MetaValue::of_uint(v, type);
      }
      case MetaType::kI16: {
        DI_ASSIGN_OR_RETURN(int16_t v, read_scalar<int16_t>());
        return MetaValue::of_int(v, type);
      }
      case MetaType::kU32: {
        DI_ASSIGN_OR_RETURN(uint32_t v, read_scalar<uint32_t>());
        return MetaValue::of_uint(v, type);
      }
      case MetaType::kI32: {
        DI_ASSIGN_OR_RETURN(int32_t v, read_scalar<int32_t>());
        return MetaValue::of_int(v, type);
      }
      case MetaType::kU64: {
        DI_ASSIGN_OR_RETURN(uint64_t v, read_scalar<uint64_t>());
        return MetaValue::of_uint(v, type);
      }
      case MetaType::kI64: {
        DI_ASSIGN_OR_RETURN(int64_t v, read_scalar<int64_t>());
        return MetaValue::of_int(v, type);
      }
      case MetaType::kF32: {
        DI_ASSIGN_OR_RETURN(float v, read_scalar<float>());
        return MetaValue::of_float(v, type);
      }
      case MetaType::kF64: {
        DI_ASSIGN_OR_RETURN(double v, read_scalar<double>());
        return MetaValue::of_float(v, type);
      }
      case MetaType::kBool: {
        DI_ASSIGN_OR_RETURN(uint8_t v, read_scalar<uint8_t>());
        if (v > 1) {
          return error(StatusCode::kDataLoss, kv_where() + ": bool value " + std::to_string(v) + " is neither 0 nor 1");
        }
        return MetaValue::of_bool(v != 0);
      }
      case MetaType::kString: {
        std::string s;
        if (!read_string(&s)) return truncated(kv_where());
        return MetaValue::of_string(std::move(s));
      }
      case MetaType::kArray: return read_array(depth);
    }
    return error(StatusCode::kDataLoss, kv_where() + " has unknown value type " + std::to_string(raw_type));
  }

  Result<MetaValue> read_array(int depth) {
    if (depth >= kGgufMaxArrayDepth) {
      return error(StatusCode::kDataLoss,
                   kv_where() + ": arrays nested more than " + std::to_string(kGgufMaxArrayDepth) + " deep");
    }
    uint32_t element_type;
    uint64_t count;
    if (!read(&element_type) || !read(&count)) return truncated(kv_where() + " array header");
    const std::optional<uint64_t> min_size = meta_type_size(element_type);
    if (!min_size) {
      return error(StatusCode::kDataLoss,
                   kv_where() + " is an array of unknown value type " + std::to_string(element_type));
    }
    if (count > remaining() / *min_size) {
      return error(StatusCode::kDataLoss,
                   "truncated: " + kv_where() + " claims an array of " + std::to_string(count) + " " +
                       std::string(meta_type_name(static_cast<MetaType>(element_type))) +
                       " values, which cannot fit in the " + std::to_string(remaining()) +
                       " bytes left at offset " + std::to_string(pos_) + " (file size " +
                       std::to_string(size()) + ")");
    }
    DI_RETURN_IF_ERROR(count_values(count));
    MetaArray array;
    array.element_type = static_cast<MetaType>(element_type);
    array.items.reserve(count);
    item_path_.push_back(0);
    for (uint64_t i = 0; i < count; ++i) {
      item_path_.back() = i;
      DI_ASSIGN_OR_RETURN(MetaValue item, read_value(element_type, depth + 1));
      array.items.push_back(std::move(item));
    }
    item_path_.pop_back();
    return MetaValue::of_array(std::move(array));
  }

  Status read_alignment() {
    const MetaValue* v = out_.metadata.find("general.alignment");
    if (v == nullptr) return {};
    if (!is_integer(v->type)) {
      return error(StatusCode::kDataLoss, "general.alignment has type " + std::string(meta_type_name(v->type)) +
                                              ", expected uint32");
    }
    uint64_t a = 0;
    if (const auto* u = std::get_if<uint64_t>(&v->value)) a = *u;
    if (const auto* i = std::get_if<int64_t>(&v->value)) a = *i < 0 ? 0 : static_cast<uint64_t>(*i);
    const bool valid = std::has_single_bit(a) && a >= kMinAlignment && a <= kMaxAlignment;
    if (!valid) {
      std::string shown = std::to_string(a);
      if (const auto* i = std::get_if<int64_t>(&v->value)) shown = std::to_string(*i);
      return error(StatusCode::kDataLoss, "general.alignment is " + shown +
                                              "; it must be a power of two between 8 and 2^31");
    }
    out_.alignment = a;
    return {};
  }

  // ---- tensor infos ----

  Status read_tensor_info(uint64_t index) {
    TensorView t;
    t.file = path_;
    if (!read_string(&t.name)) return truncated(tensor_where(index, nullptr) + " name");
    const std::string where = tensor_where(index, &t.name);
    uint32_t n_dims;
    if (!read(&n_dims)) return truncated(where);
    if (n_dims > kGgufMaxDims) {
      return error(StatusCode::kDataLoss, where + " has " + std::to_string(n_dims) + " dimensions; at most " +
                                              std::to_string(kGgufMaxDims) + " are allowed");
    }
    uint64_t dims[kGgufMaxDims];
    for (uint32_t d = 0; d < n_dims; ++d) {
      if (!read(&dims[d])) return truncated(where);
    }
    uint32_t type_id;
    uint64_t offset;
    if (!read(&type_id) || !read(&offset)) return truncated(where);

    if (!names_.emplace(t.name, index).second) {
      return error(StatusCode::kDataLoss, where + ": duplicate tensor name (also tensor info " +
                                              std::to_string(names_[t.name]) + ")");
    }
    const std::optional<DType> dtype = dtype_from_ggml_id(type_id);
    if (!dtype) {
      return error(StatusCode::kUnimplemented,
                   "tensor '" + printable(t.name) + "' has unknown type id " + std::to_string(type_id));
    }
    t.dtype = *dtype;
    const DTypeTraits traits = *dtype_traits(t.dtype);

    // dims are innermost first; shapes are outermost first.
    int64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      if (dims[d] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          __builtin_mul_overflow(n_elements, static_cast<int64_t>(dims[d]), &n_elements)) {
        return error(StatusCode::kDataLoss, where + " has dimensions whose element count overflows");
      }
      t.shape.insert(t.shape.begin(), static_cast<int64_t>(dims[d]));
    }
    const int64_t row = n_dims == 0 ? 1 : static_cast<int64_t>(dims[0]);
    if (row % traits.block_size != 0) {
      return error(StatusCode::kDataLoss, where + " has type " + std::string(traits.name) + " and rows of " +
                                              std::to_string(row) + " elements, not a multiple of its block size " +
                                              std::to_string(traits.block_size));
    }
    uint64_t n_bytes;
    if (__builtin_mul_overflow(static_cast<uint64_t>(n_elements / traits.block_size), traits.block_bytes,
                               &n_bytes)) {
      return error(StatusCode::kDataLoss, where + " is too large: its byte size overflows");
    }
    t.n_bytes = n_bytes;
    if (offset % out_.alignment != 0) {
      return error(StatusCode::kDataLoss, where + " has data offset " + std::to_string(offset) +
                                              ", not a multiple of the alignment " + std::to_string(out_.alignment));
    }
    data_offsets_.push_back(offset);
    out_.tensors.push_back(std::move(t));
    return {};
  }

  Status place_tensors() {
    // The data section starts at the first aligned offset after the infos (pos_ <= size, and
    // the alignment is at most 2^31, so this cannot overflow).
    out_.data_offset = (pos_ + out_.alignment - 1) / out_.alignment * out_.alignment;
    for (size_t i = 0; i < out_.tensors.size(); ++i) {
      TensorView& t = out_.tensors[i];
      uint64_t begin = 0, end = 0;
      const bool overflow = __builtin_add_overflow(out_.data_offset, data_offsets_[i], &begin) ||
                            __builtin_add_overflow(begin, t.n_bytes, &end);
      if (overflow || end > size()) {
        const std::string shown = overflow ? "data offset " + std::to_string(data_offsets_[i]) + " + " +
                                                 std::to_string(t.n_bytes) + " bytes"
                                           : "offset " + std::to_string(end);
        return error(StatusCode::kDataLoss, "truncated: tensor '" + printable(t.name) + "' (" +
                                                std::to_string(t.n_bytes) +
                                                " bytes) runs past the end of the file (" + shown +
                                                ", file size " + std::to_string(size()) + ")");
      }
      t.data = bytes_.data() + begin;
    }
    // Tensors may not share bytes: overlapping data is a damaged index.
    std::vector<size_t> order;
    for (size_t i = 0; i < out_.tensors.size(); ++i) {
      if (out_.tensors[i].n_bytes > 0) order.push_back(i);
    }
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return out_.tensors[a].data < out_.tensors[b].data; });
    for (size_t k = 1; k < order.size(); ++k) {
      const TensorView& prev = out_.tensors[order[k - 1]];
      const TensorView& cur = out_.tensors[order[k]];
      if (prev.data + prev.n_bytes > cur.data) {
        return error(StatusCode::kDataLoss, "the data of tensors '" + printable(prev.name) + "' and '" +
                                                printable(cur.name) + "' overlap");
      }
    }
    return {};
  }

  std::span<const uint8_t> bytes_;
  const std::string& path_;
  uint64_t pos_ = 0;
  uint64_t fail_start_ = 0;
  uint64_t fail_len_ = 0;
  bool fail_is_string_ = false;

  uint64_t n_tensors_ = 0;
  uint64_t n_kv_ = 0;
  uint64_t n_values_ = 0;
  uint64_t kv_index_ = 0;
  std::string key_;
  bool have_key_ = false;
  std::vector<uint64_t> item_path_;

  std::vector<uint64_t> data_offsets_;  // per tensor, relative to the data section
  std::unordered_map<std::string, uint64_t> names_;
  GgufContents out_;
};

class GgufSource final : public TensorSource {
 public:
  GgufSource(MappedFile file, GgufContents contents) : file_(std::move(file)), contents_(std::move(contents)) {}

  const std::string& path() const override { return file_.path(); }
  const Metadata& metadata() const override { return contents_.metadata; }
  const std::vector<TensorView>& tensors() const override { return contents_.tensors; }

 private:
  MappedFile file_;  // the views in contents_ point into it
  GgufContents contents_;
};

}  // namespace

Result<GgufContents> parse_gguf(std::span<const uint8_t> bytes, const std::string& path) {
  return Parser(bytes, path).parse();
}

Result<std::unique_ptr<TensorSource>> open_gguf(const std::string& path) {
  DI_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path));
  DI_ASSIGN_OR_RETURN(GgufContents contents, parse_gguf(file.bytes(), path));
  if (Result<std::string> arch = contents.metadata.get_string_or("general.architecture", "");
      arch.ok() && *arch == kDs4Architecture) {
    DI_RETURN_IF_ERROR(adapt_ds4_gguf(contents, path));
  }
  return std::unique_ptr<TensorSource>(std::make_unique<GgufSource>(std::move(file), std::move(contents)));
}

}  // namespace deepinfer
