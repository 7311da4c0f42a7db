#include "runtime/npy_file.h"

#include "runtime/host_elements.h"

#include "kfuse/error.h"

#include <fmt/format.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>

namespace kfuse::rt {
namespace {

const char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;

// The header is a Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (3, 6), }
class HeaderParser {
public:
  HeaderParser(const std::string &path, const std::string &text) : path_(path), text_(text) {}

  // key -> the value's text: a quoted string's contents, True/False, or "(3, 6)".
  std::map<std::string, std::string> parse() {
    std::map<std::string, std::string> fields;
    expect('{');
    while (skip_space(), peek() != '}') {
      std::string key = quoted();
      expect(':');
      skip_space();
      std::string value = peek() == '\'' || peek() == '"' ? quoted()
                          : peek() == '('                 ? tuple()
                                                          : word();
      if (!fields.emplace(key, value).second)
        fail(fmt::format("key '{}' appears twice", key));
      skip_space();
      if (peek() == ',')
        ++pos_;
    }
    ++pos_;
    skip_space();
    if (pos_ != text_.size())
      fail("text after the closing '}'");
    return fields;
  }

  [[noreturn]] void fail(const std::string &why) const {
    throw Error(fmt::format("{}: not a .npy header kfuse reads ({}): {}", path_, why, text_));
  }

private:
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_])))
      ++pos_;
  }
  void expect(char c) {
    skip_space();
    if (peek() != c)
      fail(fmt::format("expected '{}' at offset {}", c, pos_));
    ++pos_;
  }
  std::string quoted() {
    skip_space();
    char q = peek();
    if (q != '\'' && q != '"')
      fail(fmt::format("expected a quoted key at offset {}", pos_));
    size_t end = text_.find(q, pos_ + 1);
    if (end == std::string::npos)
      fail("unterminated string");
    std::string s = text_.substr(pos_ + 1, end - pos_ - 1);
    pos_ = end + 1;
    return s;
  }
  std::string tuple() {
    size_t end = text_.find(')', pos_);
    if (end == std::string::npos)
      fail("unterminated shape tuple");
    std::string s = text_.substr(pos_, end - pos_ + 1);
    pos_ = end + 1;
    return s;
  }
  std::string word() {
    size_t start = pos_;
    while (std::isalnum(static_cast<unsigned char>(peek())))
      ++pos_;
    return text_.substr(start, pos_ - start);
  }

  const std::string &path_;
  const std::string &text_;
  size_t pos_ = 0;
};

std::vector<int64_t> parse_shape(const HeaderParser &parser, const std::string &tuple) {
  std::vector<int64_t> shape;
  size_t i = 1; // after '('
  while (true) {
    while (i < tuple.size() && (tuple[i] == ' ' || tuple[i] == ','))
      ++i;
    if (i >= tuple.size() || tuple[i] == ')')
      break;
    size_t start = i;
    while (i < tuple.size() && std::isdigit(static_cast<unsigned char>(tuple[i])))
      ++i;
    if (i == start || i - start > 12)
      parser.fail(fmt::format("shape {} is not a tuple of non-negative integers", tuple));
    shape.push_back(std::stoll(tuple.substr(start, i - start)));
  }
  return shape;
}

std::string shape_text(const std::vector<int64_t> &shape) {
  return fmt::format("({})", fmt::join(shape, ", "));
}

} // namespace

NpyArray read_npy(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < kMagicSize + 4 || bytes.compare(0, kMagicSize, kMagic, kMagicSize) != 0)
    throw Error(
        fmt::format("{}: not a .npy file (no \\x93NUMPY magic; write it with numpy.save)", path));
  int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9]) << 8;
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12)
      throw Error(fmt::format("{}: truncated .npy header", path));
    for (int i = 3; i >= 0; --i)
      header_len = header_len << 8 | static_cast<unsigned char>(bytes[8 + i]);
    header_start = 12;
  } else {
    throw Error(fmt::format("{}: .npy format version {}.{} is not one kfuse reads (1.0, 2.0, 3.0)",
                            path, major, static_cast<int>(static_cast<unsigned char>(bytes[7]))));
  }
  if (bytes.size() < header_start + header_len)
    throw Error(fmt::format("{}: truncated .npy header", path));
  std::string header = bytes.substr(header_start, header_len);
  HeaderParser parser(path, header);
  std::map<std::string, std::string> fields = parser.parse();
  for (const char *key : {"descr", "fortran_order", "shape"})
    if (!fields.count(key))
      parser.fail(fmt::format("no '{}'", key));
  if (fields.size() != 3)
    parser.fail("keys other than descr, fortran_order and shape");
  NpyArray a;
  a.shape = parse_shape(parser, fields["shape"]);
  const std::string &descr = fields["descr"];
  const std::map<std::string, DType> readable = {
      {"<f4", DType::F32}, {"<f2", DType::F16}, {"<i8", DType::I64}};
  if (!readable.count(descr))
    throw Error(fmt::format(
        "{}: dtype '{}' {}; kfuse reads float32 ('<f4'), float16 ('<f2') and int64 ('<i8', "
        "class indices): np.save(path, a.astype(np.float32)) (bf16 has no standard .npy type: "
        "save bf16 tensors as float32, kfuse rounds them to a bf16 declaration's type)",
        path, descr, shape_text(a.shape)));
  a.dtype = readable.at(descr);
  const size_t element = a.dtype == DType::F32 ? 4 : a.dtype == DType::I64 ? 8 : 2;
  if (fields["fortran_order"] != "False")
    throw Error(fmt::format(
        "{}: Fortran order {}; kfuse reads C order: np.save(path, np.ascontiguousarray(a))", path,
        shape_text(a.shape)));
  size_t count = 1;
  for (int64_t e : a.shape) {
    if (e > (int64_t(1) << 40) / static_cast<int64_t>(count == 0 ? 1 : count))
      throw Error(fmt::format("{}: shape {} is too large", path, shape_text(a.shape)));
    count *= static_cast<size_t>(e);
  }
  size_t data_start = header_start + header_len;
  const char *type_name = a.dtype == DType::F32   ? "float32"
                          : a.dtype == DType::I64 ? "int64"
                                                  : "float16";
  if (bytes.size() - data_start != count * element)
    throw Error(fmt::format("{}: shape {} needs {} bytes of {} data, the file has {}", path,
                            shape_text(a.shape), count * element, type_name,
                            bytes.size() - data_start));
  // Little-endian hosts: the file's bytes are the elements.
  a.data = decode_elements(bytes.data() + data_start, count, a.dtype);
  if (a.dtype == DType::I64)
    for (size_t i = 0; i < count; ++i)
      if (std::abs(a.data[i]) > 0x1p53)
        throw Error(fmt::format("{}: element {} ({}) is beyond 2^53, which kfuse's reference "
                                "holds exactly; class indices are far below",
                                path, i, static_cast<int64_t>(a.data[i])));
  return a;
}

void write_npy(const std::string &path, const std::vector<int64_t> &shape,
               const std::vector<double> &data, DType dtype) {
  if (dtype != DType::F32 && dtype != DType::I64)
    throw Error(
        fmt::format("internal error: {}: .npy files are written as float32 or int64", path));
  std::string tuple = shape.size() == 1 ? fmt::format("({},)", shape[0]) : shape_text(shape);
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
                                   dtype == DType::I64 ? "<i8" : "<f4", tuple);
  // Magic, version, length, header padded with spaces to a multiple of 64 bytes, then '\n'.
  size_t total = kMagicSize + 4 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  out.write(kMagic, kMagicSize);
  const char version_and_length[] = {1, 0, static_cast<char>(header.size() & 0xff),
                                     static_cast<char>(header.size() >> 8)};
  out.write(version_and_length, sizeof(version_and_length));
  out << header;
  const std::vector<uint8_t> elements = encode_elements(data, dtype);
  out.write(reinterpret_cast<const char *>(elements.data()),
            static_cast<std::streamsize>(elements.size()));
  // A small file is still in the stream's buffer here: only closing writes it, and fails.
  out.close();
  if (!out)
    throw Error(fmt::format("{}: cannot write", path));
}

} // namespace kfuse::rt
